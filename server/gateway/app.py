"""``create_http_app``: the Starlette gateway speaking the HTTP+SSE protocol.

It fronts an :class:`AgentServer` in this process or any
:class:`~helix_agents.RemoteAgentTransport` (a fleet behind NATS, another
HTTP server); one code path serves both, because an ``AgentServer`` is itself
a ``RemoteAgentTransport`` (over its executor's one implementation of the
protocol). The protocol is
in ``specs/http.md``.
"""

from __future__ import annotations

import hmac
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import Receive, Scope, Send

from helix_agents import RemoteAgentTransport
from helix_agents.errors import HTTP_STATUS, AgentServerError, TransportError, UsageError
from helix_agents.hitl.routing import send_approval
from helix_agents.ids import SessionId
from helix_agents.log.pricing import ModelPrice, Prices
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitApprovalRequest,
    SubmitToolResultRequest,
    TransportEvent,
    checked_decided_by,
)
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.edge import (
    StreamOpener,
    checked_id,
    checked_start,
    decode,
    protocol_error,
    with_trace_headers,
)
from helix_agents.server.gateway.openapi import openapi_document
from helix_agents.server.gateway.openapi_components import MAX_SEQUENCE
from helix_agents.server.gateway.sessions import session_list_endpoint
from helix_agents.server.streams.closing import OpenStreams
from helix_agents.server.streams.front_end import ProjectedStreamResponse, stream_format
from helix_agents.server.streams.front_end_runs import decode_run, run_front_end
from helix_agents.server.streams.sse import SSEResponse
from helix_agents.server.ui import store_of, ui_routes
from helix_agents.transports.bodies import SessionRequest

if TYPE_CHECKING:
    from helix_agents.bridges.mcp.endpoint import MCPMount, MCPOptions

__all__ = ["DEFAULT_MAX_BODY_BYTES", "AgentDirectory", "Auth", "create_http_app"]

T = TypeVar("T")

log = logging.getLogger("helix_agents.server")

CLIENT_GONE_EVERY = 10.0
"""Seconds between two log lines about clients that left before their request's body came."""


class _ClientsGone:
    """Clients that left mid-body: one ``info`` line per :data:`CLIENT_GONE_EVERY`, counting."""

    def __init__(self) -> None:
        self.last = -CLIENT_GONE_EVERY
        self.since = 0

    def note(self, path: str) -> None:
        """A client left before its request's body on ``path`` came whole."""
        self.since += 1
        now = time.monotonic()
        if now - self.last < CLIENT_GONE_EVERY:
            return
        log.info(
            "gateway %s: a client left before its request's body came (%d since the last "
            "such line)",
            path,
            self.since,
        )
        self.last, self.since = now, 0


_clients_gone = _ClientsGone()

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""Request bodies larger than this (1 MiB) are answered 413."""

Auth = Collection[str] | Callable[[str], Awaitable[bool]]
"""Bearer tokens that are accepted, or an async check of a token."""

_encoder = msgspec.json.Encoder()


def _cursor(raw: str, field: str) -> int:
    """A stream cursor: ASCII digits, 0 to :data:`MAX_SEQUENCE`; else ``INVALID_REQUEST``."""
    digits = raw.lstrip("0") or "0"
    if not (raw.isascii() and raw.isdigit()) or len(digits) > len(str(MAX_SEQUENCE)):
        value = None
    else:
        value = int(digits)
    if value is None or value > MAX_SEQUENCE:
        shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
        raise AgentServerError(
            "INVALID_REQUEST", f"{field} must be an integer from 0 to {MAX_SEQUENCE}, not {shown!r}"
        )
    return value


@runtime_checkable
class AgentDirectory(Protocol):
    """A target that can list the agent types behind it (a NATS fleet: its hosts' union)."""

    async def list_agent_types(self) -> list[str]:
        """The agent types that can be started, sorted."""
        ...


def _json(payload: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    return Response(_encoder.encode(payload), status, headers, media_type="application/json")


_UNAVAILABLE_RETRY_AFTER = "2"
"""Seconds a client is told to wait after a ``503`` of an outage (the store or the fleet)."""


def _error(error: AgentServerError, headers: Mapping[str, str] | None = None) -> Response:
    status = HTTP_STATUS.get(error.code, 500)
    if error.code == "UNAUTHORIZED":
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="helix-agents"'}
    elif error.code == "UNAVAILABLE" and not (headers and "Retry-After" in headers):
        headers = {**(headers or {}), "Retry-After": _UNAVAILABLE_RETRY_AFTER}
    return _json({"error": error.message, "code": error.code}, status, headers)


def _token_matches(token: str, allowed: Collection[str]) -> bool:
    """Whether ``token`` is one of ``allowed``, compared as bytes in constant time.

    Header values arrive as Latin-1 text (any byte is one character); the
    tokens we accept are compared as UTF-8, so a non-ASCII token is refused,
    never an error.
    """
    given = token.encode("latin-1", errors="replace")
    return any(hmac.compare_digest(given, candidate.encode()) for candidate in allowed)


def create_http_app(
    target: AgentServer | RemoteAgentTransport,
    *,
    auth: Auth | None = None,
    heartbeat_interval: float = 15.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    mcp: MCPOptions | None = None,
    prices: Prices | Mapping[str, ModelPrice] | None = None,
) -> Starlette:
    """Build the Starlette app serving the protocol for ``target``.

    Args:
        target: an :class:`AgentServer` (entered in the app's lifespan unless it
            is already running) or any ``RemoteAgentTransport``.
        auth: accepted bearer tokens, or an async ``token -> bool`` check; when
            set, every route but ``/health`` needs ``Authorization: Bearer``.
        heartbeat_interval: seconds between ``:heartbeat`` comments on ``/sse``.
        max_body_bytes: larger request bodies are refused with 413.
        mcp: also serve ``target``'s agents as MCP tools at ``/mcp``
            (``helix_agents.mcp.MCPOptions``, the mcp extra; specs/mcp.md);
            ``target`` must then be an ``AgentServer``.
        prices: what tokens cost, for the inspector's cost per node: a
            ``helix_agents.log.Prices`` (by model name and by agent type), or a
            mapping of model name to ``ModelPrice``; the built-in defaults
            (``helix_agents.log.pricing.DEFAULT_PRICES``) fill the gaps.
    """
    price_list = _prices(prices)
    server = target if isinstance(target, AgentServer) else None
    transport: RemoteAgentTransport = target
    # Decided once: a protocol's isinstance walks its members (tens of microseconds).
    opener = target if isinstance(target, StreamOpener) else None
    streams = OpenStreams()

    async def authorized(request: Request) -> bool:
        if auth is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        if callable(auth):
            return bool(await auth(token))
        return _token_matches(token, auth)

    def too_large() -> AgentServerError:
        return AgentServerError("PAYLOAD_TOO_LARGE", f"request body over {max_body_bytes} bytes")

    async def raw_body(request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
            raise too_large()
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body_bytes:
                raise too_large()
            chunks.append(chunk)
        return b"".join(chunks)

    async def body(request: Request, kind: type[T]) -> T:
        return decode(await raw_body(request), kind)

    def endpoint(
        handler: Callable[[Request], Awaitable[Response | SSEResponse | ProjectedStreamResponse]],
        *,
        open_: bool = False,
    ) -> Callable[[Request], Awaitable[Any]]:
        async def wrapped(request: Request) -> Any:
            try:
                if not open_ and not await authorized(request):
                    raise AgentServerError("UNAUTHORIZED", "missing or invalid bearer token")
                return await handler(request)
            except ClientDisconnect:
                # Not an error of the server's: nobody reads the answer, nothing changed.
                _clients_gone.note(request.url.path)
                return _error(AgentServerError("INVALID_REQUEST", "client disconnected"))
            except Exception as exc:
                return _error(protocol_error(exc, f"gateway {request.url.path}"))

        wrapped.__name__ = handler.__name__
        return wrapped

    async def open_stream(
        session_id: SessionId, from_sequence: int
    ) -> AsyncIterator[TransportEvent]:
        """The stream, its session known to exist: a 404 comes before any byte of it."""
        if opener is not None:  # an AgentServer, a NATS fleet: one read of the log
            return await opener.open_stream(session_id, from_sequence)
        await transport.get_status(session_id)  # another gateway: ask it first
        return transport.stream(session_id, from_sequence)

    async def start(request: Request) -> Response:
        req = checked_start(await body(request, RemoteStartRequest))
        return _json(await transport.start(with_trace_headers(req, request.headers)))

    async def resume(request: Request) -> Response:
        req = await body(request, RemoteResumeRequest)
        checked_id(req.session_id)
        return _json(await transport.resume(req))

    async def message(request: Request) -> Response:
        req = await body(request, RemoteMessageRequest)
        checked_id(req.session_id)
        return _json(await transport.send_message(req))

    async def status(request: Request) -> Response:
        session_id = checked_id(request.query_params.get("sessionId", ""))
        return _json(await transport.get_status(session_id))

    async def sse(request: Request) -> SSEResponse | ProjectedStreamResponse:
        session_id = checked_id(request.query_params.get("sessionId", ""))
        # Both are checked when present; the query parameter wins. An empty
        # Last-Event-ID (a client that has received no id yet) is no cursor.
        header = request.headers.get("last-event-id")
        cursor = _cursor(header, "Last-Event-ID") if header else 0
        query = request.query_params.get("fromSequence")
        if query is not None:
            cursor = _cursor(query, "fromSequence")
        fmt = stream_format(request.query_params.get("format"))
        if fmt is not None:  # a front-end projection: it replays the log up to the cursor
            events = await open_stream(session_id, 0)
            return ProjectedStreamResponse(
                fmt, session_id, events, cursor, heartbeat_interval=heartbeat_interval
            )
        events = await open_stream(session_id, cursor)
        return SSEResponse(
            events, heartbeat_interval=heartbeat_interval, open_streams=(streams, session_id)
        )

    async def sse_run(request: Request) -> ProjectedStreamResponse:
        fmt = stream_format(request.query_params.get("format"))
        if fmt is None:
            raise AgentServerError(
                "INVALID_REQUEST", "POST /sse needs format=ag-ui or ai-sdk (a run)"
            )
        run = decode_run(await raw_body(request), fmt)
        return await run_front_end(
            transport,
            open_stream,
            run,
            fmt,
            request.query_params.get("agentType"),
            heartbeat_interval=heartbeat_interval,
        )

    async def interrupt(request: Request) -> Response:
        req = await body(request, SessionRequest)
        await transport.interrupt(checked_id(req.session_id), req.reason)
        return _json({"ok": True})

    async def abort(request: Request) -> Response:
        req = await body(request, SessionRequest)
        await transport.abort(checked_id(req.session_id), req.reason)
        return _json({"ok": True})

    async def submit_tool_result(request: Request) -> Response:
        req = await body(request, SubmitToolResultRequest)
        return _json(
            await transport.submit_tool_result(
                checked_id(req.session_id), req.tool_call_id, req.result, req.error
            )
        )

    async def submit_approval(request: Request) -> Response:
        req = await body(request, SubmitApprovalRequest)
        return _json(
            await send_approval(
                transport,
                checked_id(req.session_id),
                req.tool_call_id,
                req.approved,
                req.reason,
                checked_decided_by(req.decided_by),
            )
        )

    async def health(request: Request) -> Response:
        if server is not None:
            agents = server.agent_types
        elif isinstance(target, AgentDirectory):  # a fleet: what its live hosts announce
            try:
                agents = await target.list_agent_types()
            except TransportError as exc:
                # The fleet is out of reach (its NATS down): not this server's fault, and
                # not for a load balancer to send clients here meanwhile.
                log.warning("gateway /health: the fleet is out of reach: %s", exc)
                return _error(AgentServerError("UNAVAILABLE", "the fleet is out of reach"))
        else:
            agents = []
        return _json({"status": "ok", "agents": agents})

    document = _encoder.encode(openapi_document(auth=auth is not None))

    async def openapi(request: Request) -> Response:
        return Response(document, media_type="application/json")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            # Every route at this path (``/sse`` has two, GET and POST), not only the first.
            methods = {
                method
                for route in request.app.routes
                if isinstance(route, Route) and route.matches(request.scope)[0] != Match.NONE
                for method in route.methods or ()
            }
            allowed = ", ".join(sorted(methods))
            return _error(
                AgentServerError(
                    "METHOD_NOT_ALLOWED", f"{request.method} is not allowed here (only {allowed})"
                ),
                {"Allow": allowed},
            )
        if exc.status_code == 404:
            return _error(AgentServerError("NOT_FOUND", f"no route {request.url.path}"))
        return _error(AgentServerError("INVALID_REQUEST", str(exc.detail)))

    async def internal_error(request: Request, exc: Exception) -> Response:
        return _error(protocol_error(exc, f"gateway {request.url.path}"))

    mcp_endpoint = _mcp_endpoint(target, mcp, authorized, max_body_bytes)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if server is not None and not server.running:
                await stack.enter_async_context(server)
            if mcp_endpoint is not None:  # its sessions start after the agents, stop before
                await stack.enter_async_context(mcp_endpoint.run())
            yield

    routes = [
        Route("/start", endpoint(start), methods=["POST"]),
        Route("/resume", endpoint(resume), methods=["POST"]),
        Route("/message", endpoint(message), methods=["POST"]),
        Route("/sse", endpoint(sse), methods=["GET"]),
        Route("/sse", endpoint(sse_run), methods=["POST"]),
        Route("/status", endpoint(status), methods=["GET"]),
        Route("/sessions", endpoint(session_list_endpoint(target)), methods=["GET"]),
        Route("/interrupt", endpoint(interrupt), methods=["POST"]),
        Route("/abort", endpoint(abort), methods=["POST"]),
        Route("/submit-tool-result", endpoint(submit_tool_result), methods=["POST"]),
        Route("/submit-approval", endpoint(submit_approval), methods=["POST"]),
        Route("/health", endpoint(health, open_=True), methods=["GET"]),
        Route("/openapi.json", endpoint(openapi, open_=True), methods=["GET"]),
        *ui_routes(store_of(target), endpoint, price_list),  # the inspector (specs/ui.md)
        *_a2a_routes(target, authorized, max_body_bytes, auth is not None),  # specs/a2a.md
        *(mcp_endpoint.routes if mcp_endpoint is not None else ()),  # specs/mcp.md
    ]
    return _Gateway(
        endpoint(sse),
        streams,
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )


def _a2a_routes(
    target: AgentServer | RemoteAgentTransport,
    authorized: Callable[[Request], Awaitable[bool]],
    max_body_bytes: int,
    bearer: bool,
) -> list[BaseRoute]:
    """The A2A routes (specs/a2a.md) when the ``a2a`` extra is installed, else none."""
    if find_spec("a2a") is None or find_spec("sse_starlette") is None:  # found, not imported
        return []
    from helix_agents.bridges.a2a.mount import a2a_routes

    return a2a_routes(target, authorized=authorized, max_body_bytes=max_body_bytes, bearer=bearer)


def _mcp_endpoint(
    target: AgentServer | RemoteAgentTransport,
    options: MCPOptions | None,
    authorized: Callable[[Request], Awaitable[bool]],
    max_body_bytes: int,
) -> MCPMount | None:
    """The ``/mcp`` endpoint (specs/mcp.md) when ``options`` asks for it."""
    if options is None:
        return None
    from helix_agents.bridges.mcp.endpoint import mcp_mount  # options were built: the extra is here

    return mcp_mount(target, options, authorized=authorized, max_body_bytes=max_body_bytes)


class _Gateway(Starlette):
    """The app: ``GET /sse`` goes straight to its endpoint, the rest through Starlette.

    A stream's every body message would otherwise pass through Starlette's
    error and exception middleware, which buy a stream nothing: its endpoint
    answers its own errors (auth, a bad id, an unknown session) before the
    stream starts, in the protocol's shape, and once it has started an error
    can only end it. ``/sse`` with another method (``POST``: a front end's run) is Starlette's.
    """

    def __init__(
        self, sse: Callable[[Request], Awaitable[Any]], streams: OpenStreams, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self._sse = sse
        self.streams = streams
        """The open ``GET /sse`` streams (``serve``'s shutdown ends the idle ones at once)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in ("GET", "HEAD")
            and _route_path(scope) == "/sse"
        ):
            response = await self._sse(Request(scope, receive))
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _prices(prices: Prices | Mapping[str, ModelPrice] | None) -> Prices:
    if prices is None:
        return Prices()
    if isinstance(prices, Prices):
        return prices
    if isinstance(prices, Mapping):
        return Prices(prices)
    raise UsageError(
        f"create_http_app prices must be Prices or a mapping of model name to ModelPrice, "
        f"not {type(prices).__name__}"
    )
