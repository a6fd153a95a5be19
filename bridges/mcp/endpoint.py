"""Agents out over MCP: a streamable-HTTP MCP endpoint at ``/mcp`` of the gateway.

``create_http_app(server, mcp=MCPOptions(...))`` (and ``helix-agents serve
--mcp``) calls :func:`mcp_mount`: each served agent is an MCP tool named
after its agent type, its input schema the agent's input model
(``MCPOptions.input_models``; by default ``{"message": string}``), its output
schema the agent's ``output_schema``. A call starts a new session with that
input (its first message made from the input as for a sub-agent),
follows the session's stream, and answers with the typed output as
structured content (and as JSON text), or with ``isError`` and the reason
when the run fails or is interrupted. While it runs, each chunk of the
session's stream is a progress notification (progress = the chunk's
sequence; the first, 0, names the session). A client that cancels the call
interrupts the session (resumable, as any interrupt). The endpoint is the
``mcp`` SDK's streamable-HTTP session manager, run inside the gateway's
lifespan, behind the gateway's own bearer-token check: this package never
imports the server; the gateway mounts it.
"""

from __future__ import annotations

import logging
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Iterable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, assert_never

import anyio
import mcp_types
import msgspec
from mcp import MCPError
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.datastructures import Headers
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import Message, Receive, Scope, Send

from helix_agents._aio import closing_iter
from helix_agents.agents.config import AgentConfig
from helix_agents.agents.tools import json_schema_of
from helix_agents.auth import IDENTITY_KEY, Gate, Identity
from helix_agents.errors import AgentServerError, HelixError, UsageError
from helix_agents.events import (
    Chunk,
    CustomChunk,
    ErrorChunk,
    InputRequired,
    OutputChunk,
    PartialOutput,
    ReasoningDelta,
    StepRestarted,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.models.base import FINISH_TOOL_NAME
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    RemoteStartRequest,
    message_from_input,
)
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.tool_runner import validation_message
from helix_agents.transport import RemoteAgentTransport

__all__ = ["MCP_PATH", "SESSION_META_KEY", "AgentMessage", "MCPMount", "MCPOptions", "mcp_mount"]


log = logging.getLogger("helix_agents.mcp")

_SESSION_HEADER = "mcp-session-id"
_MAX_HOLDERS = 10_000  # MCP sessions whose holder is remembered

MCP_PATH = "/mcp"
"""Where the gateway serves the MCP endpoint."""

SESSION_META_KEY = "helix-agents/sessionId"
"""The ``_meta`` key of a result that names the session the call ran."""

INTERRUPT_REASON = "cancelled by the MCP client"
"""The reason of the interrupt a cancelled call records."""

_STOP_GRACE = 5.0  # seconds a cancelled call gives its interrupt to be recorded


class AgentMessage(BaseModel):
    """The input of a served agent that has no input model of its own: the user's message."""

    model_config = ConfigDict(extra="forbid")

    message: str = Field(min_length=1, description="What to ask the agent.")


@dataclass(frozen=True)
class MCPOptions:
    """How the gateway serves its agents over MCP: ``create_http_app(server, mcp=MCPOptions())``.

    Args:
        input_models: per agent type, the pydantic model of its MCP input (the
            tool's input schema; the session's first message is made from the
            input as a sub-agent's is: a lone ``message``, ``query``, ``text`` or
            ``content`` string, else the input as JSON). Default: :class:`AgentMessage`.
        allowed_origins: browser origins allowed to call ``/mcp`` (``*``: any); a
            request with another ``Origin`` header is refused (403), one without
            is not (``serve --mcp`` passes its ``--cors-origin`` origins).

    Raises:
        UsageError: an input model that is not a pydantic model class, or
            origins that are not a list of strings. An input model for an agent
            the gateway does not serve is refused when the gateway is built.
    """

    input_models: Mapping[str, type[BaseModel]] = field(default_factory=dict)
    allowed_origins: Iterable[str] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.input_models, Mapping):
            raise UsageError("MCPOptions: input_models maps agent types to pydantic models")
        for name, model in self.input_models.items():
            if not (isinstance(model, type) and issubclass(model, BaseModel)):
                raise UsageError(f"MCPOptions: the input model of {name!r} is not a pydantic model")
        origins = self.allowed_origins
        if isinstance(origins, str) or not all(isinstance(o, str) for o in origins):
            raise UsageError("MCPOptions: allowed_origins must be a list of origins")
        object.__setattr__(self, "input_models", dict(self.input_models))
        object.__setattr__(self, "allowed_origins", tuple(origins))


class _Served(RemoteAgentTransport, Protocol):
    """What the endpoint serves: an ``AgentServer`` (its agents, their executor, the protocol)."""

    @property
    def agent_types(self) -> list[str]:
        """The agent types callers may start."""
        ...

    @property
    def executor(self) -> AgentExecutor:
        """The executor that runs them (its registry holds their definitions)."""
        ...


@dataclass(frozen=True)
class _Entry:
    """A served agent as an MCP tool."""

    agent: AgentConfig
    input_model: type[BaseModel]

    def tool(self) -> mcp_types.Tool:
        agent = self.agent
        output = agent.output_schema
        return mcp_types.Tool(
            name=agent.name,
            description=agent.description or f"Run the {agent.name} agent.",
            input_schema=json_schema_of(self.input_model),
            output_schema=json_schema_of(output) if output is not None else None,
        )


def _served(target: object) -> _Served:
    """``target`` if it serves agents of its own (an ``AgentServer``), else :class:`UsageError`."""
    executor = getattr(target, "executor", None)
    types = getattr(target, "agent_types", None)
    if not isinstance(executor, AgentExecutor) or not isinstance(types, list):
        raise UsageError(
            "MCP serves the agents of an AgentServer, whose definitions give the tools' "
            "schemas (a fleet's gateway has none)"
        )
    return target  # type: ignore[return-value]  # checked just above, structurally


def _catalog(target: _Served, input_models: Mapping[str, type[BaseModel]]) -> dict[str, _Entry]:
    unknown = sorted(set(input_models) - set(target.agent_types))
    if unknown:
        raise UsageError(f"MCPOptions: input_models names agents not served here: {unknown}")
    catalog: dict[str, _Entry] = {}
    for name in target.agent_types:
        agent = target.executor.registry.get(name)
        assert agent is not None  # an AgentServer registers what it serves
        catalog[name] = _Entry(agent, input_models.get(name, AgentMessage))
    return catalog


def _describe(chunk: Chunk) -> str:
    """A chunk as a progress message."""
    who = chunk.agent_type
    match chunk:
        case TextDelta():
            return f"{who}: {chunk.delta}"
        case ReasoningDelta():
            return f"{who} thinks: {chunk.delta}"
        case PartialOutput():
            return f"{who} writes its output"
        case ToolStart() if chunk.tool_name == FINISH_TOOL_NAME:
            return f"{who} gives its output"
        case ToolEnd() if chunk.tool_name == FINISH_TOOL_NAME:
            refused = f"refused: {chunk.error}" if chunk.error is not None else "accepted"
            return f"{who}: output {refused}"
        case ToolStart():
            return f"{who} calls {chunk.tool_name}"
        case ToolEnd():
            failed = f" failed: {chunk.error}" if chunk.error is not None else " done"
            return f"{who}: {chunk.tool_name}{failed}"
        case SubAgentStart():
            return f"{who} delegates to {chunk.sub_agent_type}"
        case SubAgentEnd():
            ended = "finished" if chunk.success else f"failed: {chunk.error}"
            return f"{chunk.sub_agent_type} {ended}"
        case OutputChunk():
            return f"{who} produced its output"
        case ErrorChunk():
            return f"{who} error: {chunk.error}"
        case CustomChunk():
            return f"{who}: {chunk.name}"
        case InputRequired():
            waits = ", ".join(
                f"{entry.kind} {entry.tool_name} ({entry.tool_call_id})" for entry in chunk.pending
            )
            return f"{who} waits for people: {waits}"
        case StepRestarted():
            return f"{who} restarts step {chunk.step}"
        case _:
            assert_never(chunk)


def _result(
    text: str, session_id: str, *, error: bool = False, data: Any = None
) -> mcp_types.CallToolResult:
    return mcp_types.CallToolResult(
        content=[mcp_types.TextContent(text=text)],
        structured_content=data,
        is_error=error,
        _meta={SESSION_META_KEY: session_id},
    )


class _Calls:
    """The MCP server's handlers: list the served agents, run one per call."""

    def __init__(self, target: _Served, catalog: dict[str, _Entry], gate: Gate) -> None:
        self.target = target
        self.catalog = catalog
        self.gate = gate
        self.stopping = False
        """Set when the gateway shuts down: its cancelled calls do not interrupt their runs."""

    async def list_tools(
        self, ctx: ServerRequestContext[Any], params: mcp_types.PaginatedRequestParams | None
    ) -> mcp_types.ListToolsResult:
        return mcp_types.ListToolsResult(tools=[entry.tool() for entry in self.catalog.values()])

    async def call_tool(
        self, ctx: ServerRequestContext[Any], params: mcp_types.CallToolRequestParams
    ) -> mcp_types.CallToolResult:
        entry = self.catalog.get(params.name)
        if entry is None:
            raise MCPError(mcp_types.INVALID_PARAMS, f"Unknown tool: {params.name}")
        session_id = f"mcp-{uuid.uuid4().hex}"
        try:
            value = entry.input_model.model_validate(params.arguments or {})
        except ValidationError as exc:
            return _result(validation_message(exc), session_id, error=True)
        given = value.model_dump(mode="json")
        request = RemoteStartRequest(
            session_id=session_id,
            agent_type=entry.agent.name,
            message=message_from_input(given),
            input=given,
        )
        # The endpoint kept the caller's identity in the request's scope (_Endpoint).
        scope = ctx.request.scope if isinstance(ctx.request, Request) else {}
        identity = scope.get("state", {}).get(IDENTITY_KEY)
        if not isinstance(identity, Identity):
            raise MCPError(mcp_types.INVALID_REQUEST, "no identity for this call")
        try:
            request = await self.gate.start(identity, request)  # a reader may not start one
        except AgentServerError as exc:
            return _result(f"the agent could not start: {exc.message}", session_id, error=True)
        try:
            await self.target.start(request)
        except HelixError as exc:
            return _result(f"the agent could not start: {exc}", session_id, error=True)

        async def report(sequence: int, message: str) -> None:
            await ctx.session.report_progress(float(sequence), None, message)

        try:
            await report(0, f"session {session_id} started")
            return await self._follow(entry, session_id, report)
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(_STOP_GRACE, shield=True):
                await self._interrupt(session_id)
            raise

    async def _follow(
        self,
        entry: _Entry,
        session_id: str,
        report: Callable[[int, str], Awaitable[None]],
    ) -> mcp_types.CallToolResult:
        """Follow the session's stream to its end; the call's result."""
        async with closing_iter(self.target.stream(session_id, 0)) as events:
            async for event in events:
                if isinstance(event, ChunkEvent):
                    await report(event.sequence, _describe(event.chunk))
                elif isinstance(event, EndEvent):
                    return self._output(entry, session_id, event.output)
                else:
                    return _result(event.error, session_id, error=True)
        status = await self.target.get_status(session_id)
        if status.status == "completed":
            return self._output(entry, session_id, status.output)
        reason = status.error or f"the session's stream ended while it was {status.status}"
        return _result(reason, session_id, error=True)

    def _output(self, entry: _Entry, session_id: str, output: Any) -> mcp_types.CallToolResult:
        if entry.agent.output_schema is None:
            text = output if isinstance(output, str) else msgspec.json.encode(output).decode()
            return _result(text, session_id)
        return _result(msgspec.json.encode(output).decode(), session_id, data=output)

    async def _interrupt(self, session_id: str) -> None:
        """Interrupt the session of a call its client cancelled (not at shutdown)."""
        if self.stopping:
            return
        try:
            status = await self.target.get_status(session_id)
            if status.status in ("running", "paused"):
                await self.target.interrupt(session_id, INTERRUPT_REASON)
        except HelixError as exc:
            log.warning(
                "could not interrupt %s after its MCP call was cancelled: %s", session_id, exc
            )


def _refusal(status: int, message: str, headers: Mapping[str, str] | None = None) -> Response:
    """An HTTP refusal with a JSON-RPC error body (no id), as the MCP transports answer."""
    error = {"code": mcp_types.INVALID_REQUEST, "message": message}
    body = {"jsonrpc": "2.0", "id": None, "error": error}
    return Response(msgspec.json.encode(body), status, headers, media_type="application/json")


class _Endpoint:
    """The ASGI app at ``/mcp``: Origin and bearer token checked, then the SDK's manager."""

    def __init__(
        self,
        manager: StreamableHTTPSessionManager,
        gate: Gate,
        origins: Collection[str],
    ) -> None:
        self.manager = manager
        self.gate = gate
        self.origins = origins
        self.holders: OrderedDict[str, Identity] = OrderedDict()
        """Who opened each MCP session (legacy mode): only they may use it (specs/auth.md)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = Headers(scope=scope).get("origin")
        if origin is not None and "*" not in self.origins and origin not in self.origins:
            # A browser page from elsewhere (DNS rebinding): the MCP spec's Origin check.
            refusal = _refusal(403, f"origin {origin!r} is not allowed")
        elif (identity := await self.gate.identity_or_none(Headers(scope=scope))) is None:
            refusal = _refusal(
                401,
                "missing or invalid bearer token",
                {"WWW-Authenticate": 'Bearer realm="helix-agents"'},
            )
        else:
            held = Headers(scope=scope).get(_SESSION_HEADER)
            if held is not None and self.holders.get(held, identity) != identity:
                # Another identity's MCP session: as the SDK answers an unknown one.
                refusal = _refusal(404, "Session not found")
            else:
                # Every MCP call starts a session of its own (a write): a reader gets
                # the tools listed, and each call answered with an error (call_tool).
                scope.setdefault("state", {})[IDENTITY_KEY] = identity
                await self.manager.handle_request(scope, receive, self._holding(send, identity))
                return
        await refusal(scope, receive, send)

    def _holding(self, send: Send, identity: Identity) -> Send:
        """``send``, noting who holds an MCP session the answer opens."""

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                opened = Headers(raw=message.get("headers", [])).get(_SESSION_HEADER)
                if opened is not None and opened not in self.holders:
                    self.holders[opened] = identity
                    if len(self.holders) > _MAX_HOLDERS:
                        self.holders.popitem(last=False)
            await send(message)

        return sending


class MCPMount:
    """A gateway's MCP endpoint: its route, and the lifespan its SDK session manager needs."""

    def __init__(
        self, routes: list[BaseRoute], manager: StreamableHTTPSessionManager, calls: _Calls
    ) -> None:
        self.routes = routes
        """The ``/mcp`` route (GET, POST, DELETE) for the gateway's list."""
        self._manager = manager
        self._calls = calls

    @asynccontextmanager
    async def run(self) -> AsyncIterator[None]:
        """Run the MCP sessions; enter it in the gateway's lifespan, once the agents run.

        A call cut by its end (the gateway shuts down) leaves its run to the
        server's own shutdown, which resumes it on restart.
        """
        async with self._manager.run():
            try:
                yield
            finally:
                self._calls.stopping = True


def mcp_mount(
    target: RemoteAgentTransport,
    options: MCPOptions,
    *,
    gate: Gate,
    max_body_bytes: int,
) -> MCPMount:
    """The ``/mcp`` endpoint serving ``target``'s agents (``create_http_app(..., mcp=...)``).

    Args:
        target: the gateway's target; it must be an ``AgentServer``.
        options: the endpoint's :class:`MCPOptions`.
        gate: the gateway's ``Gate``: who a request is, and what it may start.
        max_body_bytes: the gateway's body limit (larger requests: 413).

    Raises:
        UsageError: ``target`` serves no agents of its own (a fleet's
            transport), or ``options.input_models`` names an agent it does not serve.
    """
    served = _served(target)
    calls = _Calls(served, _catalog(served, options.input_models), gate)
    server: Server[Any] = Server(
        "helix-agents", on_list_tools=calls.list_tools, on_call_tool=calls.call_tool
    )
    manager = StreamableHTTPSessionManager(server, max_request_body_size=max_body_bytes)
    endpoint = _Endpoint(manager, gate, frozenset(options.allowed_origins))
    return MCPMount([Route(MCP_PATH, endpoint, methods=["GET", "POST", "DELETE"])], manager, calls)
