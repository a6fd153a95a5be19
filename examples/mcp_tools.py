"""MCP both ways: an agent uses an MCP server's tools, then is itself called over MCP.

1. Tools in. A small MCP server, written with the ``mcp`` SDK, runs as a
   subprocess (this very file, ``python examples/mcp_tools.py server``). An
   ``MCPToolset`` gives its tools to the ``calculator`` agent, prefixed
   ``calc_``; its ``wipe`` tool needs a person's approval, which the script
   gives when the run pauses. The executor opens the server once, every call
   is a tool call in the session's log, and the server stops when the
   executor exits.
2. Agents out. The same agent is served by the gateway with an MCP endpoint
   at ``/mcp`` (``create_http_app(..., mcp=MCPOptions())``; ``helix-agents serve
   ... --mcp`` does the same)
   and called with the SDK's own client, whose answer is the agent's typed
   output as structured content, with the run's chunks as progress.

The models are scripted: no LLM is called. Needs the ``mcp`` extra
(``pip install 'helix-agents[mcp]'``). Run it::

    python examples/mcp_tools.py
"""

from __future__ import annotations

import socket
import sys
from typing import Any

import anyio
import uvicorn
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent
from helix_agents.events import ToolEnd
from helix_agents.mcp import MCPOptions, MCPToolset, StdioServerParameters
from helix_agents.models import FINISH_TOOL_NAME, ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore


class Sum(BaseModel):
    total: int


class Answer(BaseModel):
    answer: int


def mcp_server() -> Any:
    """The MCP server of part 1: ``add`` and ``wipe`` (the SDK's ``MCPServer``)."""
    from mcp.server import MCPServer

    server = MCPServer("calculator-tools", log_level="ERROR")

    @server.tool()
    def add(a: int, b: int) -> Sum:
        """Add two integers."""
        return Sum(total=a + b)

    @server.tool()
    def wipe() -> str:
        """Clear the calculator's memory."""
        return "memory cleared"

    return server


toolset = MCPToolset(
    StdioServerParameters(command=sys.executable, args=[__file__, "server"]),
    prefix="calc_",
    requires_approval={"wipe": True},
)

calculator = define_agent(
    "calculator",
    description="Adds numbers with an MCP server's tools.",
    output_schema=Answer,
    toolsets=[toolset],
    llm=ScriptedLLM(
        [
            [
                ScriptedLLM.call("calc_add", {"a": 2, "b": 40}, id="add-1"),
                ScriptedLLM.call("calc_wipe", {}, id="wipe-1"),
            ],
            ScriptedLLM.finish({"answer": 42}, text="2 + 40 = 42."),
        ]
    ),
)


async def tools_in() -> tuple[Answer, list[str]]:
    """Part 1: the agent calls the MCP server's tools; a person approves ``calc_wipe``."""
    lines: list[str] = []
    store = MemoryEventStore()
    async with AgentExecutor(store, [calculator]) as executor:
        lines.append(f"tools from the MCP server: {[tool.name for tool in toolset.tools()]}")
        handle = await executor.execute(calculator, "What is 2 + 40?", session_id="calc-1")
        paused = await handle.result()
        for entry in await handle.pending_inputs():
            lines.append(f"{paused.status}: {entry.tool_name} waits for approval; approving")
            await handle.approve(entry.tool_call_id)
        result = await handle.result()
        for event in await store.read("calc-1"):
            if isinstance(event, ToolEnd) and event.tool_name != FINISH_TOOL_NAME:
                lines.append(f"{event.tool_name} -> {event.result}")
    answer = result.unwrap()
    lines.append(f"answer: {answer.answer}")
    return answer, lines


async def agents_out() -> tuple[Any, list[str]]:
    """Part 2: the agent served at ``/mcp``, called with the ``mcp`` SDK's client.

    The run pauses for ``calc_wipe`` again; the progress notifications say so
    (and name the session), and the script approves it on the server's side.
    """
    from mcp import Client

    lines: list[str] = []
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()  # connections queue while the gateway starts (it opens the MCP server)
    port = listener.getsockname()[1]
    served = AgentServer([calculator], MemoryEventStore(), owns_store=True)
    app = create_http_app(served, mcp=MCPOptions())
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    session: list[str] = []

    async def progress(progress: float, total: float | None, message: str | None) -> None:
        lines.append(f"progress {progress:g}: {message}")
        if progress == 0 and message is not None:  # "session <id> started"
            session.append(message.split()[1])
        if message is not None and "waits for people: approval calc_wipe (wipe-1)" in message:
            await served.submit_approval(session[0], "wipe-1", True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[listener]))
        try:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = [tool.name for tool in (await client.list_tools()).tools]
                lines.append(f"MCP tools of the gateway: {names}")
                result = await client.call_tool(
                    "calculator", {"message": "What is 2 + 40?"}, progress_callback=progress
                )
        finally:
            server.should_exit = True
    lines.append(f"structured content: {result.structured_content}")
    return result.structured_content, lines


async def main() -> None:
    """Both parts, printed."""
    _, first = await tools_in()
    _, second = await agents_out()
    print("\n".join([*first, *second]))


if __name__ == "__main__":
    if sys.argv[1:] == ["server"]:
        mcp_server().run()  # part 1's MCP server, over stdio
    else:
        anyio.run(main)
