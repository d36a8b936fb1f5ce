"""A synchronous call that outlives the server's wait, with the official Python SDK (mcp==1.30.0).

Usage: overdue_client.py MCP_URL

The server must run with `--fixtures --sync-timeout-ms 2000`. A plain `tools/call` of
`slow_compute` for longer than that answers with an error that names a task: the call went on as
that task, which the client then fetches (tasks/get, tasks/result, tasks/list) or stops
(tasks/cancel) with the SDK's experimental tasks API (2025-11-25). Prints one line per check and
exits non-zero on the first failure.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
import warnings
from datetime import timedelta

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent

# `session.experimental` is the SDK's 2025-11-25 tasks API, marked deprecated in 1.30.
warnings.simplefilter("ignore", DeprecationWarning)

RELATED_TASK = "io.modelcontextprotocol/related-task"


async def overdue_call(session: ClientSession, seconds: float, label: str) -> str:
    """Calls slow_compute synchronously past the server's wait; returns the task the error names."""
    try:
        result = await session.call_tool("slow_compute", {"seconds": seconds, "label": label})
    except McpError as e:
        data = e.error.data or {}
        task_id = data.get("taskId")
        assert isinstance(task_id, str) and task_id, f"the error names no task: {e.error!r}"
        assert task_id in e.error.message, f"the message does not name the task: {e.error.message!r}"
        assert "tasks/get" in e.error.message, f"the message does not say how to fetch it: {e.error.message!r}"
        assert data.get("task", {}).get("taskId") == task_id, f"the error's task is not the named one: {data!r}"
        return task_id
    raise AssertionError(f"a {seconds} s call answered within the server's wait: {result!r}")


async def run(url: str) -> None:
    async with streamable_http_client(url) as (read, write, _session_id):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=30)) as session:
            await session.initialize()
            deadline = time.monotonic() + 20
            while "slow_compute" not in {t.name for t in (await session.list_tools()).tools}:
                assert time.monotonic() < deadline, "slow_compute is never listed"
                await asyncio.sleep(0.2)
            tasks = session.experimental

            task_id = await overdue_call(session, 5, "late")
            print(f"ok: a call past the wait names task {task_id}")
            task = await tasks.get_task(task_id)
            assert task.taskId == task_id and task.status in ("working", "completed"), f"tasks/get: {task!r}"
            listed = [t.taskId for t in (await tasks.list_tasks()).tasks]
            assert task_id in listed, f"tasks/list does not list {task_id}: {listed}"
            print(f"ok: tasks/get says {task.status}, tasks/list lists it")
            result = await tasks.get_task_result(task_id, CallToolResult)
            texts = [c.text for c in result.content if isinstance(c, TextContent)]
            assert texts == ["computed late"], f"tasks/result: {result!r}"
            assert (result.meta or {}).get(RELATED_TASK, {}).get("taskId") == task_id, f"tasks/result: {result!r}"
            print("ok: tasks/result answers what the call would have")

            doomed = await overdue_call(session, 60, "doomed")
            cancelled = await tasks.cancel_task(doomed)
            assert cancelled.status == "cancelled", f"tasks/cancel: {cancelled!r}"
            after = await tasks.get_task(doomed)
            assert after.status == "cancelled", f"tasks/get after the cancel: {after!r}"
            print(f"ok: tasks/cancel stops task {doomed}")


def main() -> None:
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} MCP_URL", file=sys.stderr)
        sys.exit(2)
    try:
        asyncio.run(run(sys.argv[1]))
    except BaseException:
        traceback.print_exc()
        sys.exit(1)


if __name__ == "__main__":
    main()
