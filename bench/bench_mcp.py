"""``interop`` benchmark, MCP part: an MCP tool call vs the same function as a local tool.

One agent calls ``add`` once per step, ``calls`` times, with the tool local
(a ``define_tool`` in this process) or behind an MCP server (``mcp_server.py``,
a subprocess, over stdio and over streamable HTTP, through ``MCPToolset``).
A call's time is its ``tool_end`` timestamp minus its ``tool_start`` in the
log, so each side pays the same bookkeeping (validation, the result's events)
and the MCP side adds the round trip to the server and back.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _proc import SERVED, free_port, server_process
from mcp import StdioServerParameters
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.events import ToolEnd, ToolStart
from helix_agents.mcp import MCPToolset
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore

STDIO = StdioServerParameters(command=sys.executable, args=[str(SERVED / "mcp_server.py")])


class Pair(BaseModel):
    a: int
    b: int


def _add(value: Pair, ctx: Any) -> dict[str, int]:
    return {"total": value.a + value.b}


def _agent(calls: int, **where: Any) -> Any:
    script: list[Any] = [[ScriptedLLM.call("add", {"a": i, "b": 1})] for i in range(calls)]
    return define_agent("adder", llm=ScriptedLLM([*script, "done"]), max_steps=calls + 1, **where)


async def _call_times(calls: int, **where: Any) -> list[float]:
    """Seconds of each ``add`` call of one session, from the log's timestamps."""
    agent = _agent(calls, **where)
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        assert await executor.run(agent, "go", session_id="s") == "done"
    starts = {e.tool_call_id: e.ts for e in await store.read("s") if isinstance(e, ToolStart)}
    return [
        e.ts - starts[e.tool_call_id]
        for e in await store.read("s")
        if isinstance(e, ToolEnd) and e.error is None
    ]


def _p50_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def run_mcp(*, quick: bool = False) -> dict[str, Any]:
    """Run the MCP part of the interop benchmark, print ratio lines, return its summary."""
    calls = 30 if quick else 200
    local = anyio.run(lambda: _call_times(calls, tools=[define_tool("add", "Add.", Pair, _add)]))
    stdio = anyio.run(lambda: _call_times(calls, toolsets=[MCPToolset(STDIO)]))
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        log = Path(tmp) / "mcp-http.log"
        with server_process(["mcp_server.py", str(port)], port, log):
            url = f"http://127.0.0.1:{port}/mcp"
            http = anyio.run(lambda: _call_times(calls, toolsets=[MCPToolset(url)]))
    local_ms, stdio_ms, http_ms = _p50_ms(local), _p50_ms(stdio), _p50_ms(http)
    print(f"local tool call, p50:                {local_ms:>9.3f} ms")
    print(f"MCP tool call over stdio, p50:       {stdio_ms:>9.3f} ms")
    print(f"MCP tool call over HTTP, p50:        {http_ms:>9.3f} ms")
    print(f"mcp stdio / local ratio:             {stdio_ms / local_ms:>9.2f}")
    print(f"mcp http / local ratio:              {http_ms / local_ms:>9.2f}")
    return {
        "bench": "mcp",
        "calls": calls,
        "local_call_p50_ms": round(local_ms, 3),
        "mcp_stdio_call_p50_ms": round(stdio_ms, 3),
        "mcp_http_call_p50_ms": round(http_ms, 3),
        "mcp_stdio_vs_local_ratio": round(stdio_ms / local_ms, 3),
        "mcp_http_vs_local_ratio": round(http_ms / local_ms, 3),
    }
