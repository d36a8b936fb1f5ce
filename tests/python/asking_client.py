"""Tools that ask, driven by a real 2025-11-25 client: the official Python SDK (mcp==1.30.0).

Usage: asking_client.py MCP_URL

On 2025-11-25 a tool that asks for input makes the gateway send `elicitation/create`,
`sampling/createMessage` (or `roots/list`) to the client on the SSE response stream of the
`tools/call` (or, for a task, of `tasks/result`, tagged with the related-task `_meta`); the SDK's
callbacks answer, the SDK POSTs the answer, the tool resumes and the result follows on the same
stream; a task that asks in two rounds (the second asked only once the first is answered) asks
both, in turn, on the one `tasks/result` stream. This script checks that with `ClientSession`'s
own callbacks, the -32021 refusal of a tool that needs a capability the client did not declare,
logging relayed as `notifications/message`, and the prompts, completions and resources Conveyor
serves (ADR templates, task results).

The server must run with `--fixtures`. Prints one line per check (with its duration) and exits
non-zero on the first failure.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import (
    CallToolResult,
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    EmbeddedResource,
    ErrorData,
    LoggingMessageNotificationParams,
    PromptReference,
    TextContent,
    TextResourceContents,
)
from pydantic import AnyUrl

# `session.experimental` is marked deprecated in 1.30 (tasks move to an extension in 2.0); it is
# still the SDK's 2025-11-25 tasks API, which the task checks use.
warnings.simplefilter("ignore", DeprecationWarning)

RELATED_TASK = "io.modelcontextprotocol/related-task"
MISSING_CAPABILITY = -32021
READ_TIMEOUT = timedelta(seconds=30)

ADR_TEMPLATES = {"conveyor://adr-templates/nygard", "conveyor://adr-templates/madr"}
TASK_RESULT_TEMPLATE = "conveyor://tasks/{taskId}/result"

# What the callbacks answer with, so that the checks can look for it in the tools' results.
USERNAME = "ada-lovelace"
EMAIL = "ada@example.org"
MODEL_TEXT = "Paris is the capital of France (conveyor-python-check)"
MODEL_NAME = "conveyor-test-model"


@dataclass
class Asked:
    """One request the server sent the client, as the SDK's callback saw it."""

    method: str
    request_id: Any
    meta: dict[str, Any]
    params: Any


@dataclass
class Person:
    """Answers the server's requests like a person (elicitation) and a model (sampling) would, and
    records what was asked. `elicit_action` and `confirm` steer the next elicitation answers."""

    asked: list[Asked] = field(default_factory=list)
    elicit_action: str = "accept"
    confirm: bool = True
    # Actions for the next elicitations, one each, before `elicit_action` applies again.
    next_actions: list[str] = field(default_factory=list)

    @staticmethod
    def meta_of(context: RequestContext[ClientSession, Any]) -> dict[str, Any]:
        return context.meta.model_dump(by_alias=True, exclude_none=True) if context.meta is not None else {}

    async def elicit(
        self, context: RequestContext[ClientSession, Any], params: ElicitRequestParams
    ) -> ElicitResult | ErrorData:
        self.asked.append(Asked("elicitation/create", context.request_id, self.meta_of(context), params))
        action = self.next_actions.pop(0) if self.next_actions else self.elicit_action
        if action != "accept":
            return ElicitResult(action=action)  # type: ignore[arg-type]
        properties = set((getattr(params, "requestedSchema", None) or {}).get("properties", {}))
        content: dict[str, Any] = {}
        if "username" in properties:
            content["username"] = USERNAME
        if "email" in properties:
            content["email"] = EMAIL
        if "confirm" in properties:
            content["confirm"] = self.confirm
        if "name" in properties:
            content["name"] = "Ada"
        if "color" in properties:
            content["color"] = "teal"
        return ElicitResult(action="accept", content=content)

    async def sample(
        self, context: RequestContext[ClientSession, Any], params: CreateMessageRequestParams
    ) -> CreateMessageResult | ErrorData:
        self.asked.append(Asked("sampling/createMessage", context.request_id, self.meta_of(context), params))
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text=MODEL_TEXT), model=MODEL_NAME
        )

    def take(self) -> list[Asked]:
        asked, self.asked = self.asked, []
        return asked


class Checks:
    """The checks, in order, on one session whose client declares elicitation and sampling."""

    def __init__(
        self, session: ClientSession, person: Person, logs: list[LoggingMessageNotificationParams], url: str
    ) -> None:
        self.session = session
        self.person = person
        self.logs = logs
        self.url = url
        self.tasks = session.experimental

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def text_of(result: CallToolResult) -> str:
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        assert texts, f"expected text content, got {result.content!r}"
        return "".join(texts)

    @staticmethod
    def related_task_of(meta: dict[str, Any] | None) -> str | None:
        related = (meta or {}).get(RELATED_TASK)
        return related.get("taskId") if isinstance(related, dict) else None

    async def wait_status(self, task_id: str, wanted: set[str], timeout: float = 20.0) -> str:
        deadline = time.monotonic() + timeout
        while True:
            task = await self.tasks.get_task(task_id)
            if task.status in wanted:
                return task.status
            assert task.status not in ("completed", "failed", "cancelled"), (
                f"task {task_id} ended {task.status!r} ({task.statusMessage!r}) while waiting for {sorted(wanted)}"
            )
            assert time.monotonic() < deadline, f"task {task_id} still {task.status!r} after {timeout}s"
            await asyncio.sleep(0.1)

    def one_asked(self, method: str) -> Asked:
        asked = self.person.take()
        seen = [(a.method, a.request_id) for a in asked]
        assert [a.method for a in asked] == [method], f"expected one {method} at the callback, got {seen}"
        return asked[0]

    # -- checks ----------------------------------------------------------------------------------

    async def initialize(self) -> None:
        result = await self.session.initialize()
        assert result.protocolVersion == "2025-11-25", f"negotiated {result.protocolVersion!r}, not 2025-11-25"
        caps = result.capabilities
        for name in ("prompts", "resources", "completions", "logging", "tasks"):
            assert getattr(caps, name) is not None, f"server capabilities lack `{name}`: {caps!r}"

    async def list_tools(self) -> None:
        # Workers publish their tools on start; give a just-started server a few seconds.
        wanted = {"test_elicitation", "test_sampling", "confirm_delete", "interview", "test_tool_with_logging", "slow_compute"}
        deadline = time.monotonic() + 15
        while True:
            tools = {t.name: t for t in (await self.session.list_tools()).tools}
            if wanted <= tools.keys() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        missing = wanted - tools.keys()
        assert not missing, f"tools/list lacks {sorted(missing)}; it lists {sorted(tools)}"
        execution = tools["confirm_delete"].execution
        assert execution is not None and execution.taskSupport == "required", (
            f"confirm_delete: execution is {execution!r}, expected taskSupport 'required'"
        )
        slow = tools["slow_compute"].execution
        assert slow is not None and slow.taskSupport in ("optional", "required"), (
            f"slow_compute must run as a task for the task-result resource check; execution is {slow!r}"
        )

    async def elicitation(self) -> None:
        self.person.elicit_action = "accept"
        result = await self.session.call_tool("test_elicitation", {"message": "Who are you?"})
        assert not result.isError, f"test_elicitation reported an error: {result!r}"
        text = self.text_of(result)
        asked = self.one_asked("elicitation/create")
        assert asked.params.message == "Who are you?", f"the elicitation asked {asked.params.message!r}"
        schema = asked.params.requestedSchema
        assert set(schema.get("properties", {})) == {"username", "email"}, f"requestedSchema is {schema!r}"
        assert self.related_task_of(asked.meta) is None, (
            f"a synchronous call's request carries a related-task _meta: {asked.meta!r}"
        )
        assert text.startswith("User response: action=accept, content="), f"unexpected result text {text!r}"
        content = json.loads(text.removeprefix("User response: action=accept, content="))
        assert content == {"username": USERNAME, "email": EMAIL}, f"the tool saw {content!r}, not the callback's answer"

    async def elicitation_declined(self) -> None:
        self.person.elicit_action = "decline"
        try:
            result = await self.session.call_tool("test_elicitation", {"message": "Who are you, really?"})
        finally:
            self.person.elicit_action = "accept"
        self.one_asked("elicitation/create")
        text = self.text_of(result)
        assert text == "User response: action=decline, content={}", f"unexpected result text {text!r}"

    async def sampling(self) -> None:
        result = await self.session.call_tool("test_sampling", {"prompt": "What is the capital of France?"})
        assert not result.isError, f"test_sampling reported an error: {result!r}"
        asked = self.one_asked("sampling/createMessage")
        messages = asked.params.messages
        assert len(messages) == 1 and isinstance(messages[0].content, TextContent), f"messages: {messages!r}"
        assert messages[0].content.text == "What is the capital of France?", (
            f"the model was asked {messages[0].content.text!r}"
        )
        assert asked.params.maxTokens == 100, f"maxTokens is {asked.params.maxTokens!r}"
        text = self.text_of(result)
        assert text == f"LLM response: {MODEL_TEXT}", f"unexpected result text {text!r}"

    async def two_rounds_on_one_stream(self) -> None:
        # The tool asks, resumes, asks again: both requests go out on the one call's stream.
        result = await self.session.call_tool("test_input_required_result_multi_round", {})
        asked = self.person.take()
        messages = [a.params.message for a in asked]
        assert messages == ["Step 1: What is your name?", "Step 2: What is your favorite color?"], (
            f"the callback was asked {messages}"
        )
        assert len({a.request_id for a in asked}) == 2, f"both requests had the same id: {asked!r}"
        assert self.text_of(result) == "Ada likes teal", f"unexpected result {result!r}"

    async def declined_step_asked_again(self) -> None:
        # Declining step 1 makes the tool ask step 1 again: the same key in a new round, which
        # must reach the client as a new request (and its answer answer that round's question).
        self.person.next_actions = ["decline"]
        result = await self.session.call_tool("test_input_required_result_multi_round", {})
        asked = self.person.take()
        messages = [a.params.message for a in asked]
        assert messages == [
            "Step 1: What is your name?",
            "Step 1: What is your name?",
            "Step 2: What is your favorite color?",
        ], f"the callback was asked {messages}"
        assert len({a.request_id for a in asked}) == 3, f"requests shared an id: {asked!r}"
        assert self.text_of(result) == "Ada likes teal", f"unexpected result {result!r}"

    async def missing_sampling_capability(self) -> None:
        # A second session whose client has no sampling callback: the SDK then declares no
        # `sampling` capability, and the signed session id carries exactly what it declared.
        quiet = Person()
        async with streamable_http_client(self.url) as (read, write, _):
            async with ClientSession(
                read, write, read_timeout_seconds=READ_TIMEOUT, elicitation_callback=quiet.elicit
            ) as other:
                await other.initialize()
                try:
                    value = await other.call_tool("test_sampling", {"prompt": "anything"})
                except McpError as e:
                    assert e.error.code == MISSING_CAPABILITY, (
                        f"expected JSON-RPC error {MISSING_CAPABILITY}, got {e.error.code} ({e.error.message!r})"
                    )
                    data = e.error.data or {}
                    assert "sampling" in (data.get("requiredCapabilities") or {}), (
                        f"error data does not name the sampling capability: {e.error!r}"
                    )
                else:
                    raise AssertionError(f"test_sampling without a sampling callback returned {value!r}")
                assert not quiet.asked, f"a client without sampling was asked {quiet.asked!r}"
        # This session declared sampling: it still may.
        result = await self.session.call_tool("test_sampling", {"prompt": "Still there?"})
        self.one_asked("sampling/createMessage")
        assert self.text_of(result) == f"LLM response: {MODEL_TEXT}", f"unexpected result {result!r}"

    async def confirm_delete_task(self, filename: str, confirm: bool) -> str:
        self.person.confirm = confirm
        try:
            created = await self.tasks.call_tool_as_task("confirm_delete", {"filename": filename})
            task_id = created.task.taskId
            # The task asks at once; with nobody on a tasks/result stream it waits, visibly.
            status = await self.wait_status(task_id, {"input_required"})
            assert status == "input_required"
            assert not self.person.asked, f"asked before tasks/result was opened: {self.person.asked!r}"
            # tasks/result opens the stream the request goes out on; the callback answers it.
            result = await self.tasks.get_task_result(task_id, CallToolResult)
        finally:
            self.person.confirm = True
        asked = self.one_asked("elicitation/create")
        assert asked.params.message == f"Delete {filename}?", f"the elicitation asked {asked.params.message!r}"
        assert self.related_task_of(asked.meta) == task_id, (
            f"the request on the tasks/result stream has _meta {asked.meta!r}, expected {RELATED_TASK} {task_id}"
        )
        assert self.related_task_of(result.meta) == task_id, f"tasks/result _meta is {result.meta!r}"
        assert not result.isError, f"confirm_delete reported an error: {result!r}"
        final = await self.tasks.get_task(task_id)
        assert final.status == "completed", f"tasks/get after tasks/result says {final.status!r}"
        return self.text_of(result)

    async def task_elicitation_accepted(self) -> None:
        text = await self.confirm_delete_task("notes.txt", confirm=True)
        assert text == "Deleted notes.txt", f"unexpected result text {text!r}"

    async def task_elicitation_refused(self) -> None:
        text = await self.confirm_delete_task("thesis.tex", confirm=False)
        assert text == "Kept thesis.tex", f"unexpected result text {text!r}"

    async def task_two_requests(self) -> None:
        # multi_input asks two questions at once; both go out on the tasks/result stream.
        created = await self.tasks.call_tool_as_task("multi_input", {})
        task_id = created.task.taskId
        result = await self.tasks.get_task_result(task_id, CallToolResult)
        asked = self.person.take()
        assert sorted(a.params.message for a in asked) == ["Proceed?", "Your name?"], f"asked: {asked!r}"
        assert all(self.related_task_of(a.meta) == task_id for a in asked), f"related-task _meta: {asked!r}"
        assert self.text_of(result) == "Received 2 answers", f"unexpected result {result!r}"
        structured = result.structuredContent or {}
        assert structured.get("name", {}).get("content") == {"name": "Ada"}, f"structuredContent {structured!r}"
        assert structured.get("confirm", {}).get("content") == {"confirm": True}, f"structuredContent {structured!r}"

    async def task_two_rounds(self) -> None:
        # interview asks its second question only once the first is answered (it names the person):
        # two rounds of one task, both on the one tasks/result stream, in turn.
        created = await self.tasks.call_tool_as_task("interview", {})
        task_id = created.task.taskId
        await self.wait_status(task_id, {"input_required"})
        assert not self.person.asked, f"asked before tasks/result was opened: {self.person.asked!r}"
        result = await self.tasks.get_task_result(task_id, CallToolResult)
        asked = self.person.take()
        messages = [a.params.message for a in asked]
        assert messages == ["Your name?", "Ada, what is your favorite color?"], f"the callback was asked {messages}"
        assert len({a.request_id for a in asked}) == 2, f"both rounds' requests had one id: {asked!r}"
        assert all(self.related_task_of(a.meta) == task_id for a in asked), f"related-task _meta: {asked!r}"
        assert self.related_task_of(result.meta) == task_id, f"tasks/result _meta is {result.meta!r}"
        assert self.text_of(result) == "Ada likes teal", f"unexpected result {result!r}"
        final = await self.tasks.get_task(task_id)
        assert final.status == "completed", f"tasks/get after tasks/result says {final.status!r}"

    async def task_second_round_declined(self) -> None:
        # The answer to the second round is the one the tool resumes with: declined, it says so.
        self.person.next_actions = ["accept", "decline"]
        created = await self.tasks.call_tool_as_task("interview", {})
        task_id = created.task.taskId
        result = await self.tasks.get_task_result(task_id, CallToolResult)
        messages = [a.params.message for a in self.person.take()]
        assert messages == ["Your name?", "Ada, what is your favorite color?"], f"the callback was asked {messages}"
        text = self.text_of(result)
        assert text == "Ada did not say: the person chose to decline", f"unexpected result text {text!r}"

    async def logging(self) -> None:
        self.logs.clear()
        await self.session.set_logging_level("info")
        result = await self.session.call_tool("test_tool_with_logging", {})
        assert not result.isError, f"test_tool_with_logging reported an error: {result!r}"
        # The messages precede the result on the call's stream; allow the session a moment anyway.
        deadline = time.monotonic() + 5
        while len(self.logs) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert len(self.logs) == 3, f"expected 3 notifications/message, got {len(self.logs)}: {self.logs!r}"
        assert all(m.level == "info" for m in self.logs), f"levels: {[m.level for m in self.logs]}"
        assert [m.data for m in self.logs] == [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ], f"messages: {[m.data for m in self.logs]}"

    async def prompts(self) -> None:
        listed = {p.name: p for p in (await self.session.list_prompts()).prompts}
        for name in ("adr_nygard", "adr_madr", "test_simple_prompt", "test_prompt_with_arguments"):
            assert name in listed, f"prompts/list lacks {name}; it lists {sorted(listed)}"
        arguments = {a.name: a for a in listed["adr_nygard"].arguments or []}
        assert set(arguments) == {"title", "context", "decision", "status"}, f"adr_nygard arguments: {arguments!r}"
        assert arguments["title"].required is True, f"adr_nygard `title` is not required: {arguments['title']!r}"

        prompt = await self.session.get_prompt("adr_nygard", {"title": "Use Redis Streams for queues"})
        assert prompt.messages, "adr_nygard returned no messages"
        first = prompt.messages[0].content
        assert isinstance(first, EmbeddedResource), f"the first message is {first!r}, not an embedded resource"
        resource = first.resource
        assert isinstance(resource, TextResourceContents), f"the embedded resource is {resource!r}"
        assert str(resource.uri) == "conveyor://adr-templates/nygard", f"embedded {resource.uri}"
        assert resource.mimeType == "text/markdown", f"embedded mimeType {resource.mimeType!r}"
        assert "## Decision" in resource.text and "## Consequences" in resource.text, (
            f"the embedded template is not the Nygard template: {resource.text[:200]!r}"
        )
        later = " ".join(m.content.text for m in prompt.messages[1:] if isinstance(m.content, TextContent))
        assert "Use Redis Streams for queues" in later, f"the title is in no later message: {prompt.messages!r}"

        simple = await self.session.get_prompt("test_prompt_with_arguments", {"arg1": "alpha", "arg2": "beta"})
        text = " ".join(m.content.text for m in simple.messages if isinstance(m.content, TextContent))
        assert "alpha" in text and "beta" in text, f"test_prompt_with_arguments said {text!r}"

        completion = await self.session.complete(
            PromptReference(type="ref/prompt", name="adr_nygard"), {"name": "status", "value": "acc"}
        )
        assert completion.completion.values == ["accepted"], f"completion values {completion.completion.values!r}"

    async def resources(self) -> None:
        listed = {str(r.uri): r for r in (await self.session.list_resources()).resources}
        assert ADR_TEMPLATES <= listed.keys(), f"resources/list lacks the ADR templates; it lists {sorted(listed)}"
        assert "test://static-text" in listed, f"resources/list lacks test://static-text; it lists {sorted(listed)}"
        for uri in ADR_TEMPLATES:
            assert listed[uri].mimeType == "text/markdown", f"{uri} is listed as {listed[uri].mimeType!r}"

        madr = await self.session.read_resource(AnyUrl("conveyor://adr-templates/madr"))
        assert len(madr.contents) == 1, f"madr has {len(madr.contents)} contents"
        content = madr.contents[0]
        assert isinstance(content, TextResourceContents), f"madr content is {content!r}"
        assert content.mimeType == "text/markdown", f"madr mimeType {content.mimeType!r}"
        assert "## Decision Outcome" in content.text, f"madr lacks '## Decision Outcome': {content.text[:300]!r}"

        templates = {t.uriTemplate for t in (await self.session.list_resource_templates()).resourceTemplates}
        assert {TASK_RESULT_TEMPLATE, "test://template/{id}/data"} <= templates, f"templates listed: {templates}"
        data = await self.session.read_resource(AnyUrl("test://template/42/data"))
        item = data.contents[0]
        assert isinstance(item, TextResourceContents) and json.loads(item.text).get("id") == "42", f"read {data!r}"

        # A finished task's result, read as a resource.
        created = await self.tasks.call_tool_as_task("slow_compute", {"seconds": 0.2, "label": "as-resource"})
        task_id = created.task.taskId
        await self.wait_status(task_id, {"completed"})
        uri = TASK_RESULT_TEMPLATE.replace("{taskId}", task_id)
        read = await self.session.read_resource(AnyUrl(uri))
        assert len(read.contents) == 1, f"{uri} has {len(read.contents)} contents"
        item = read.contents[0]
        assert isinstance(item, TextResourceContents), f"{uri} content is {item!r}"
        assert str(item.uri) == uri, f"content uri {item.uri}, expected {uri}"
        assert item.mimeType == "application/json", f"{uri} mimeType {item.mimeType!r}"
        stored = json.loads(item.text)
        assert stored.get("isError") is False, f"{uri} says {stored!r}"
        assert stored.get("content") == [{"type": "text", "text": "computed as-resource"}], f"{uri} says {stored!r}"
        # The same as tasks/result answers (less its related-task _meta).
        via_result = await self.tasks.get_task_result(task_id, CallToolResult)
        assert self.text_of(via_result) == "computed as-resource", f"tasks/result says {via_result!r}"

    def all(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("initialize: 2025-11-25 with prompts, resources, completions, logging, tasks", self.initialize),
            ("tools/list: the asking fixtures, confirm_delete taskSupport required", self.list_tools),
            ("test_elicitation: elicitation/create on the call's stream, answered by the callback", self.elicitation),
            ("test_elicitation declined: action=decline reaches the tool", self.elicitation_declined),
            ("test_sampling: sampling/createMessage on the call's stream, answered by the callback", self.sampling),
            ("two requests in turn on one call's stream (multi-round tool)", self.two_rounds_on_one_stream),
            ("a declined step asked again under its key reaches the client again", self.declined_step_asked_again),
            ("no sampling callback -> test_sampling fails with -32021; a sampling session still may", self.missing_sampling_capability),
            ("confirm_delete as a task: input_required, elicitation on tasks/result with related-task -> Deleted", self.task_elicitation_accepted),
            ("confirm_delete as a task, confirm false -> Kept", self.task_elicitation_refused),
            ("multi_input as a task: two elicitations on the tasks/result stream", self.task_two_requests),
            ("interview as a task: two rounds in turn on one tasks/result stream", self.task_two_rounds),
            ("interview as a task, second round declined -> the tool sees the decline", self.task_second_round_declined),
            ("logging/setLevel info + test_tool_with_logging -> 3 notifications/message", self.logging),
            ("prompts: adr_nygard listed, embeds its template; arguments; completion acc -> accepted", self.prompts),
            ("resources: ADR templates, MADR markdown, templates, a finished task's result as JSON", self.resources),
        ]


async def run(url: str) -> int:
    person = Person()
    logs: list[LoggingMessageNotificationParams] = []

    async def on_log(params: LoggingMessageNotificationParams) -> None:
        logs.append(params)

    started = time.monotonic()
    async with streamable_http_client(url) as (read, write, _session_id):
        async with ClientSession(
            read,
            write,
            read_timeout_seconds=READ_TIMEOUT,
            elicitation_callback=person.elicit,
            sampling_callback=person.sample,
            logging_callback=on_log,
        ) as session:
            checks = Checks(session, person, logs, url)
            for number, (name, check) in enumerate(checks.all(), start=1):
                began = time.monotonic()
                try:
                    await check()
                except AssertionError as e:
                    print(f"FAIL {number:2} {name}: {e}", flush=True)
                    return 1
                except Exception as e:  # an SDK error, a timeout, a transport failure
                    print(f"FAIL {number:2} {name}: {type(e).__name__}: {e}", flush=True)
                    traceback.print_exc()
                    return 1
                print(f"ok   {number:2} {name} ({time.monotonic() - began:.2f} s)", flush=True)
    total = len(checks.all())
    print(f"all {total} checks passed with mcp 1.30.0 in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} MCP_URL", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(run(sys.argv[1])))


if __name__ == "__main__":
    main()
