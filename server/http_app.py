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
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from helix_agents import (
    HTTP_STATUS,
    AgentServerError,
    RemoteAgentTransport,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitApprovalRequest,
    SubmitToolResultRequest,
    TransportEvent,
)
from helix_agents.ids import SessionId
from helix_agents.transports.bodies import SessionRequest

from .agent_server import AgentServer
from .edge import StreamOpener, checked_id, checked_start, decode, protocol_error
from .sse import SSEResponse

__all__ = ["DEFAULT_MAX_BODY_BYTES", "Auth", "SessionRequest", "create_http_app"]

T = TypeVar("T")

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""Request bodies larger than this (1 MiB) are answered 413."""

Auth = Collection[str] | Callable[[str], Awaitable[bool]]
"""Bearer tokens that are accepted, or an async check of a token."""

_encoder = msgspec.json.Encoder()

_MAX_SEQ = 2**63 - 1  # the largest sequence a store can hold


def _json(payload: Any, status: int = 200) -> Response:
    return Response(_encoder.encode(payload), status, media_type="application/json")


def _error(error: AgentServerError) -> Response:
    return _json({"error": error.message, "code": error.code}, HTTP_STATUS.get(error.code, 500))


def create_http_app(
    target: AgentServer | RemoteAgentTransport,
    *,
    auth: Auth | None = None,
    heartbeat_interval: float = 15.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> Starlette:
    """Build the Starlette app serving the protocol for ``target``.

    Args:
        target: an :class:`AgentServer` (entered in the app's lifespan unless it
            is already running) or any ``RemoteAgentTransport``.
        auth: accepted bearer tokens, or an async ``token -> bool`` check; when
            set, every route but ``/health`` needs ``Authorization: Bearer``.
        heartbeat_interval: seconds between ``:heartbeat`` comments on ``/sse``.
        max_body_bytes: larger request bodies are refused with 413.
    """
    server = target if isinstance(target, AgentServer) else None
    transport: RemoteAgentTransport = target

    async def authorized(request: Request) -> bool:
        if auth is None:
            return True
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token:
            return False
        if callable(auth):
            return bool(await auth(token))
        return any(hmac.compare_digest(token, allowed) for allowed in auth)

    def too_large() -> AgentServerError:
        return AgentServerError("PAYLOAD_TOO_LARGE", f"request body over {max_body_bytes} bytes")

    async def body(request: Request, kind: type[T]) -> T:
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
        return decode(b"".join(chunks), kind)

    def endpoint(
        handler: Callable[[Request], Awaitable[Response | SSEResponse]], *, open_: bool = False
    ) -> Callable[[Request], Awaitable[Any]]:
        async def wrapped(request: Request) -> Any:
            try:
                if not open_ and not await authorized(request):
                    raise AgentServerError("UNAUTHORIZED", "missing or invalid bearer token")
                return await handler(request)
            except Exception as exc:
                return _error(protocol_error(exc, f"gateway {request.url.path}"))

        wrapped.__name__ = handler.__name__
        return wrapped

    async def open_stream(
        session_id: SessionId, from_sequence: int
    ) -> AsyncIterator[TransportEvent]:
        """The stream, its session known to exist: a 404 comes before any byte of it."""
        if isinstance(target, StreamOpener):  # an AgentServer, a NATS fleet: one read of the log
            return await target.open_stream(session_id, from_sequence)
        await transport.get_status(session_id)  # another gateway: ask it first
        return transport.stream(session_id, from_sequence)

    async def start(request: Request) -> Response:
        req = checked_start(await body(request, RemoteStartRequest))
        return _json(await transport.start(req))

    async def resume(request: Request) -> Response:
        req = await body(request, RemoteResumeRequest)
        checked_id(req.session_id)
        return _json(await transport.resume(req))

    async def status(request: Request) -> Response:
        session_id = checked_id(request.query_params.get("sessionId", ""))
        return _json(await transport.get_status(session_id))

    async def sse(request: Request) -> SSEResponse:
        session_id = checked_id(request.query_params.get("sessionId", ""))
        raw = request.query_params.get("fromSequence")
        field = "fromSequence"
        if raw is None:
            raw, field = request.headers.get("last-event-id", "0"), "Last-Event-ID"
        if not (raw.isascii() and raw.isdigit()) or int(raw) > _MAX_SEQ:
            raise AgentServerError(
                "INVALID_REQUEST", f"{field} must be an integer from 0 to {_MAX_SEQ}, not {raw!r}"
            )
        events = await open_stream(session_id, int(raw))
        return SSEResponse(events, heartbeat_interval=heartbeat_interval)

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
            await transport.submit_approval(
                checked_id(req.session_id), req.tool_call_id, req.approved, req.reason
            )
        )

    async def health(request: Request) -> Response:
        return _json({"status": "ok", "agents": server.agent_types if server else []})

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        if exc.status_code == 405:
            return _error(
                AgentServerError("METHOD_NOT_ALLOWED", f"{request.method} is not allowed here")
            )
        if exc.status_code == 404:
            return _error(AgentServerError("NOT_FOUND", f"no route {request.url.path}"))
        return _error(AgentServerError("INVALID_REQUEST", str(exc.detail)))

    async def internal_error(request: Request, exc: Exception) -> Response:
        return _error(protocol_error(exc, f"gateway {request.url.path}"))

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        if server is not None and not server.running:
            async with server:
                yield
        else:
            yield

    routes = [
        Route("/start", endpoint(start), methods=["POST"]),
        Route("/resume", endpoint(resume), methods=["POST"]),
        Route("/sse", endpoint(sse), methods=["GET"]),
        Route("/status", endpoint(status), methods=["GET"]),
        Route("/interrupt", endpoint(interrupt), methods=["POST"]),
        Route("/abort", endpoint(abort), methods=["POST"]),
        Route("/submit-tool-result", endpoint(submit_tool_result), methods=["POST"]),
        Route("/submit-approval", endpoint(submit_approval), methods=["POST"]),
        Route("/health", endpoint(health, open_=True), methods=["GET"]),
    ]
    return Starlette(
        routes=routes,
        exception_handlers={HTTPException: http_error, Exception: internal_error},
        lifespan=lifespan,
    )
