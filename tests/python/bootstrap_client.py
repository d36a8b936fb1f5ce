"""Drives the bootstrap tools with the official MCP Python SDK (mcp 1.30.0, 2025-11-25) over a
sample project whose ADRs require a config file the root lacks and whose check prints a secret:

- `adr_bootstrap_validation` returns both scripts as embedded resources, read back by uri, and the
  missing config file with its template;
- `bootstrap_validation_loop`, as a task, asks the person (the SDK's elicitation callback) to
  approve each iteration; the first fails with a masked, classified learning, the second takes the
  known fix and passes, and the ADR update names the ADR and its section;
- a person who declines stops the loop before anything runs;
- a session without an elicitation callback is refused with an error that says so, and goes on.

Usage: bootstrap_client.py MCP_URL ROOT_NAME PROFILE SECRET
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import warnings
from datetime import timedelta
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, ElicitRequestParams, ElicitResult, EmbeddedResource, ErrorData, TextResourceContents
from pydantic import AnyUrl

warnings.filterwarnings("ignore", category=DeprecationWarning)

READ_TIMEOUT = timedelta(seconds=90)


class Person:
    """Answers every approval with `action` (approving when it accepts), and keeps the questions."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.messages: list[str] = []

    async def elicit(self, context: RequestContext[ClientSession, Any], params: ElicitRequestParams) -> ElicitResult | ErrorData:
        self.messages.append(params.message)
        if self.action != "accept":
            return ElicitResult(action=self.action)  # type: ignore[arg-type]
        return ElicitResult(action="accept", content={"approve": True})


async def generate(session: ClientSession, root: str) -> None:
    result = await session.call_tool("adr_bootstrap_validation", {"root": root})
    assert not result.isError, f"adr_bootstrap_validation failed: {result!r}"
    structured = result.structuredContent or {}
    missing = [m["path"] for m in structured.get("missingFiles", [])]
    assert missing == ["config/app.toml"], f"missing files: {missing!r}"
    assert structured["missingFiles"][0]["template"]["source"]["path"] == "config/app.example.toml"
    embedded = [c for c in result.content if isinstance(c, EmbeddedResource)]
    uris = [str(c.resource.uri) for c in embedded]
    assert [u.rsplit("/", 1)[1] for u in uris] == ["bootstrap.sh", "validate_bootstrap.sh"], f"resources: {uris!r}"
    read_back = await session.read_resource(AnyUrl(uris[0]))
    script = read_back.contents[0]
    assert isinstance(script, TextResourceContents) and "From ADR 1: Settings in one file" in script.text, f"{read_back!r}"
    print(f"ok   adr_bootstrap_validation: {len(structured['steps'])} steps, {len(structured['checks'])} checks, scripts at {uris}")


async def run_loop(session: ClientSession, person: Person, profile: str, secret: str) -> None:
    tasks = session.experimental
    created = await tasks.call_tool_as_task("bootstrap_validation_loop", {"profile": profile, "maxIterations": 3})
    task_id = created.task.taskId
    result = await tasks.get_task_result(task_id, CallToolResult)
    assert not result.isError, f"the loop failed: {result!r}"
    raw = json.dumps(result.model_dump(mode="json"))
    assert secret not in raw, "the secret leaked into the result"
    report = result.structuredContent or {}
    assert report.get("success") is True and report.get("iterations") == 2, f"report: {json.dumps(report)[:2000]}"
    assert len(person.messages) == 2 and "iteration 1 of 3" in person.messages[0], f"questions: {person.messages!r}"
    learning = report["learnings"][0]
    assert learning["category"] == "missingFile" and learning["adrPath"] == "docs/adr/0001-settings.md", f"{learning!r}"
    first, second = report["executions"]
    assert first["passed"] is False and second["passed"] is True and second["fixesApplied"] == ["config/app.toml"]
    update = report["adrUpdates"][0]
    assert (update["adrPath"], update["section"]) == ("docs/adr/0001-settings.md", "Confirmation"), f"{update!r}"
    assert update["diff"].startswith("--- a/docs/adr/0001-settings.md"), update["diff"]
    read_back = await session.read_resource(AnyUrl(update["uri"]))
    diff = read_back.contents[0]
    assert isinstance(diff, TextResourceContents) and diff.text == update["diff"], f"{read_back!r}"
    final = await tasks.get_task(task_id)
    assert final.status == "completed", f"the task ended {final.status!r}"
    print(f"ok   bootstrap_validation_loop: failed, learned {learning['category']}, passed with the fix; update at {update['uri']}")


async def declined(session: ClientSession, person: Person, profile: str) -> None:
    person.action = "decline"
    person.messages.clear()
    created = await session.experimental.call_tool_as_task("bootstrap_validation_loop", {"profile": profile})
    result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
    report = result.structuredContent or {}
    assert report.get("success") is False and report.get("iterations") == 0, f"report: {report!r}"
    assert "decline" in (report.get("stopped") or ""), f"the report does not say why it stopped: {report!r}"
    assert len(person.messages) == 1, f"asked again after a decline: {person.messages!r}"
    print(f"ok   a declined iteration runs nothing: {report['stopped']!r}")


async def refused_without_elicitation(url: str, profile: str) -> None:
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=READ_TIMEOUT) as session:
            await session.initialize()
            try:
                created = await session.experimental.call_tool_as_task("bootstrap_validation_loop", {"profile": profile})
                result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
            except McpError as e:
                message = e.error.message
            else:
                assert result.isError, f"a client without elicitation was not refused: {result!r}"
                message = " ".join(getattr(c, "text", "") for c in result.content)
            assert "elicitation" in message, f"the refusal does not say why: {message!r}"
            # The session goes on.
            assert (await session.list_tools()).tools
            print(f"ok   without elicitation: refused ({message[:100]!r}), and the session goes on")


async def main_async(url: str, root: str, profile: str, secret: str) -> int:
    started = time.monotonic()
    person = Person()
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=READ_TIMEOUT, elicitation_callback=person.elicit) as session:
            await session.initialize()
            await generate(session, root)
            await run_loop(session, person, profile, secret)
            await declined(session, person, profile)
    await refused_without_elicitation(url, profile)
    print(f"all bootstrap checks passed with mcp 1.30.0 in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 5:
        print(f"usage: {sys.argv[0]} MCP_URL ROOT_NAME PROFILE SECRET", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main_async(*sys.argv[1:])))


if __name__ == "__main__":
    main()
