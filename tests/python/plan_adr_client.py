"""Drives `plan_adr` to its end with the official MCP Python SDK (mcp 1.30.0, 2025-11-25): the
tool runs as a task, each phase's question reaches the SDK's elicitation callback on the
`tasks/result` stream, and the person's answers shape the MADR document it returns, which is then
read back as a resource. A second run is declined at its first question and must end in a tool
error that says where. Last, `research` over paths that leave the root is refused with an error that
says why, and the session goes on.

Usage: plan_adr_client.py MCP_URL ROOT_NAME
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
import warnings
from datetime import timedelta
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.context import RequestContext
from mcp.shared.exceptions import McpError
from mcp.types import (
    CallToolResult,
    ElicitRequestParams,
    ElicitResult,
    EmbeddedResource,
    ErrorData,
    TextContent,
    TextResourceContents,
)
from pydantic import AnyUrl

warnings.filterwarnings("ignore", category=DeprecationWarning)

READ_TIMEOUT = timedelta(seconds=60)

# What the person answers, by the field the phase asks for.
ANSWERS: dict[str, str] = {
    "title": "Keep task state in Redis hashes",
    "problem": "Task state must survive a gateway restart and be readable by every replica.",
    "drivers": "durability\nlatency under 1 ms\nno second database",
    "options": "Redis hashes\nPostgreSQL rows\nIn-process maps",
    "rationale": "it is already the queue, so one round trip serves both",
    "positive": "one store to operate\nscripts change state atomically",
    "negative": "memory bound by Redis",
    "steps": "Move task fields into one hash\nExpire hashes with the task TTL",
    "confirmation": "The store tests pass against a real redis-server",
}


class Person:
    """Answers each phase like a person would, and records the questions in order."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.messages: list[str] = []

    async def elicit(self, context: RequestContext[ClientSession, Any], params: ElicitRequestParams) -> ElicitResult | ErrorData:
        self.messages.append(params.message)
        # A person takes a moment, long enough for the test to see each phase's progress.
        await asyncio.sleep(0.3)
        if self.action != "accept":
            return ElicitResult(action=self.action)  # type: ignore[arg-type]
        schema = getattr(params, "requestedSchema", None) or {}
        content: dict[str, Any] = {}
        for name, spec in schema.get("properties", {}).items():
            if "enum" in spec:
                # The decision: the option this person favours, as the form offers it.
                assert "Redis hashes" in spec["enum"], f"the options offered are {spec['enum']!r}"
                content[name] = "Redis hashes"
            else:
                content[name] = ANSWERS[name]
        return ElicitResult(action="accept", content=content)


async def main_async(url: str, root: str) -> int:
    started = time.monotonic()
    person = Person()
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(
            read, write, read_timeout_seconds=READ_TIMEOUT, elicitation_callback=person.elicit
        ) as session:
            await session.initialize()
            tasks = session.experimental
            created = await tasks.call_tool_as_task("plan_adr", {"topic": "task state", "root": root})
            task_id = created.task.taskId
            result = await tasks.get_task_result(task_id, CallToolResult)
            assert not result.isError, f"plan_adr failed: {result!r}"
            phases = [int(m.group(1)) for m in (re.match(r"Phase (\d) of 7", q) for q in person.messages) if m]
            assert phases == [1, 3, 4, 5, 6], f"the phases asked were {phases} ({person.messages!r})"
            assert "task state" in person.messages[0], f"the first question ignores the topic: {person.messages[0]!r}"
            # The research phase searched the root for the problem and the options question says what it found.
            assert re.search(r"The research found: \S+:\d+", person.messages[1]), f"no evidence cited: {person.messages[1]!r}"
            texts = [c.text for c in result.content if isinstance(c, TextContent)]
            embedded = [c for c in result.content if isinstance(c, EmbeddedResource)]
            assert texts and embedded, f"expected the document as text and as a resource: {result.content!r}"
            md = texts[0]
            for expected in (
                "# Keep task state in Redis hashes",
                "## Context and Problem Statement",
                "* durability",
                "* PostgreSQL rows",
                'Chosen option: "Redis hashes", because it is already the queue',
                "* Good, because one store to operate",
                "* Bad, because memory bound by Redis",
                "1. Move task fields into one hash",
                "The store tests pass against a real redis-server",
                "status: proposed",
            ):
                assert expected in md, f"the ADR lacks {expected!r}:\n{md}"
            assert re.search(r"## More Information[\s\S]*`\S+:\d+`", md), f"the ADR cites no evidence:\n{md}"
            uri = str(embedded[0].resource.uri)
            assert uri == f"conveyor://tasks/{task_id}/adr.md", f"the embedded resource is at {uri}"
            read_back = await session.read_resource(AnyUrl(uri))
            contents = read_back.contents[0]
            assert isinstance(contents, TextResourceContents) and contents.text == md, f"reading {uri} gave {read_back!r}"
            structured = result.structuredContent or {}
            assert structured.get("chosenOption") == "Redis hashes", f"structuredContent is {structured!r}"
            final = await tasks.get_task(task_id)
            assert final.status == "completed", f"the task ended {final.status!r}"
            print(f"TASK {task_id}")
            print(f"ok   plan_adr to the end: {len(person.messages)} questions, {len(md)} bytes of MADR, read back at {uri}")

            # A person who declines the first question stops the workflow there.
            person.action = "decline"
            person.messages.clear()
            created = await tasks.call_tool_as_task("plan_adr", {"topic": "something else"})
            declined = await tasks.get_task_result(created.task.taskId, CallToolResult)
            assert declined.isError, f"a declined workflow should end in a tool error: {declined!r}"
            text = " ".join(c.text for c in declined.content if isinstance(c, TextContent))
            assert "problem" in text or "phase 1" in text.lower() or "Phase 1" in text, f"the error does not say where: {text!r}"
            assert len(person.messages) == 1, f"asked {person.messages!r} after declining"
            print(f"ok   a declined first question ends the workflow: {text[:120]!r}")
            # A path out of the root is refused with a clear error, and the session goes on.
            for paths in (["../"], ["/etc"]):
                try:
                    refused = await session.call_tool("research", {"root": root, "question": "passwd", "paths": paths})
                except McpError as e:
                    message = e.error.message
                else:
                    assert refused.isError, f"research over {paths} was not refused: {refused!r}"
                    message = " ".join(c.text for c in refused.content if isinstance(c, TextContent))
                assert ".." in message or "absolute" in message, f"the refusal of {paths} does not say why: {message!r}"
            assert (await session.call_tool("research", {"root": root, "question": "signing key", "maxResults": 1})).structuredContent
            print("ok   paths out of the root are refused, and the session goes on")
    print(f"all plan_adr checks passed with mcp 1.30.0 in {time.monotonic() - started:.1f} s", flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} MCP_URL ROOT_NAME", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main_async(sys.argv[1], sys.argv[2])))


if __name__ == "__main__":
    main()
