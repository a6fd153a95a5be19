"""``MCPToolset``: an MCP server (stdio subprocess or streamable HTTP) as an agent's tools.

Give it to ``define_agent(..., toolsets=[...])``. The executor opens it once
(``helix_agents.toolsets``): it connects with the ``mcp`` SDK's ``Client``,
lists the server's tools and turns them into agent tools (``tools.py``), and
every session of every agent that has it shares the connection until the
executor exits.

The connection lives in a task of the toolset's own (the SDK's transports
are task groups, left by the task that entered them); calls are made from
the runs' tasks. A call that finds the connection gone (the server crashed,
the network dropped it) connects again first, within ``connect_timeout``;
a call under way when the connection goes ends with an error result, never
a hang, and is not sent again (its side effects may have happened). Every
call is bounded by ``timeout``, after which the SDK cancels it at the server.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types
from anyio.abc import TaskGroup, TaskStatus
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from pydantic import ValidationError

from helix_agents.agents.tools import ApprovalRule, Tool, ToolContext, check_approval_options
from helix_agents.errors import ToolsetError, UsageError

from .errors import MCPServerError, MCPToolError
from .tools import MCPArguments, agent_tools, error_text, result_value

__all__ = ["CALL_META_KEYS", "MCPToolset"]

log = logging.getLogger("helix_agents.mcp")

CALL_META_KEYS = ("helix-agents/sessionId", "helix-agents/toolCallId")
"""The ``_meta`` keys of every call: the calling session and the tool call's id (an
idempotency key, stable across a crash and retry)."""

PROGRESS_CHUNK = "mcp_progress"
"""The name of the custom chunk an MCP progress notification becomes."""

_PREFIX = re.compile(r"[A-Za-z0-9_\-]{0,63}")
_MAX_PAGES = 100  # tools/list pages read at most: a paginator that never ends cannot hang us
_CLOSE_TIMEOUT = 10.0  # seconds a connection gets to close (stdio: the process to exit)
_CLIENT_INFO = mcp_types.Implementation(name="helix-agents", version="0.1.0")


@dataclass
class _Connection:
    """One connection to the server, held by its own task until ``closing`` is set."""

    client: Client | None = None
    dead: bool = False
    closing: anyio.Event = field(default_factory=anyio.Event)
    closed: anyio.Event = field(default_factory=anyio.Event)


def _positive(owner: str, what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
        raise UsageError(f"{owner}: {what} must be a number of seconds > 0, not {value!r}")
    if not math.isfinite(value):
        raise UsageError(f"{owner}: {what} must be finite, not {value!r}")
    return float(value)


def _label(server: str | StdioServerParameters) -> str:
    if isinstance(server, str):
        parts = urlsplit(server)
        return f"{parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}" + (
            parts.path or ""
        )
    return " ".join([server.command, *server.args])


class MCPToolset:
    """An MCP server's tools as agent tools, over one connection the executor keeps open.

    Args:
        server: a ``StdioServerParameters`` (the server runs as a subprocess,
            spoken to over its stdin and stdout) or an ``http://`` /
            ``https://`` URL of a streamable-HTTP endpoint.
        headers: HTTP headers sent with every request (a bearer token...);
            URLs only.
        name: how errors and logs name the server (default: its command line,
            or its URL without query and credentials).
        prefix: put before every tool's name, against clashes with other
            tools (``"fs_"`` makes ``read`` the agent's ``fs_read``).
        include: the server's tools to offer (their MCP names); default all.
            A name the server does not list fails the opening.
        timeout: seconds a call may take (a call also connects again when
            it must); then it ends with an error result.
        connect_timeout: seconds to connect and list the tools.
        requires_approval: ``True``, or a predicate ``(arguments, ctx) ->
            bool`` (``arguments.arguments()`` is the dict), for every tool; or
            a mapping of MCP tool name to such a rule. A gated call waits for
            a person's approval before it reaches the server (specs/hitl.md).
            A mapped name the server does not list fails the opening.
        progress: forward the server's progress notifications of a call as
            ``mcp_progress`` custom chunks on the session's stream.

    Raises:
        UsageError: for a bad option (a server that is neither, a bad prefix,
            timeout or approval rule, ``headers`` for a subprocess).
    """

    def __init__(
        self,
        server: str | StdioServerParameters,
        *,
        headers: Mapping[str, str] | None = None,
        name: str | None = None,
        prefix: str = "",
        include: Iterable[str] | None = None,
        timeout: float = 60.0,
        connect_timeout: float = 30.0,
        requires_approval: ApprovalRule | Mapping[str, ApprovalRule] = False,
        progress: bool = True,
    ) -> None:
        owner = "MCPToolset"
        if isinstance(server, str):
            if urlsplit(server).scheme not in ("http", "https") or not urlsplit(server).hostname:
                raise UsageError(f"{owner}: {server!r} is not an http:// or https:// URL")
        elif not isinstance(server, StdioServerParameters):
            raise UsageError(f"{owner}: server must be a URL or StdioServerParameters")
        if headers is not None and not isinstance(server, str):
            raise UsageError(f"{owner}: headers are for a URL, not a subprocess")
        if headers is not None and not (
            isinstance(headers, Mapping)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in headers.items())
        ):
            raise UsageError(f"{owner}: headers must map strings to strings")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise UsageError(f"{owner}: name must be a non-empty string")
        if not isinstance(prefix, str) or _PREFIX.fullmatch(prefix) is None:
            raise UsageError(
                f"{owner}: prefix must be up to 63 letters, digits, '_' or '-', not {prefix!r}"
            )
        chosen = None
        if include is not None:
            if isinstance(include, str) or not all(isinstance(n, str) for n in include):
                raise UsageError(f"{owner}: include must be a list of tool names")
            chosen = frozenset(include)
        rules = requires_approval
        if isinstance(rules, Mapping):
            for tool, rule in rules.items():
                if not isinstance(tool, str):
                    raise UsageError(f"{owner}: requires_approval maps tool names to rules")
                check_approval_options(f"{owner} tool {tool!r}", rule, None, waits=False)
        else:
            check_approval_options(owner, rules, None, waits=False)
        if not isinstance(progress, bool):
            raise UsageError(f"{owner}: progress must be a bool")
        self._server = server
        self._headers = dict(headers or {})
        self._name = name or _label(server)
        self.prefix = prefix
        self.include = chosen
        self.timeout = _positive(owner, "timeout", timeout)
        self.connect_timeout = _positive(owner, "connect_timeout", connect_timeout)
        self.requires_approval = rules
        self.progress = progress
        self._tools: tuple[Tool[Any], ...] = ()
        self._tg: TaskGroup | None = None
        self._conn: _Connection | None = None
        self._lock: anyio.Lock | None = None
        self.connections = 0
        """How many connections this toolset has opened (the first, then each reconnection)."""

    def __repr__(self) -> str:
        state = "open" if self._tg is not None else "closed"
        return f"<MCPToolset {self._name!r} {state}, {len(self._tools)} tools>"

    @property
    def name(self) -> str:
        """How errors and logs name the server."""
        return self._name

    def tools(self) -> tuple[Tool[Any], ...]:
        """The agent tools of the server's last good tool list (empty until opened)."""
        return self._tools

    # --- lifecycle ------------------------------------------------------------------

    async def __aenter__(self) -> MCPToolset:
        """Connect and list the tools.

        Raises:
            UsageError: it is open already (one executor at a time).
            MCPServerError: the server could not be reached in ``connect_timeout``.
            ToolsetError: its tool list cannot be used (nothing is kept open).
        """
        if self._tg is not None:
            raise UsageError(f"{self!r} is already open (one executor holds it at a time)")
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg, self._lock = tg, anyio.Lock()
        try:
            await self._connect(first=True)
        except BaseException:
            await self._shutdown()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Close the connection (a subprocess is stopped) and forget the tools."""
        await self._shutdown()

    async def _shutdown(self) -> None:
        tg, self._tg = self._tg, None
        conn, self._conn = self._conn, None
        self._tools = ()
        if tg is None:
            return
        if conn is not None:
            conn.closing.set()
            with anyio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await conn.closed.wait()
        tg.cancel_scope.cancel()
        tg.cancel_scope.shield = True  # its own scope: a new one around the exit would misnest
        await tg.__aexit__(None, None, None)

    async def _connect(self, *, first: bool) -> _Connection:
        """Open a connection and list the tools; on a reconnection a bad list keeps the old one."""
        assert self._tg is not None
        conn = _Connection()
        try:
            listed: list[mcp_types.Tool] = await self._tg.start(self._hold, conn)
        except Exception as exc:
            reason = _reason(exc)
            raise MCPServerError(self._name, f"could not connect: {reason}") from exc
        self.connections += 1
        try:
            tools = agent_tools(
                self._name,
                listed,
                self._call,
                prefix=self.prefix,
                include=self.include,
                timeout=self.timeout,
                requires_approval=self.requires_approval,
            )
        except ToolsetError as error:
            if first:
                conn.closing.set()
                raise
            log.error(
                "MCP server %s: its new tool list is unusable, the old one stays: %s",
                self._name,
                error.reason,
            )
        else:
            self._tools = tools
        self._conn = conn
        return conn

    async def _hold(self, conn: _Connection, *, task_status: TaskStatus[list[Any]]) -> None:
        """Connect, list the tools, hand them over, and keep the connection until it is closed."""
        started = False
        try:
            with anyio.CancelScope(deadline=anyio.current_time() + self.connect_timeout) as scope:
                async with AsyncExitStack() as stack:
                    client = await stack.enter_async_context(await self._client(stack))
                    listed = await _list_tools(client, self._name)
                    scope.deadline = math.inf  # connected: from now on it lives until closed
                    conn.client = client
                    started = True
                    task_status.started(listed)
                    await conn.closing.wait()
            if not started:
                raise TimeoutError(f"no answer within {self.connect_timeout:g}s")
        except Exception as exc:
            if not started:
                raise
            # The server went away (a crash, a network error): calls find it dead.
            log.info("MCP server %s: connection lost: %s", self._name, _reason(exc))
        finally:
            conn.dead = True
            conn.closed.set()

    async def _client(self, stack: AsyncExitStack) -> Client:
        server = self._server
        if isinstance(server, str):
            http = await stack.enter_async_context(
                httpx2.AsyncClient(
                    headers=self._headers,
                    timeout=httpx2.Timeout(self.connect_timeout, read=None),
                )
            )
            return Client(
                streamable_http_client(server, http_client=http),
                client_info=_CLIENT_INFO,
                cache=None,
            )
        return Client(server, client_info=_CLIENT_INFO, cache=None)

    async def _usable(self) -> _Connection:
        """The live connection, connecting again first if it is gone."""
        conn = self._conn
        if conn is not None and not conn.dead:
            return conn
        if self._tg is None or self._lock is None:
            raise MCPServerError(self._name, "the toolset is closed (its executor has exited)")
        async with self._lock:
            conn = self._conn
            if conn is not None and not conn.dead:
                return conn
            if conn is not None:
                conn.closing.set()
            log.info("MCP server %s: connecting again", self._name)
            return await self._connect(first=False)

    # --- calls ------------------------------------------------------------------------

    async def _call(self, tool: str, value: MCPArguments, ctx: ToolContext) -> Any:
        """Call MCP tool ``tool``; its result, or an error the model reads."""
        conn = await self._usable()
        assert conn.client is not None
        done = False

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            if not done:  # a notification that outlived its call is dropped
                await ctx.emit(
                    PROGRESS_CHUNK,
                    {"tool": tool, "progress": progress, "total": total, "message": message},
                )

        session_key, call_key = CALL_META_KEYS
        # An open map on the wire; the checker knows only its reserved keys.
        meta = cast(
            mcp_types.RequestParamsMeta,
            {session_key: ctx.session_id, call_key: ctx.tool_call_id},
        )
        try:
            result = await conn.client.call_tool(
                tool,
                value.arguments(),
                progress_callback=on_progress if self.progress else None,
                meta=meta,
            )
        except MCPError as exc:
            if exc.code == mcp_types.CONNECTION_CLOSED or conn.dead:
                raise self._lost(conn, exc) from exc
            raise MCPServerError(
                self._name, f"refused the call to {tool!r}: {exc.message}", code=exc.code
            ) from exc
        except ValidationError as exc:
            raise MCPServerError(
                self._name, f"answered the call to {tool!r} with an invalid result: {exc}"
            ) from exc
        except (RuntimeError, anyio.BrokenResourceError, anyio.ClosedResourceError) as exc:
            if conn.dead or not isinstance(exc, RuntimeError):
                raise self._lost(conn, exc) from exc
            # The SDK checks structured content against the tool's output schema.
            raise MCPToolError(tool, str(exc)) from exc
        finally:
            done = True
        if result.is_error:
            raise MCPToolError(tool, error_text(result))
        return result_value(result)

    def _lost(self, conn: _Connection, exc: BaseException) -> MCPServerError:
        """Mark ``conn`` gone (the next call connects again); the error for this call."""
        conn.dead = True
        conn.closing.set()
        return MCPServerError(
            self._name,
            f"the connection closed during the call ({_reason(exc)}); it was not sent again, "
            "and the next call connects anew",
        )


async def _list_tools(client: Client, server: str) -> list[mcp_types.Tool]:
    """Every tool the server lists, page by page."""
    tools: list[mcp_types.Tool] = []
    cursor: str | None = None
    for _ in range(_MAX_PAGES):
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if cursor is None:
            return tools
    raise ToolsetError(server, f"tools/list gave more than {_MAX_PAGES} pages")


def _reason(exc: BaseException) -> str:
    """One line for what went wrong; an exception group's first leaf."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        return f"{exc.message} (MCP error {exc.code})"
    if isinstance(exc, ToolsetError | TimeoutError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
