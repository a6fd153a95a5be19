"""What both server edges do alike: decode a request, check its session ids, tell a failure.

``create_http_app`` (HTTP) and ``NatsAgentHost`` (NATS) differ in how a
request arrives and how the answer leaves; what a body means, which ids are
checked, and which ``{"error", "code"}`` a failure becomes are the same on
both (``specs/http.md``, ``specs/nats.md``), and are written here once. A
session id is checked here, into a :class:`~helix_agents.ids.SessionId`;
the store checks it again, as the last line of defence.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import AsyncIterator, Mapping
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

import msgspec

from helix_agents.errors import (
    AgentServerError,
    DamagedLogError,
    HelixError,
    LogError,
    StoreUnavailableError,
    TransportError,
    UsageError,
)
from helix_agents.ids import SessionId, is_schedule_log, validate_session_id
from helix_agents.protocol import RemoteStartRequest, TransportEvent
from helix_agents.tracing import trace_context_from_headers

__all__ = [
    "MAX_JSON_DEPTH",
    "StreamOpener",
    "checked_depth",
    "checked_id",
    "checked_start",
    "decode",
    "protocol_error",
    "with_trace_headers",
]

log = logging.getLogger("helix_agents.server")

T = TypeVar("T")

MAX_JSON_DEPTH = 64
"""Request bodies nested deeper than this (objects and arrays) are ``INVALID_REQUEST``."""

_TOO_DEEP = f"invalid request: JSON nested deeper than {MAX_JSON_DEPTH} levels"


class _Role(msgspec.Struct):
    role: Literal["user"]


class _MessageRoles(msgspec.Struct):
    """What the protocol requires of a message list that decoding a tagged struct does not."""

    message: str | list[_Role] | None = None


def decode(raw: bytes, kind: type[T]) -> T:
    """``raw`` JSON as a ``kind``; ``INVALID_REQUEST`` (naming the field) when it is not one.

    A body nested deeper than :data:`MAX_JSON_DEPTH` is refused (it would
    exhaust the stack later, if not here), and every item of a ``message``
    list must say its ``role``.
    """
    try:
        decoded: T = msgspec.json.decode(raw, type=kind)
        if isinstance(getattr(decoded, "message", None), list):
            msgspec.json.decode(raw, type=_MessageRoles)
    except msgspec.ValidationError as exc:
        raise AgentServerError("INVALID_REQUEST", f"invalid request: {exc}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise AgentServerError("INVALID_REQUEST", f"malformed JSON: {exc}") from exc
    except RecursionError:
        raise AgentServerError("INVALID_REQUEST", _TOO_DEEP) from None
    if _deeper_than(decoded, MAX_JSON_DEPTH):
        raise AgentServerError("INVALID_REQUEST", _TOO_DEEP)
    return decoded


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether ``value`` nests objects and arrays (and structs) more than ``limit`` deep."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, msgspec.Struct):
            children: Any = msgspec.structs.astuple(item)
        elif isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list | tuple):
            children = item
        else:
            continue
        if depth >= limit:
            return True
        pending.extend(
            (child, depth + 1)
            for child in children
            if isinstance(child, dict | list | tuple | msgspec.Struct)
        )
    return False


def checked_depth(value: Any, field: str, limit: int = MAX_JSON_DEPTH) -> Any:
    """``value`` (JSON decoded from a string inside a body) if it nests at most ``limit``
    levels deep; ``INVALID_REQUEST`` naming ``field`` otherwise."""
    if _deeper_than(value, limit):
        raise AgentServerError(
            "INVALID_REQUEST", f"{field}: JSON nested deeper than {limit} levels"
        )
    return value


def checked_id(value: object, field: str = "sessionId") -> SessionId:
    """A session id from a request, checked; ``INVALID_REQUEST`` naming ``field`` otherwise.

    An id beginning ``cron:`` (the schedules' log) is ``NOT_FOUND``: no session has one.
    """
    try:
        checked = validate_session_id(value)
    except UsageError as exc:
        raise AgentServerError("INVALID_REQUEST", f"{field}: {exc}") from exc
    if is_schedule_log(checked):  # the schedules' log: no session is there, nor may be
        raise AgentServerError(
            "NOT_FOUND", f"{field}: no session has an id beginning 'cron:' (kept for schedules)"
        )
    return checked


def checked_start(request: RemoteStartRequest) -> RemoteStartRequest:
    """``request`` once its session ids (its own, its parent's, root's, ancestors', workspace's)
    are checked."""
    checked_id(request.session_id)
    for field, value in (
        ("parentSessionId", request.parent_session_id),
        ("rootSessionId", request.root_session_id),
        ("workspaceSessionId", request.workspace_session_id),
    ):
        if value is not None:
            checked_id(value, field)
    for index, ancestor in enumerate(request.ancestors or ()):
        checked_id(ancestor, f"ancestors[{index}]")
    return request


def with_trace_headers(
    request: RemoteStartRequest, headers: Mapping[str, str] | None
) -> RemoteStartRequest:
    """``request`` with the W3C ``traceparent``/``tracestate`` headers as its trace context.

    The body's ``traceContext`` wins; malformed headers are ignored (specs/otel.md).
    """
    if request.trace_context is not None:
        return request
    found = trace_context_from_headers(headers)
    return request if found is None else msgspec.structs.replace(request, trace_context=found)


def protocol_error(exc: Exception, where: str) -> AgentServerError:
    """The protocol error to answer for ``exc``, raised while serving a request at ``where``.

    The one map from exceptions to ``{"error", "code"}``: a refusal keeps its
    code; bad input (``UsageError``) is ``INVALID_REQUEST``; a store out of
    reach (``StoreUnavailableError``) is ``UNAVAILABLE``; a damaged stored
    log, an unreachable agent host, a store failure or anything unexpected is
    ``INTERNAL_ERROR``, and is logged. An ``INTERNAL_ERROR``'s message never
    carries the exception's text (it may name files, hosts or internals): it
    gives a reference that the log line carries too.
    """
    if isinstance(exc, AgentServerError):
        return exc
    if isinstance(exc, LogError | DamagedLogError):
        # A stored log that fails its checks is the server's trouble, never the
        # client's: the session is quarantined, every other one goes on. The
        # messages name the session and the seq, never where data is kept.
        log.error("%s: damaged session: %s", where, exc)
        return AgentServerError("INTERNAL_ERROR", f"damaged session log: {exc}")
    if isinstance(exc, UsageError):
        return AgentServerError("INVALID_REQUEST", str(exc))
    if isinstance(exc, StoreUnavailableError):
        # An outage of the store (NATS restarting, cut off): the request may be
        # retried once it is back; a load balancer may send it elsewhere.
        log.warning("%s: the event store is out of reach: %s", where, exc)
        return AgentServerError("UNAVAILABLE", "the event store is out of reach; try again")
    ref = secrets.token_hex(4)
    if isinstance(exc, TransportError):
        log.warning("%s: agent host unreachable (ref %s): %s", where, ref, exc)
        return AgentServerError("INTERNAL_ERROR", f"agent host unreachable (ref {ref})")
    if isinstance(exc, HelixError):
        log.error("%s failed (ref %s): %s", where, ref, exc)
    else:
        log.error("%s failed (ref %s)", where, ref, exc_info=exc)
    return AgentServerError("INTERNAL_ERROR", f"internal error (ref {ref}): see the server's log")


@runtime_checkable
class StreamOpener(Protocol):
    """A target whose streams open eagerly: one read of the log, ``NOT_FOUND`` before any event."""

    async def open_stream(
        self, session_id: SessionId, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream, its log read; ``NOT_FOUND`` now for an unknown session."""
        ...
