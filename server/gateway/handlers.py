"""The protocol's handlers (``specs/http.md``): ``request -> response``, one per route.

Each takes what it serves from the app's :class:`~.context.Gateway`
(``request.app.state.gateway``). Auth, the body limit and the error shape are
the routes' middleware (``middleware.py``): a handler raises, and the
failure is answered for it. ``routes.py`` pairs each with its path, method
and OpenAPI operation.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol, TypeVar, runtime_checkable

from starlette.requests import Request
from starlette.responses import Response

from helix_agents.auth import Action, GuardedTransport, decided_by
from helix_agents.branches.fork import ForkRequest, fork_session, remote_forker
from helix_agents.errors import AgentServerError, TransportError
from helix_agents.hitl.routing import send_approval
from helix_agents.ids import SessionId
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    SubmitApprovalRequest,
    SubmitToolResultRequest,
    checked_decided_by,
)
from helix_agents.server.edge import checked_id, checked_start, decode, with_trace_headers
from helix_agents.server.streams.front_end import ProjectedStreamResponse, stream_format
from helix_agents.server.streams.front_end_runs import decode_run, run_front_end
from helix_agents.server.streams.sse import SSEResponse
from helix_agents.server.ui import store_of
from helix_agents.transports.bodies import SessionRequest

from .context import gateway_of
from .middleware import identity_of
from .openapi_components import MAX_SEQUENCE
from .responses import error_response, json_response

__all__ = [
    "AgentDirectory",
    "abort",
    "fork",
    "health",
    "interrupt",
    "message",
    "openapi",
    "resume",
    "sse",
    "sse_run",
    "start",
    "status",
    "submit_approval",
    "submit_tool_result",
]

T = TypeVar("T")

log = logging.getLogger("helix_agents.server")


@runtime_checkable
class AgentDirectory(Protocol):
    """A target that can list the agent types behind it (a NATS fleet: its hosts' union)."""

    async def list_agent_types(self) -> list[str]:
        """The agent types that can be started, sorted."""
        ...


async def _body(request: Request, kind: type[T]) -> T:
    """The request's body as a ``kind`` (``BodyLimit`` bounds the read)."""
    return decode(await request.body(), kind)


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


async def _session(request: Request, session_id: str, action: Action) -> SessionId:
    """``session_id`` checked, and within the reach of the request's identity (``Gate.session``)."""
    checked = checked_id(session_id)
    await gateway_of(request).gate.session(identity_of(request), action, checked)
    return checked


async def start(request: Request) -> Response:
    req = checked_start(await _body(request, RemoteStartRequest))
    gateway = gateway_of(request)
    req = await gateway.gate.start(identity_of(request), req)
    return json_response(await gateway.transport.start(with_trace_headers(req, request.headers)))


async def resume(request: Request) -> Response:
    req = await _body(request, RemoteResumeRequest)
    session_id = await _session(request, req.session_id, "write")
    gateway = gateway_of(request)
    answer = await gateway.transport.resume(req)
    await gateway.gate.record(identity_of(request), session_id, "resume")
    return json_response(answer)


async def message(request: Request) -> Response:
    req = await _body(request, RemoteMessageRequest)
    session_id = await _session(request, req.session_id, "write")
    gateway = gateway_of(request)
    answer = await gateway.transport.send_message(req)
    await gateway.gate.record(identity_of(request), session_id, "message", req.message_id)
    return json_response(answer)


async def status(request: Request) -> Response:
    session_id = await _session(request, request.query_params.get("sessionId", ""), "read")
    return json_response(await gateway_of(request).transport.get_status(session_id))


async def sse(request: Request) -> SSEResponse | ProjectedStreamResponse:
    gateway = gateway_of(request)
    session_id = await _session(request, request.query_params.get("sessionId", ""), "read")
    # Both are checked when present; the query parameter wins. An empty
    # Last-Event-ID (a client that has received no id yet) is no cursor.
    header = request.headers.get("last-event-id")
    cursor = _cursor(header, "Last-Event-ID") if header else 0
    query = request.query_params.get("fromSequence")
    if query is not None:
        cursor = _cursor(query, "fromSequence")
    fmt = stream_format(request.query_params.get("format"))
    heartbeat = gateway.heartbeat_interval
    if fmt is not None:  # a front-end projection: it replays the log up to the cursor
        events = await gateway.open_stream(session_id, 0)
        return ProjectedStreamResponse(
            fmt, session_id, events, cursor, heartbeat_interval=heartbeat
        )
    events = await gateway.open_stream(session_id, cursor)
    return SSEResponse(
        events, heartbeat_interval=heartbeat, open_streams=(gateway.streams, session_id)
    )


async def sse_run(request: Request) -> ProjectedStreamResponse:
    gateway = gateway_of(request)
    fmt = stream_format(request.query_params.get("format"))
    if fmt is None:
        raise AgentServerError("INVALID_REQUEST", "POST /sse needs format=ag-ui or ai-sdk (a run)")
    run = decode_run(await request.body(), fmt)
    guarded = GuardedTransport(gateway.gate, identity_of(request), gateway.transport)

    async def open_stream(session_id: SessionId, from_sequence: int) -> Any:
        await gateway.gate.session(guarded.identity, "read", session_id)
        return await gateway.open_stream(session_id, from_sequence)

    return await run_front_end(
        guarded,
        open_stream,
        run,
        fmt,
        request.query_params.get("agentType"),
        heartbeat_interval=gateway.heartbeat_interval,
    )


async def interrupt(request: Request) -> Response:
    req = await _body(request, SessionRequest)
    session_id = await _session(request, req.session_id, "write")
    gateway = gateway_of(request)
    await gateway.transport.interrupt(session_id, req.reason)
    await gateway.gate.record(identity_of(request), session_id, "interrupt")
    return json_response({"ok": True})


async def abort(request: Request) -> Response:
    req = await _body(request, SessionRequest)
    session_id = await _session(request, req.session_id, "write")
    gateway = gateway_of(request)
    await gateway.transport.abort(session_id, req.reason)
    await gateway.gate.record(identity_of(request), session_id, "abort")
    return json_response({"ok": True})


async def submit_tool_result(request: Request) -> Response:
    req = await _body(request, SubmitToolResultRequest)
    session_id = await _session(request, req.session_id, "write")
    gateway = gateway_of(request)
    answer = await gateway.transport.submit_tool_result(
        session_id, req.tool_call_id, req.result, req.error
    )
    await gateway.gate.record(identity_of(request), session_id, "tool_result", req.tool_call_id)
    return json_response(answer)


async def submit_approval(request: Request) -> Response:
    req = await _body(request, SubmitApprovalRequest)
    session_id = await _session(request, req.session_id, "write")
    gateway = gateway_of(request)
    identity = identity_of(request)
    answer = await send_approval(
        gateway.transport,
        session_id,
        req.tool_call_id,
        req.approved,
        req.reason,
        decided_by(identity, checked_decided_by(req.decided_by)),
    )
    await gateway.gate.record(identity, session_id, "approval", req.tool_call_id)
    return json_response(answer)


def _well_formed(session_id: str) -> bool:
    try:
        checked_id(session_id)
    except AgentServerError:
        return False
    return True


async def fork(request: Request) -> Response:
    req = await _body(request, ForkRequest)
    gateway, identity = gateway_of(request), identity_of(request)
    # The origin within reach for a write: a fork makes (and runs) a session.
    origin = await _session(request, req.session_id, "write")
    if req.new_session_id is not None and _well_formed(req.new_session_id):
        # Another tenant's id is taken (409); a malformed one the fork refuses (400).
        await gateway.gate.free_or_own(identity, req.new_session_id)
    store = store_of(gateway.transport)
    if store is None:
        raise AgentServerError(
            "INVALID_REQUEST",
            "this gateway holds no session logs: POST /fork to the server that does",
        )
    server = gateway.server
    result = await fork_session(
        store,
        gateway.transport,
        origin,
        req.at_seq,
        edits=req.edits,
        new_session_id=req.new_session_id,
        run=req.run,
        id_map=req.id_map,
        remote_fork=None if server is None else remote_forker(server.executor.registry),
    )
    await gateway.gate.record(identity, result.session_id, "fork", origin)
    return json_response(result)


async def health(request: Request) -> Response:
    gateway = gateway_of(request)
    target = gateway.transport
    if gateway.server is not None:
        agents = gateway.server.agent_types
    elif isinstance(target, AgentDirectory):  # a fleet: what its live hosts announce
        try:
            agents = await target.list_agent_types()
        except TransportError as exc:
            # The fleet is out of reach (its NATS down): not this server's fault, and
            # not for a load balancer to send clients here meanwhile.
            log.warning("gateway /health: the fleet is out of reach: %s", exc)
            return error_response(AgentServerError("UNAVAILABLE", "the fleet is out of reach"))
    else:
        agents = []
    return json_response({"status": "ok", "agents": agents})


async def openapi(request: Request) -> Response:
    return Response(gateway_of(request).document, media_type="application/json")
