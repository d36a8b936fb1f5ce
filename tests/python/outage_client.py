"""The official Python SDK (mcp==1.30.0) through a Redis restart.

Usage: outage_client.py MCP_URL SECONDS

Opens one 2025-11-25 session and, for SECONDS, keeps calling: a plain `greet`, and a `slow_compute`
task followed by `tasks/result`. Meanwhile the test kills and restarts Redis. The SDK ends its whole
session on any HTTP 5xx, so the session surviving is the check: every call must succeed (answered
after Redis is back) or fail with a JSON-RPC error, and the session must still work at the end.
Prints a JSON summary on its last line and exits non-zero if the session broke.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
import warnings
from datetime import timedelta

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import McpError
from mcp.types import CallToolResult, TextContent

warnings.simplefilter("ignore", DeprecationWarning)


def text_of(result) -> str:
    return "".join(c.text for c in result.content if isinstance(c, TextContent))


async def run(url: str, seconds: float) -> int:
    summary = {"calls": 0, "succeeded": 0, "rpc_errors": [], "slowest_ms": 0}
    async with streamable_http_client(url) as (read, write, _):
        async with ClientSession(read, write, read_timeout_seconds=timedelta(seconds=30)) as session:
            await session.initialize()
            deadline = time.monotonic() + seconds
            i = 0
            while time.monotonic() < deadline:
                i += 1
                started = time.monotonic()
                summary["calls"] += 1
                try:
                    if i % 2:
                        result = await session.call_tool("greet", {"name": f"n{i}"})
                        assert text_of(result) == f"Hello, n{i}!", result
                    else:
                        created = await session.experimental.call_tool_as_task(
                            "slow_compute", {"seconds": 0, "label": f"t{i}"}, ttl=60_000
                        )
                        result = await session.experimental.get_task_result(created.task.taskId, CallToolResult)
                        assert text_of(result) == f"computed t{i}", result
                    summary["succeeded"] += 1
                except McpError as e:
                    # A JSON-RPC error fails this call only; the session goes on.
                    summary["rpc_errors"].append({"code": e.error.code, "message": e.error.message})
                summary["slowest_ms"] = max(summary["slowest_ms"], int((time.monotonic() - started) * 1000))
                await asyncio.sleep(0.05)
            # The session is still usable after the outage.
            final = await session.call_tool("greet", {"name": "after"})
            assert text_of(final) == "Hello, after!", final
    print(json.dumps(summary), flush=True)
    return 0


def main() -> None:
    if len(sys.argv) != 3:
        print(f"usage: {sys.argv[0]} MCP_URL SECONDS", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(run(sys.argv[1], float(sys.argv[2]))))


if __name__ == "__main__":
    main()
