"""A hostile tenant through the official Python SDK (mcp==1.30.0, 2025-11-25 with experimental Tasks).

Usage: tenant_client.py MCP_URL TOKEN LIVE_LIMIT

The SDK ends its whole session on any HTTP 5xx, so every refusal a tenant meets at the limits of a
shared endpoint must be a JSON-RPC error its session survives. One session, then: tasks until the
live-task limit refuses (exactly LIVE_LIMIT are created), a root's hidden file read by name, a
graph whose node fans one large output into thousands of references, and a call after each of
them. The server must run with `--fixtures --root vault=DIR` (DIR holding a `.env`) and
`--max-live-tasks-per-principal LIVE_LIMIT`. Prints one line per check and exits non-zero on the
first failure.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
import warnings
from datetime import timedelta

import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent
from pydantic import AnyUrl

warnings.simplefilter("ignore", DeprecationWarning)

OVERLOADED = -32029
INVALID_PARAMS = -32602


def text_of(result: CallToolResult) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def still_serves(session: ClientSession, what: str) -> None:
    result = await session.call_tool("greet", {"name": "tenant"})
    assert text_of(result) == "Hello, tenant!", f"after {what}: {result!r}"


async def live_limit(session: ClientSession, limit: int) -> None:
    created: list[str] = []
    refusal: McpError | None = None
    for i in range(limit + 5):
        try:
            task = await session.experimental.call_tool_as_task(
                "slow_compute", {"seconds": 60, "label": f"t{i}"}, ttl=120_000
            )
            created.append(task.task.taskId)
        except McpError as e:
            refusal = e
            break
    assert len(created) == limit, f"{len(created)} tasks created under a limit of {limit}"
    assert refusal is not None, "never refused"
    assert refusal.error.code == OVERLOADED, f"refused with {refusal.error.code}: {refusal.error.message}"
    data = refusal.error.data or {}
    assert data.get("limit") == "live_tasks_per_principal" and data.get("max") == limit, f"{data!r}"
    # A synchronous call is an unfinished task too while it runs: one slot is freed for it.
    await session.experimental.cancel_task(created.pop())
    await still_serves(session, "the live-task refusal")
    for task_id in created:
        await session.experimental.cancel_task(task_id)


async def hidden_file(session: ClientSession) -> None:
    try:
        read = await session.read_resource(AnyUrl("conveyor://roots/vault/.env"))
    except McpError as e:
        assert e.error.code == INVALID_PARAMS, f"{e.error.code}: {e.error.message}"
        assert "hidden" in e.error.message, e.error.message
        assert "hunter2" not in e.error.message
    else:
        raise AssertionError(f".env was served: {read!r}")
    await still_serves(session, "a refused read")


async def fan_in(session: ClientSession) -> None:
    references = [{"$from": "big"} for _ in range(3_000)]
    graph = {
        "nodes": [
            {"id": "big", "tool": "echo", "arguments": {"text": "x" * 60_000}},
            {"id": "fan", "tool": "echo", "arguments": {"items": references}, "dependsOn": ["big"]},
        ],
        "output": "fan",
    }
    created = await session.experimental.call_tool_as_task("run_dag", graph, ttl=120_000)
    task_id = created.task.taskId
    deadline = time.monotonic() + 60
    while True:
        task = await session.experimental.get_task(task_id)
        if task.status in ("completed", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline, f"the fan-in graph never ended ({task.status})"
        await asyncio.sleep(0.2)
    result = await session.experimental.get_task_result(task_id, CallToolResult)
    assert result.isError, f"the fan-in graph did not fail: {result!r}"
    assert "max_node_argument_bytes" in text_of(result) or "max_node_argument_bytes" in str(
        result.structuredContent
    ), f"the limit is not named: {text_of(result)[:500]}"
    await still_serves(session, "a graph that failed at a byte limit")


async def run(url: str, token: str, limit: int) -> int:
    checks = [
        (f"exactly {limit} tasks, then -32029 live_tasks_per_principal; the session goes on", lambda s: live_limit(s, limit)),
        ("a root's .env by name: -32602 hidden; the session goes on", hidden_file),
        ("3,000 references to one large output: the graph fails naming the limit", fan_in),
    ]
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(30, read=60)) as http:
        async with streamable_http_client(url, http_client=http) as (read, write, _session_id):
            async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=60)) as session:
                await session.initialize()
                for number, (name, check) in enumerate(checks, start=1):
                    try:
                        await check(session)
                    except AssertionError as e:
                        print(f"FAIL {number} {name}: {e}", flush=True)
                        return 1
                    except Exception as e:  # an SDK error, a timeout, a transport failure
                        print(f"FAIL {number} {name}: {type(e).__name__}: {e}", flush=True)
                        traceback.print_exc()
                        return 1
                    print(f"ok   {number} {name}", flush=True)
    print(f"all {len(checks)} checks passed", flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 4:
        print(f"usage: {sys.argv[0]} MCP_URL TOKEN LIVE_LIMIT", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(run(sys.argv[1], sys.argv[2], int(sys.argv[3]))))


if __name__ == "__main__":
    main()
