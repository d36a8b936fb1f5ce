"""A real 2025-11-25 client against Conveyor: the official Python SDK (mcp==1.30.0).

Usage: legacy_client.py MCP_URL

Drives Conveyor's 2025-11-25 wire with experimental Tasks through `mcp.client.streamable_http` and
`ClientSession` (plain calls, progress, tasks/get, tasks/result, tasks/list, tasks/cancel, the task
resources, and the errors of each). The server must run with `--fixtures --task-ttl-ms 60000 --task-ttl-max-ms 600000`. Prints one line
per check and exits non-zero on the first failure.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent
from pydantic import AnyUrl

# `session.experimental` is marked deprecated in 1.30 (tasks move to an extension in 2.0); it is
# still the SDK's 2025-11-25 tasks API, which is exactly what this script exercises.
warnings.simplefilter("ignore", DeprecationWarning)

RELATED_TASK = "io.modelcontextprotocol/related-task"
TTL_MAX_MS = 600_000
UNKNOWN_TASK_ID = "0" * 32

INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
INTERNAL_ERROR = -32603


class Checks:
    """The checks, in order, and what they share (the ids of the tasks they created)."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session
        self.tasks = session.experimental
        self.created: list[str] = []

    # -- helpers ---------------------------------------------------------------------------------

    @staticmethod
    def text_of(result: CallToolResult) -> str:
        texts = [c.text for c in result.content if isinstance(c, TextContent)]
        assert texts, f"expected text content, got {result.content!r}"
        return "".join(texts)

    @staticmethod
    async def expect_error(code: int, what: str, call: Callable[[], Awaitable[Any]]) -> McpError:
        try:
            value = await call()
        except McpError as e:
            assert e.error.code == code, (
                f"{what}: expected JSON-RPC error {code}, got {e.error.code} ({e.error.message!r})"
            )
            return e
        raise AssertionError(f"{what}: expected JSON-RPC error {code}, got a result: {value!r}")

    async def wait_status(self, task_id: str, terminal: str, timeout: float = 30.0) -> list[str]:
        """Polls tasks/get until the task is terminal; returns every status seen, in order."""
        seen: list[str] = []
        deadline = time.monotonic() + timeout
        while True:
            task = await self.tasks.get_task(task_id)
            assert task.taskId == task_id, f"tasks/get answered for {task.taskId!r}, not {task_id!r}"
            if not seen or seen[-1] != task.status:
                seen.append(task.status)
            if task.status in ("completed", "failed", "cancelled"):
                assert task.status == terminal, (
                    f"task {task_id} ended {task.status!r} (statusMessage {task.statusMessage!r}), "
                    f"expected {terminal!r}; statuses seen: {seen}"
                )
                return seen
            assert time.monotonic() < deadline, f"task {task_id} still {task.status!r} after {timeout}s"
            await asyncio.sleep(0.2)

    async def create(self, name: str, arguments: dict[str, Any] | None, ttl: int = 60_000):
        created = await self.tasks.call_tool_as_task(name, arguments, ttl=ttl)
        task = created.task
        assert task.taskId, f"create result for {name} has no taskId: {created!r}"
        self.created.append(task.taskId)
        return task

    # -- checks ----------------------------------------------------------------------------------

    async def initialize(self) -> None:
        result = await self.session.initialize()
        assert result.protocolVersion == "2025-11-25", f"negotiated {result.protocolVersion!r}, not 2025-11-25"
        tasks = result.capabilities.tasks
        assert tasks is not None, f"server capabilities lack `tasks`: {result.capabilities!r}"
        assert tasks.list is not None, f"capabilities.tasks lacks `list`: {tasks!r}"
        assert tasks.cancel is not None, f"capabilities.tasks lacks `cancel`: {tasks!r}"
        assert tasks.requests is not None and tasks.requests.tools is not None, (
            f"capabilities.tasks lacks `requests.tools`: {tasks!r}"
        )
        assert tasks.requests.tools.call is not None, f"capabilities.tasks lacks `requests.tools.call`: {tasks!r}"

    async def list_tools(self) -> None:
        # Workers publish their tools on start; give a just-started server a few seconds.
        deadline = time.monotonic() + 15
        while True:
            tools = {t.name: t for t in (await self.session.list_tools()).tools}
            if {"greet", "slow_compute", "failing_job"} <= tools.keys() or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        expected = {
            "slow_compute": "optional",
            "failing_job": "required",
            "protocol_error_job": "required",
            "greet": "forbidden",
            "test_tool_with_progress": "forbidden",
        }
        for name, support in expected.items():
            assert name in tools, f"tools/list lacks {name}; it lists {sorted(tools)}"
            execution = tools[name].execution
            assert execution is not None, f"{name} has no `execution`"
            assert execution.taskSupport == support, (
                f"{name}: execution.taskSupport is {execution.taskSupport!r}, expected {support!r}"
            )
        for name, tool in tools.items():
            assert tool.execution is not None and tool.execution.taskSupport is not None, (
                f"{name}: the fixture sets execution.taskSupport, but the client read {tool.execution!r}"
            )

    async def greet(self) -> None:
        result = await self.session.call_tool("greet", {"name": "Ada"})
        assert not result.isError, f"greet reported an error: {result!r}"
        text = self.text_of(result)
        assert text == "Hello, Ada!", f"greet said {text!r}"

    async def progress(self) -> None:
        reports: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reports.append((progress, total, message))

        result = await self.session.call_tool("test_tool_with_progress", {}, progress_callback=on_progress)
        assert not result.isError, f"test_tool_with_progress reported an error: {result!r}"
        assert self.text_of(result) == "Progress test completed", f"unexpected result {result!r}"
        assert len(reports) >= 3, f"expected >= 3 progress notifications, got {len(reports)}: {reports}"
        values = [p for p, _, _ in reports]
        assert values == sorted(values), f"progress went backwards: {values}"

    async def slow_compute_task(self) -> None:
        task = await self.create("slow_compute", {"seconds": 1, "label": "py"}, ttl=60_000)
        assert task.status == "working", f"a new task is {task.status!r}, not working"
        assert task.ttl == 60_000, f"create result reports ttl {task.ttl!r}, expected 60000"
        first = await self.tasks.get_task(task.taskId)
        assert first.status == "working", f"tasks/get right after creation says {first.status!r}, not working"
        assert first.ttl == 60_000, f"tasks/get reports ttl {first.ttl!r}, expected 60000"
        seen = await self.wait_status(task.taskId, "completed")
        assert seen[0] == "working", f"statuses seen: {seen}"
        result = await self.tasks.get_task_result(task.taskId, CallToolResult)
        assert not result.isError, f"tasks/result reports an error: {result!r}"
        text = self.text_of(result)
        assert text == "computed py", f"tasks/result text is {text!r}, expected 'computed py'"
        related = (result.meta or {}).get(RELATED_TASK)
        assert isinstance(related, dict) and related.get("taskId") == task.taskId, (
            f"tasks/result _meta[{RELATED_TASK!r}] is {related!r}, expected taskId {task.taskId}"
        )

    async def ttl_cap(self) -> None:
        task = await self.create("slow_compute", {"seconds": 0, "label": "ttl"}, ttl=10_000_000)
        assert task.ttl == TTL_MAX_MS, f"asked for ttl 10000000: reported {task.ttl!r}, expected cap {TTL_MAX_MS}"
        again = await self.tasks.get_task(task.taskId)
        assert again.ttl == TTL_MAX_MS, f"tasks/get reports ttl {again.ttl!r}, expected {TTL_MAX_MS}"

    async def failing_job(self) -> None:
        task = await self.create("failing_job", {})
        await self.wait_status(task.taskId, "failed")
        result = await self.tasks.get_task_result(task.taskId, CallToolResult)
        assert result.isError is True, f"tasks/result of failing_job has isError {result.isError!r}: {result!r}"
        assert self.text_of(result) == "failing_job failed", f"unexpected result {result!r}"
        related = (result.meta or {}).get(RELATED_TASK)
        assert isinstance(related, dict) and related.get("taskId") == task.taskId, (
            f"tasks/result _meta[{RELATED_TASK!r}] is {related!r}, expected taskId {task.taskId}"
        )

    async def protocol_error_job(self) -> None:
        task = await self.create("protocol_error_job", {})
        await self.wait_status(task.taskId, "failed")
        await self.expect_error(
            INTERNAL_ERROR,
            "tasks/result of protocol_error_job",
            lambda: self.tasks.get_task_result(task.taskId, CallToolResult),
        )

    async def cancel(self) -> None:
        task = await self.create("slow_compute", {"seconds": 30, "label": "cancel-me"})
        assert task.status == "working", f"a new task is {task.status!r}, not working"
        cancelled = await self.tasks.cancel_task(task.taskId)
        assert cancelled.taskId == task.taskId, f"tasks/cancel answered for {cancelled.taskId!r}"
        assert cancelled.status == "cancelled", f"tasks/cancel returned status {cancelled.status!r}, not cancelled"
        await self.expect_error(
            INVALID_PARAMS, "a second tasks/cancel", lambda: self.tasks.cancel_task(task.taskId)
        )
        after = await self.tasks.get_task(task.taskId)
        assert after.status == "cancelled", f"tasks/get after cancel says {after.status!r}, not cancelled"

    async def list_tasks(self) -> None:
        listed: list[str] = []
        cursor: str | None = None
        for _ in range(100):
            page = await self.tasks.list_tasks(cursor)
            listed.extend(t.taskId for t in page.tasks)
            cursor = page.nextCursor
            if not cursor:
                break
        else:
            raise AssertionError("tasks/list kept answering nextCursor for 100 pages")
        missing = [t for t in self.created if t not in listed]
        assert not missing, f"tasks/list lacks created tasks {missing}; it listed {listed}"

    async def unknown_task(self) -> None:
        await self.expect_error(
            INVALID_PARAMS, "tasks/get of an unknown id", lambda: self.tasks.get_task(UNKNOWN_TASK_ID)
        )

    async def required_without_task(self) -> None:
        await self.expect_error(
            METHOD_NOT_FOUND,
            "tools/call of failing_job (taskSupport required) without `task`",
            lambda: self.session.call_tool("failing_job", {}),
        )

    async def forbidden_with_task(self) -> None:
        await self.expect_error(
            METHOD_NOT_FOUND,
            "tools/call of greet (taskSupport forbidden) with `task`",
            lambda: self.tasks.call_tool_as_task("greet", {"name": "Ada"}),
        )

    async def task_resources(self) -> None:
        listed: list[str] = []
        uri = "conveyor://tasks"
        for _ in range(100):
            page = json.loads((await self.session.read_resource(AnyUrl(uri))).contents[0].text)
            listed.extend(t["taskId"] for t in page["tasks"])
            if not page.get("nextCursor"):
                break
            uri = f"conveyor://tasks?cursor={page['nextCursor']}"
        else:
            raise AssertionError("conveyor://tasks kept answering nextCursor for 100 pages")
        missing = [t for t in self.created if t not in listed]
        assert not missing, f"conveyor://tasks lacks created tasks {missing}; it listed {listed}"
        first = self.created[0]
        state = json.loads(
            (await self.session.read_resource(AnyUrl(f"conveyor://tasks/{first}"))).contents[0].text
        )
        assert state["taskId"] == first and state["status"] == "completed", f"task state: {state}"
        assert [n["nodeId"] for n in state["nodes"]] == ["root"], f"a single call is one node: {state}"
        # Bad input is a JSON-RPC error of that read alone; the session goes on.
        await self.expect_error(
            INVALID_PARAMS,
            "resources/read with a bad cursor",
            lambda: self.session.read_resource(AnyUrl("conveyor://tasks?cursor=not-a-cursor")),
        )
        await self.expect_error(
            INVALID_PARAMS,
            "resources/read of an unknown task",
            lambda: self.session.read_resource(AnyUrl(f"conveyor://tasks/{UNKNOWN_TASK_ID}")),
        )

    def all(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        return [
            ("initialize: 2025-11-25, tasks capability (list, cancel, requests.tools.call)", self.initialize),
            ("tools/list: execution.taskSupport as the server sets it", self.list_tools),
            ("tools/call greet -> 'Hello, Ada!'", self.greet),
            ("tools/call test_tool_with_progress: >= 3 progress notifications", self.progress),
            ("slow_compute as a task: working -> completed, ttl, tasks/result with related-task", self.slow_compute_task),
            (f"task ttl 10000000 is capped to {TTL_MAX_MS}", self.ttl_cap),
            ("failing_job as a task: failed, tasks/result isError", self.failing_job),
            ("protocol_error_job as a task: failed, tasks/result error -32603", self.protocol_error_job),
            ("tasks/cancel: cancelled, second cancel -32602, tasks/get cancelled", self.cancel),
            ("tasks/list contains the created tasks", self.list_tasks),
            ("conveyor://tasks lists them, conveyor://tasks/{id} shows one; bad reads -32602", self.task_resources),
            ("tasks/get of an unknown id -> -32602", self.unknown_task),
            ("failing_job without a task -> -32601", self.required_without_task),
            ("greet with a task -> -32601", self.forbidden_with_task),
        ]


async def run(url: str) -> int:
    async with streamable_http_client(url) as (read, write, _session_id):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=30)) as session:
            checks = Checks(session)
            for number, (name, check) in enumerate(checks.all(), start=1):
                try:
                    await check()
                except AssertionError as e:
                    print(f"FAIL {number:2} {name}: {e}", flush=True)
                    return 1
                except Exception as e:  # an SDK error, a timeout, a transport failure
                    print(f"FAIL {number:2} {name}: {type(e).__name__}: {e}", flush=True)
                    traceback.print_exc()
                    return 1
                print(f"ok   {number:2} {name}", flush=True)
    print(f"all {len(checks.all())} checks passed", flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} MCP_URL", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(run(sys.argv[1])))


if __name__ == "__main__":
    main()
