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
from collections.abc import AsyncIterator
from typing import Protocol, TypeVar, runtime_checkable

import msgspec

from helix_agents import (
    AgentServerError,
    HelixError,
    LogError,
    RemoteStartRequest,
    TransportError,
    TransportEvent,
    UsageError,
)
from helix_agents.ids import SessionId, validate_session_id

__all__ = ["StreamOpener", "checked_id", "checked_start", "decode", "protocol_error"]

log = logging.getLogger("helix_agents.server")

T = TypeVar("T")


def decode(raw: bytes, kind: type[T]) -> T:
    """``raw`` JSON as a ``kind``; ``INVALID_REQUEST`` (naming the field) when it is not one."""
    try:
        decoded: T = msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise AgentServerError("INVALID_REQUEST", f"invalid request: {exc}") from exc
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        raise AgentServerError("INVALID_REQUEST", f"malformed JSON: {exc}") from exc
    return decoded


def checked_id(value: object, field: str = "sessionId") -> SessionId:
    """A session id from a request, checked; ``INVALID_REQUEST`` naming ``field`` otherwise."""
    try:
        return validate_session_id(value)
    except UsageError as exc:
        raise AgentServerError("INVALID_REQUEST", f"{field}: {exc}") from exc


def checked_start(request: RemoteStartRequest) -> RemoteStartRequest:
    """``request`` once its session ids (its own, the parent's, the root's) are checked."""
    checked_id(request.session_id)
    for field, value in (
        ("parentSessionId", request.parent_session_id),
        ("rootSessionId", request.root_session_id),
    ):
        if value is not None:
            checked_id(value, field)
    return request


def protocol_error(exc: Exception, where: str) -> AgentServerError:
    """The protocol error to answer for ``exc``, raised while serving a request at ``where``.

    The one map from exceptions to ``{"error", "code"}``: a refusal keeps its
    code; bad input (``UsageError``, ``LogError``) is ``INVALID_REQUEST``; an
    unreachable agent host, a store failure or anything unexpected is
    ``INTERNAL_ERROR``, and is logged.
    """
    if isinstance(exc, AgentServerError):
        return exc
    if isinstance(exc, UsageError | LogError):
        return AgentServerError("INVALID_REQUEST", str(exc))
    if isinstance(exc, TransportError):
        log.warning("%s: agent host unreachable: %s", where, exc)
        return AgentServerError("INTERNAL_ERROR", f"agent host unreachable: {exc}")
    if isinstance(exc, HelixError):
        log.error("%s failed: %s", where, exc)
        return AgentServerError("INTERNAL_ERROR", str(exc))
    log.error("%s failed", where, exc_info=exc)
    return AgentServerError("INTERNAL_ERROR", f"{type(exc).__name__}: {exc}")


@runtime_checkable
class StreamOpener(Protocol):
    """A target whose streams open eagerly: one read of the log, ``NOT_FOUND`` before any event."""

    async def open_stream(
        self, session_id: SessionId, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream, its log read; ``NOT_FOUND`` now for an unknown session."""
        ...
