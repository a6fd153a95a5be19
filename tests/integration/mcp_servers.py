"""Real MCP servers for the bridge's tests, written with the ``mcp`` SDK.

Two servers, each runnable as a script over stdio or streamable HTTP::

    python mcp_servers.py tools stdio --calls PATH
    python mcp_servers.py tools http PORT --calls PATH [--token TOKEN]
    python mcp_servers.py listed stdio --calls PATH --list PATH

``tools`` is an ``MCPServer`` with typed tools (structured and text results,
errors, progress, a slow tool, one that crashes its process, an image).
``listed`` is a low-level ``Server`` that lists whatever the JSON file at
``--list`` says (read at every ``tools/list``: a test rewrites it between two
connections) and answers every call with its arguments. Both append one JSON
line per call to ``--calls`` (the tool, its ``_meta``, the process id, and
``cancelled`` when a call was cancelled at the server): the tests count calls
on the server's side.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import MCPServer
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.mcpserver import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from pydantic import BaseModel
from starlette.types import ASGIApp, Receive, Scope, Send

HERE = Path(__file__).resolve()


def record(calls: Path | None, tool: str, meta: Any, **more: Any) -> None:
    """Append one call to the calls file (the server side's count)."""
    if calls is None:
        return
    line = {"tool": tool, "meta": dict(meta or {}), "pid": os.getpid(), **more}
    with calls.open("a", encoding="utf-8") as file:
        file.write(json.dumps(line) + "\n")


def read_calls(calls: Path) -> list[dict[str, Any]]:
    """The calls the server recorded, oldest first."""
    if not calls.exists():
        return []
    return [json.loads(line) for line in calls.read_text(encoding="utf-8").splitlines()]


class Sum(BaseModel):
    total: int


def tool_server(calls: Path | None) -> MCPServer:
    """The ``tools`` server."""
    server = MCPServer("helix-test-tools", log_level="ERROR")

    def meta_of(ctx: Context) -> Any:
        return ctx.request_context.meta

    @server.tool()
    def add(a: int, b: int, ctx: Context) -> Sum:
        """Add two integers."""
        record(calls, "add", meta_of(ctx))
        return Sum(total=a + b)

    @server.tool(structured_output=False)
    def echo(text: str, ctx: Context) -> str:
        """Say the text back."""
        record(calls, "echo", meta_of(ctx))
        return f"echo: {text}"

    @server.tool()
    def fail(message: str, ctx: Context) -> str:
        """Fail with the message."""
        record(calls, "fail", meta_of(ctx))
        raise ToolError(message)

    @server.tool()
    async def slow(seconds: float, ctx: Context) -> str:
        """Sleep, then answer."""
        record(calls, "slow", meta_of(ctx))
        try:
            await anyio.sleep(seconds)
        except anyio.get_cancelled_exc_class():
            record(calls, "slow", meta_of(ctx), cancelled=True)
            raise
        return "slept"

    @server.tool()
    async def steps(count: int, ctx: Context) -> str:
        """Report progress ``count`` times."""
        record(calls, "steps", meta_of(ctx))
        for step in range(count):
            await ctx.report_progress(step + 1, count, f"step {step + 1}")
        return "stepped"

    @server.tool()
    def crash(ctx: Context) -> str:
        """Kill this server's process in the middle of the call."""
        record(calls, "crash", meta_of(ctx))
        os._exit(17)

    @server.tool(structured_output=False)
    def picture(ctx: Context) -> list[types.ContentBlock]:
        """A caption and a one-pixel image."""
        record(calls, "picture", meta_of(ctx))
        return [
            types.TextContent(text="a red dot"),
            types.ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
        ]

    @server.tool()
    def pid(ctx: Context) -> int:
        """This server's process id."""
        record(calls, "pid", meta_of(ctx))
        return os.getpid()

    return server


def listed_server(calls: Path | None, listing: Path) -> Server[Any]:
    """The ``listed`` server: its tools are whatever ``listing`` holds (a JSON list)."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        entries = json.loads(await anyio.Path(listing).read_text(encoding="utf-8"))
        return types.ListToolsResult(tools=[types.Tool.model_validate(e) for e in entries])

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        record(calls, params.name, ctx.meta)
        if params.name == "crash":
            os._exit(17)
        text = json.dumps({"called": params.name, "arguments": params.arguments or {}})
        return types.CallToolResult(content=[types.TextContent(text=text)])

    return Server("helix-test-listed", on_list_tools=list_tools, on_call_tool=call_tool)


class RequireToken:
    """ASGI middleware: 401 unless ``Authorization: Bearer <token>``."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != (
            self.expected
        ):
            await send({"type": "http.response.start", "status": 401, "headers": []})
            await send({"type": "http.response.body", "body": b"no"})
            return
        await self.app(scope, receive, send)


def tools_http_app(calls: Path | None, token: str | None = None) -> ASGIApp:
    """The ``tools`` server's streamable-HTTP app (at ``/mcp``), behind ``token`` if given."""
    app: ASGIApp = tool_server(calls).streamable_http_app()
    return RequireToken(app, token) if token else app


def stdio_command(kind: str, calls: Path, listing: Path | None = None) -> list[str]:
    """The argv that runs server ``kind`` over stdio."""
    argv = [sys.executable, str(HERE), kind, "stdio", "--calls", str(calls)]
    return [*argv, "--list", str(listing)] if listing is not None else argv


def http_command(port: int, calls: Path, token: str | None = None) -> list[str]:
    """The argv that runs the ``tools`` server over HTTP on ``port``."""
    argv = [sys.executable, str(HERE), "tools", "http", str(port), "--calls", str(calls)]
    return [*argv, "--token", token] if token else argv


class HttpServerProcess:
    """The ``tools`` server over HTTP as a subprocess on a fixed loopback port (restartable)."""

    def __init__(self, port: int, calls: Path, log: Path) -> None:
        self.port = port
        self.url = f"http://127.0.0.1:{port}/mcp"
        self.calls = calls
        self.log = log
        self.process: anyio.abc.Process | None = None

    async def start(self) -> None:
        """Start it and wait (bounded) until it accepts connections."""
        with self.log.open("ab") as log:
            self.process = await anyio.open_process(
                http_command(self.port, self.calls), stdout=log, stderr=subprocess.STDOUT
            )
        with anyio.fail_after(20):
            while True:
                if self.process.returncode is not None:
                    raise AssertionError(self.log.read_text(errors="replace")[-3000:])
                try:
                    stream = await anyio.connect_tcp("127.0.0.1", self.port)
                except OSError:
                    await anyio.sleep(0.05)  # a subprocess gives no other signal
                    continue
                await stream.aclose()
                return

    async def exited(self) -> int:
        """Wait until it has exited (it crashed itself); its exit status."""
        assert self.process is not None
        process, self.process = self.process, None
        with anyio.fail_after(20):
            return await process.wait()

    async def stop(self) -> None:
        """Kill it if it still runs, and wait."""
        process, self.process = self.process, None
        if process is not None:
            if process.returncode is None:
                os.kill(process.pid, signal.SIGKILL)
            await process.wait()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["tools", "listed"])
    parser.add_argument("transport", choices=["stdio", "http"])
    parser.add_argument("port", nargs="?", type=int)
    parser.add_argument("--calls", type=Path)
    parser.add_argument("--list", type=Path)
    parser.add_argument("--token")
    args = parser.parse_args()
    if args.kind == "listed":
        low = listed_server(args.calls, args.list)

        async def run_listed() -> None:
            async with stdio_server() as (read, write):
                await low.run(read, write, low.create_initialization_options())

        anyio.run(run_listed)
    elif args.transport == "stdio":
        tool_server(args.calls).run()
    else:
        import uvicorn

        uvicorn.run(
            tools_http_app(args.calls, args.token),
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
        )


if __name__ == "__main__":
    main()
