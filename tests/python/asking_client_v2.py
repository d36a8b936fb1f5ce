"""Tools that ask, driven by the official Python SDK 2.x (mcp==2.3.0), on both of its eras.

Usage: asking_client_v2.py MCP_URL

What mcp 2.3.0 offers, read from its source (mcp/client/client.py, _probe.py, _input_required.py,
extension.py, session.py, subscriptions.py) and exercised here:

- It speaks 2026-07-28. `Client(url)` (mode "auto") probes `server/discover` and, on a server that
  lists 2026-07-28 (Conveyor does), runs stateless: every request carries `_meta` protocol
  version, client info and client capabilities, plus the MCP-Protocol-Version, Mcp-Method and
  Mcp-Name headers. `mode="legacy"` forces the 2025-11-25 `initialize` handshake instead.
- Multi-round-trip requests (SEP-2322): `Client.call_tool`, `get_prompt` and `read_resource`
  recognise `resultType: "input_required"`, run every embedded input request through the same
  elicitation / sampling / roots callbacks as 2025 server-to-client requests (concurrently), and
  retry with `inputResponses` and the echoed `requestState`, up to 10 rounds. The loop can also be
  driven by hand with `client.session.call_tool(..., allow_input_required=True)`.
- Capabilities are declared exactly as in 1.x: sampling only with a `sampling_callback`,
  elicitation (form and url) only with an `elicitation_callback`, roots only with a
  `list_roots_callback`.
- Logging on 2026-07-28 is a per-request opt-in (`_meta["io.modelcontextprotocol/logLevel"]`, or
  `Client(log_level=...)`); `logging/setLevel` is for the legacy era.
- `subscriptions/listen` (`Client.listen`): list changes and resource updates.
- On the legacy era, server-to-client requests on a call's SSE stream still reach the callbacks.
- Responses of the four list methods are cached per their `ttlMs` (on by default).

What it does NOT have:
- No Tasks extension (`io.modelcontextprotocol/tasks`): it never declares it, so Conveyor runs
  task-capable tools synchronously and refuses taskSupport "required" tools with -32021; it has
  no tasks/get, tasks/update or tasks/cancel. It does have the generic extension hooks
  (`ClientExtension`, `ResultClaim` for a `resultType`, custom `Request` models with an Mcp-Name
  `name_param`), so this script carries a small Tasks extension of its own (`TasksExtension`
  below, about fifty lines): it claims `resultType: "task"`, polls tasks/get, answers the input
  requests tasks/get shows through the SDK's own callbacks (`session.dispatch_input_request`) and
  sends them with tasks/update. The task checks therefore test Conveyor and the SDK's extension
  machinery, not an SDK-provided Tasks client.
- No 2025-11-25 experimental tasks (`session.experimental` is gone in 2.x).

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
from typing import Any, Literal

import anyio
import mcp_types as types
from mcp import Client
from mcp.client import ClaimContext, ClientExtension, ClientRequestContext, ResultClaim
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import ResourceUpdated
from pydantic import ConfigDict, TypeAdapter

# Logging, sampling and roots are deprecated by the 2026-07-28 revision (SEP-2577); the SDK warns
# on their use. They are what these checks exercise.
warnings.simplefilter("ignore")

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
LOG_LEVEL_META = "io.modelcontextprotocol/logLevel"
MISSING_CAPABILITY = -32021
READ_TIMEOUT = 30.0

ADR_TEMPLATES = {"conveyor://adr-templates/nygard", "conveyor://adr-templates/madr"}
TASK_RESULT_TEMPLATE = "conveyor://tasks/{taskId}/result"

MODEL_TEXT = "Paris (conveyor-python-v2-check)"
ROOT_URI = "file:///tmp/conveyor-python-v2-root"


# -- a Tasks extension built on the SDK's extension hooks --------------------------------------


class CreateTaskResult(types.Result):
    """A tools/call answered with a task (`resultType: "task"`), as the Tasks extension defines it."""

    model_config = ConfigDict(extra="allow")
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None


class TaskIdParams(types.RequestParams):
    task_id: str


class TaskUpdateParams(TaskIdParams):
    input_responses: dict[str, Any]


class TasksGet(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class TasksUpdate(types.Request[TaskUpdateParams, Literal["tasks/update"]]):
    method: Literal["tasks/update"] = "tasks/update"
    name_param = "taskId"


class DetailedTask(types.Result):
    """A tasks/get result: the task, with its input requests, result or error inlined."""

    model_config = ConfigDict(extra="allow")
    task_id: str
    status: str
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


INPUT_REQUEST: TypeAdapter[types.InputRequest] = TypeAdapter(types.InputRequest)


@dataclass
class TaskTrace:
    task_id: str
    statuses: list[str] = field(default_factory=list)
    answered: list[str] = field(default_factory=list)


class TasksExtension(ClientExtension):
    """Declares the Tasks extension and resolves a task to its CallToolResult: polls tasks/get,
    answers input requests with the client's own callbacks through tasks/update."""

    identifier = TASKS_EXTENSION

    def __init__(self) -> None:
        self.traces: list[TaskTrace] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=self.resolve)]

    async def resolve(self, created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
        session = ctx.session
        trace = TaskTrace(created.task_id, [created.status])
        self.traces.append(trace)
        deadline = time.monotonic() + 30
        while True:
            task = await session.send_request(TasksGet(params=TaskIdParams(task_id=created.task_id)), DetailedTask)
            if trace.statuses[-1] != task.status:
                trace.statuses.append(task.status)
            if task.status == "completed":
                return types.CallToolResult.model_validate(task.result or {})
            if task.status in ("failed", "cancelled"):
                raise RuntimeError(f"task {task.task_id} {task.status}: {task.status_message} {task.error}")
            if task.status == "input_required":
                answers: dict[str, Any] = {}
                for key, raw in (task.input_requests or {}).items():
                    if key in trace.answered:
                        continue
                    request = INPUT_REQUEST.validate_python(raw)
                    context = ClientRequestContext(session=session, request_id=key, meta=None)
                    response = await session.dispatch_input_request(context, request)
                    if isinstance(response, types.ErrorData):
                        raise MCPError.from_error_data(response)
                    answers[key] = response.model_dump(by_alias=True, mode="json", exclude_none=True)
                    trace.answered.append(key)
                if answers:
                    await session.send_request(
                        TasksUpdate(params=TaskUpdateParams(task_id=task.task_id, input_responses=answers)),
                        types.EmptyResult,
                    )
                    continue
            if time.monotonic() > deadline:
                raise TimeoutError(f"task {task.task_id} still {task.status} after 30 s")
            await asyncio.sleep(min((task.poll_interval_ms or 1000) / 1000, 0.1))


# -- the person and model behind the callbacks ---------------------------------------------------


@dataclass
class Asked:
    method: str
    request_id: Any
    detail: str


@dataclass
class Person:
    asked: list[Asked] = field(default_factory=list)

    async def elicit(self, context: ClientRequestContext, params: Any) -> types.ElicitResult:
        self.asked.append(Asked("elicitation/create", context.request_id, params.message))
        properties = set((getattr(params, "requested_schema", None) or {}).get("properties", {}))
        answers = {"name": "Ada", "username": "ada-v2", "email": "ada@example.org", "color": "teal",
                   "confirm": True, "context": "a v2 context", "ok": True}
        return types.ElicitResult(action="accept", content={k: v for k, v in answers.items() if k in properties})

    async def sample(self, context: ClientRequestContext, params: Any) -> types.CreateMessageResult:
        prompt = " ".join(m.content.text for m in params.messages if isinstance(m.content, types.TextContent))
        self.asked.append(Asked("sampling/createMessage", context.request_id, prompt))
        return types.CreateMessageResult(
            role="assistant", content=types.TextContent(type="text", text=MODEL_TEXT), model="conveyor-test-model"
        )

    async def roots(self, context: ClientRequestContext) -> types.ListRootsResult:
        self.asked.append(Asked("roots/list", context.request_id, ""))
        return types.ListRootsResult(roots=[types.Root(uri=ROOT_URI, name="check root")])

    def take(self) -> list[Asked]:
        asked, self.asked = self.asked, []
        return asked


class Checks:
    def __init__(self, url: str, client: Client, person: Person, tasks: TasksExtension, logs: list[Any]) -> None:
        self.url = url
        self.client = client
        self.person = person
        self.tasks = tasks
        self.logs = logs

    @staticmethod
    def text_of(result: types.CallToolResult) -> str:
        texts = [c.text for c in result.content if isinstance(c, types.TextContent)]
        assert texts, f"expected text content, got {result.content!r}"
        return "".join(texts)

    async def expect_missing_capability(self, what: str, call: Callable[[], Awaitable[Any]]) -> MCPError:
        try:
            value = await call()
        except MCPError as e:
            assert e.code == MISSING_CAPABILITY, f"{what}: expected {MISSING_CAPABILITY}, got {e.code} ({e.message!r})"
            return e
        raise AssertionError(f"{what}: expected JSON-RPC error {MISSING_CAPABILITY}, got {value!r}")

    # -- checks ----------------------------------------------------------------------------------

    async def connect(self) -> None:
        client = self.client
        assert client.protocol_version == MODERN, f"negotiated {client.protocol_version!r}, not {MODERN}"
        discovered = client.session.discover_result
        assert discovered is not None, "the client did not adopt a server/discover result"
        assert MODERN in discovered.supported_versions, f"supportedVersions {discovered.supported_versions}"
        caps = client.server_capabilities
        assert caps.prompts is not None and caps.resources is not None and caps.completions is not None, caps
        assert TASKS_EXTENSION in (caps.extensions or {}), f"capabilities.extensions lack the Tasks extension: {caps!r}"
        assert client.server_info is not None and client.server_info.name, f"server_info {client.server_info!r}"

    async def list_tools(self) -> None:
        wanted = {"test_simple_text", "test_input_required_result_elicitation", "confirm_delete", "slow_compute"}
        deadline = time.monotonic() + 15
        while True:
            # The SDK caches tools/list for its ttlMs: refresh while the workers are starting.
            tools = {t.name: t for t in (await self.client.list_tools(cache_mode="refresh")).tools}
            if wanted <= tools.keys() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        missing = wanted - tools.keys()
        assert not missing, f"tools/list lacks {sorted(missing)}; it lists {sorted(tools)}"
        # 2026-07-28 tools carry no `execution`: with the Tasks extension the server decides per call.
        assert tools["confirm_delete"].execution is None, f"confirm_delete: {tools['confirm_delete'].execution!r}"

    async def simple_text(self) -> None:
        result = await self.client.call_tool("test_simple_text", {})
        assert not result.is_error, f"test_simple_text reported an error: {result!r}"
        text = self.text_of(result)
        assert text == "This is a simple text response for testing.", f"test_simple_text said {text!r}"

    async def mrtr_by_hand(self) -> None:
        # The first round answers input_required with the request and an opaque requestState.
        first = await self.client.session.call_tool(
            "test_input_required_result_elicitation", {}, allow_input_required=True
        )
        assert isinstance(first, types.InputRequiredResult), f"the first round answered {first!r}"
        assert set(first.input_requests or {}) == {"user_name"}, f"input requests {first.input_requests!r}"
        request = (first.input_requests or {})["user_name"]
        assert isinstance(request, types.ElicitRequest), f"user_name is {request!r}, not an elicitation"
        assert first.request_state, "input_required without requestState"
        answer = types.ElicitResult(action="accept", content={"name": "Grace"})
        second = await self.client.session.call_tool(
            "test_input_required_result_elicitation",
            {},
            input_responses={"user_name": answer},
            request_state=first.request_state,
            allow_input_required=True,
        )
        assert isinstance(second, types.CallToolResult), f"the second round answered {second!r}"
        assert self.text_of(second) == "Hello, Grace!", f"unexpected result {second!r}"

    async def mrtr_elicitation(self) -> None:
        result = await self.client.call_tool("test_input_required_result_elicitation", {})
        asked = self.person.take()
        assert [(a.method, a.request_id) for a in asked] == [("elicitation/create", "user_name")], f"asked {asked!r}"
        assert self.text_of(result) == "Hello, Ada!", f"unexpected result {result!r}"

    async def mrtr_sampling(self) -> None:
        result = await self.client.call_tool("test_input_required_result_sampling", {})
        asked = self.person.take()
        assert [(a.method, a.detail) for a in asked] == [
            ("sampling/createMessage", "What is the capital of France?")
        ], f"asked {asked!r}"
        assert self.text_of(result) == f"The model says: {MODEL_TEXT}", f"unexpected result {result!r}"

    async def mrtr_roots(self) -> None:
        result = await self.client.call_tool("test_input_required_result_list_roots", {})
        asked = self.person.take()
        assert [a.method for a in asked] == ["roots/list"], f"asked {asked!r}"
        assert self.text_of(result) == f"Client roots: {ROOT_URI}", f"unexpected result {result!r}"

    async def mrtr_rounds_and_many(self) -> None:
        result = await self.client.call_tool("test_input_required_result_multi_round", {})
        asked = self.person.take()
        assert [a.request_id for a in asked] == ["step1", "step2"], f"asked {asked!r}"
        assert self.text_of(result) == "Ada likes teal", f"multi-round result {result!r}"
        result = await self.client.call_tool("test_input_required_result_multiple_inputs", {})
        asked = self.person.take()
        assert sorted(a.request_id for a in asked) == ["client_roots", "greeting", "user_name"], f"asked {asked!r}"
        text = self.text_of(result)
        assert text == f"name: Ada; greeting: {MODEL_TEXT}; roots: {ROOT_URI}", f"multiple-inputs result {text!r}"

    async def elicitation_fixture_via_mrtr(self) -> None:
        # test_elicitation (the tool the 2025 checks see on the SSE stream) asks the same way here.
        result = await self.client.call_tool("test_elicitation", {"message": "Who are you?"})
        asked = self.person.take()
        assert [(a.method, a.detail) for a in asked] == [("elicitation/create", "Who are you?")], f"asked {asked!r}"
        text = self.text_of(result)
        prefix = "User response: action=accept, content="
        assert text.startswith(prefix), f"unexpected result text {text!r}"
        assert json.loads(text.removeprefix(prefix)) == {"username": "ada-v2", "email": "ada@example.org"}, text

    async def missing_capabilities(self) -> None:
        async with Client(self.url, read_timeout_seconds=READ_TIMEOUT, elicitation_callback=Person().elicit) as bare:
            error = await self.expect_missing_capability(
                "test_input_required_result_sampling without a sampling callback",
                lambda: bare.call_tool("test_input_required_result_sampling", {}),
            )
            assert "sampling" in ((error.error.data or {}).get("requiredCapabilities") or {}), f"{error.error!r}"
            error = await self.expect_missing_capability(
                "confirm_delete (taskSupport required) without the Tasks extension",
                lambda: bare.call_tool("confirm_delete", {"filename": "x"}),
            )
            required = (error.error.data or {}).get("requiredCapabilities") or {}
            assert TASKS_EXTENSION in (required.get("extensions") or {}), f"{error.error!r}"

    async def task_with_input(self) -> None:
        before = len(self.tasks.traces)
        result = await self.client.call_tool("confirm_delete", {"filename": "draft.md"})
        assert len(self.tasks.traces) == before + 1, "confirm_delete was not answered with a task"
        trace = self.tasks.traces[-1]
        assert "input_required" in trace.statuses, f"tasks/get never showed input_required: {trace.statuses}"
        assert trace.answered == ["confirm"], f"answered {trace.answered}"
        asked = self.person.take()
        assert [(a.method, a.detail) for a in asked] == [("elicitation/create", "Delete draft.md?")], f"{asked!r}"
        assert self.text_of(result) == "Deleted draft.md", f"unexpected result {result!r}"

    async def input_then_task(self) -> None:
        # test_tool_with_task asks in a synchronous round (MRTR), then becomes a task.
        before = len(self.tasks.traces)
        result = await self.client.call_tool("test_tool_with_task", {})
        asked = self.person.take()
        assert [(a.method, a.request_id) for a in asked] == [("elicitation/create", "user_name")], f"{asked!r}"
        assert len(self.tasks.traces) == before + 1, "test_tool_with_task did not turn into a task"
        assert self.text_of(result) == "Hello, Ada! (from a task)", f"unexpected result {result!r}"

    async def logging(self) -> None:
        self.logs.clear()
        result = await self.client.call_tool("test_tool_with_logging", {}, meta={LOG_LEVEL_META: "info"})
        assert not result.is_error, f"test_tool_with_logging reported an error: {result!r}"
        deadline = time.monotonic() + 5
        while len(self.logs) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert [m.data for m in self.logs] == [
            "Tool execution started",
            "Tool processing data",
            "Tool execution completed",
        ], f"notifications/message: {self.logs!r}"
        self.logs.clear()
        await self.client.call_tool("test_tool_with_logging", {})
        await asyncio.sleep(0.3)
        assert not self.logs, f"log messages arrived without the per-request opt-in: {self.logs!r}"

    async def prompts(self) -> None:
        listed = {p.name: p for p in (await self.client.list_prompts()).prompts}
        for name in ("adr_nygard", "adr_madr", "test_simple_prompt", "test_input_required_result_prompt"):
            assert name in listed, f"prompts/list lacks {name}; it lists {sorted(listed)}"
        prompt = await self.client.get_prompt("adr_madr", {"title": "Adopt MCP 2026-07-28"})
        first = prompt.messages[0].content
        assert isinstance(first, types.EmbeddedResource), f"the first message is {first!r}"
        assert isinstance(first.resource, types.TextResourceContents), f"embedded {first.resource!r}"
        assert first.resource.uri == "conveyor://adr-templates/madr", f"embedded {first.resource.uri}"
        assert "## Decision Outcome" in first.resource.text, "the embedded MADR template lacks '## Decision Outcome'"
        completion = await self.client.complete(
            types.PromptReference(type="ref/prompt", name="adr_madr"), {"name": "status", "value": "acc"}
        )
        assert completion.completion.values == ["accepted"], f"completion {completion.completion!r}"
        # A prompt that asks (MRTR on prompts/get), answered by the elicitation callback.
        asking = await self.client.get_prompt("test_input_required_result_prompt", {})
        asked = self.person.take()
        assert [a.method for a in asked] == ["elicitation/create"], f"asked {asked!r}"
        text = " ".join(m.content.text for m in asking.messages if isinstance(m.content, types.TextContent))
        assert "a v2 context" in text, f"the prompt did not use the answer: {text!r}"

    async def resources(self) -> None:
        listed = {r.uri: r for r in (await self.client.list_resources()).resources}
        assert ADR_TEMPLATES <= listed.keys(), f"resources/list lacks the ADR templates: {sorted(listed)}"
        nygard = await self.client.read_resource("conveyor://adr-templates/nygard")
        content = nygard.contents[0]
        assert isinstance(content, types.TextResourceContents), f"nygard content {content!r}"
        assert content.mime_type == "text/markdown" and "## Consequences" in content.text, f"nygard {content!r}"
        templates = {t.uri_template for t in (await self.client.list_resource_templates()).resource_templates}
        assert {TASK_RESULT_TEMPLATE, "test://template/{id}/data"} <= templates, f"templates {templates}"
        data = await self.client.read_resource("test://template/7/data")
        item = data.contents[0]
        assert isinstance(item, types.TextResourceContents) and json.loads(item.text).get("id") == "7", f"{data!r}"

    async def listen_for_a_task_result(self) -> None:
        # A task left running (the claimed result is taken as is, not resolved), a subscription to
        # its result resource, the update when it finishes, and the result read as a resource.
        created = await self.client.session.call_tool(
            "slow_compute", {"seconds": 1.5, "label": "listened"}, allow_claimed=True
        )
        assert isinstance(created, CreateTaskResult), f"slow_compute answered {created!r}, not a task"
        uri = TASK_RESULT_TEMPLATE.replace("{taskId}", created.task_id)
        async with self.client.listen(resource_subscriptions=[uri]) as subscription:
            assert subscription.honored.resource_subscriptions == [uri], f"honored {subscription.honored!r}"
            with anyio.fail_after(15):
                event = await subscription.__anext__()
        assert event == ResourceUpdated(uri=uri), f"the subscription delivered {event!r}"
        read = await self.client.read_resource(uri)
        item = read.contents[0]
        assert isinstance(item, types.TextResourceContents) and item.mime_type == "application/json", f"{read!r}"
        stored = json.loads(item.text)
        assert stored.get("content") == [{"type": "text", "text": "computed listened"}], f"{uri} says {stored!r}"

    async def legacy_era(self) -> None:
        person = Person()
        async with Client(
            self.url,
            mode="legacy",
            read_timeout_seconds=READ_TIMEOUT,
            elicitation_callback=person.elicit,
            sampling_callback=person.sample,
        ) as legacy:
            assert legacy.protocol_version == LEGACY, f"negotiated {legacy.protocol_version!r}"
            result = await legacy.call_tool("test_elicitation", {"message": "Legacy era?"})
            asked = person.take()
            assert [(a.method, a.detail) for a in asked] == [("elicitation/create", "Legacy era?")], f"{asked!r}"
            assert isinstance(asked[0].request_id, str) and asked[0].request_id.startswith("conveyor-input/"), (
                f"the request did not come from the call's stream: id {asked[0].request_id!r}"
            )
            assert self.text_of(result).startswith("User response: action=accept"), f"result {result!r}"
            result = await legacy.call_tool("test_sampling", {"prompt": "Capital of France?"})
            asked = person.take()
            assert [(a.method, a.detail) for a in asked] == [("sampling/createMessage", "Capital of France?")], asked
            assert self.text_of(result) == f"LLM response: {MODEL_TEXT}", f"result {result!r}"

    def all(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("connect (auto): server/discover -> 2026-07-28, Tasks extension offered", self.connect),
            ("tools/list (2026-07-28): the fixtures, no `execution`", self.list_tools),
            ("test_simple_text", self.simple_text),
            ("MRTR by hand: input_required + requestState, retried with inputResponses", self.mrtr_by_hand),
            ("MRTR elicitation via the callback: test_input_required_result_elicitation", self.mrtr_elicitation),
            ("MRTR sampling via the callback", self.mrtr_sampling),
            ("MRTR roots via the callback", self.mrtr_roots),
            ("MRTR two rounds; three inputs at once", self.mrtr_rounds_and_many),
            ("test_elicitation via MRTR", self.elicitation_fixture_via_mrtr),
            ("no sampling callback / no Tasks extension -> -32021", self.missing_capabilities),
            ("confirm_delete as a task (test-side Tasks extension): tasks/get input_required, tasks/update", self.task_with_input),
            ("test_tool_with_task: MRTR round, then a task", self.input_then_task),
            ("logging: per-request logLevel opt-in -> 3 notifications/message; none without", self.logging),
            ("prompts: adr_madr embeds its template; completion; a prompt that asks (MRTR)", self.prompts),
            ("resources: ADR templates, Nygard markdown, templates", self.resources),
            ("subscriptions/listen: a task result resource updates when the task ends; read it", self.listen_for_a_task_result),
            ("legacy era (2025-11-25) with 2.3.0: elicitation and sampling on the call's SSE stream", self.legacy_era),
        ]


async def run(url: str) -> int:
    person = Person()
    tasks = TasksExtension()
    logs: list[Any] = []

    async def on_log(params: Any) -> None:
        logs.append(params)

    started = time.monotonic()
    failed: str | None = None
    async with Client(
        url,
        read_timeout_seconds=READ_TIMEOUT,
        elicitation_callback=person.elicit,
        sampling_callback=person.sample,
        list_roots_callback=person.roots,
        logging_callback=on_log,
        extensions=[tasks],
    ) as client:
        checks = Checks(url, client, person, tasks, logs)
        for number, (name, check) in enumerate(checks.all(), start=1):
            began = time.monotonic()
            try:
                await check()
            except AssertionError as e:
                failed = f"FAIL {number:2} {name}: {e}"
            except Exception as e:  # an SDK error, a timeout, a transport failure
                traceback.print_exc()
                failed = f"FAIL {number:2} {name}: {type(e).__name__}: {e}"
            if failed:
                print(failed, flush=True)
                break
            print(f"ok   {number:2} {name} ({time.monotonic() - began:.2f} s)", flush=True)
    if failed:
        return 1
    print(f"all {len(checks.all())} checks passed with mcp 2.3.0 in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} MCP_URL", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(run(sys.argv[1])))


if __name__ == "__main__":
    main()
