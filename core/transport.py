"""The ``RemoteAgentTransport`` seam: how a parent reaches a child session anywhere.

Implementations (``helix_agents.transports``): in-process, HTTP+SSE, NATS.
Local sub-agents go through the in-process one, so every child, local or
remote, is reached the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol

from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
)

__all__ = ["RemoteAgentTransport"]


class RemoteAgentTransport(Protocol):
    """Start, watch and steer agent sessions that may live elsewhere.

    Failures raise :class:`~helix_agents.errors.AgentServerError` (the server
    refused: ``code`` says why) or a
    :class:`~helix_agents.errors.TransportError` (it could not be reached).
    """

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session; idempotent for the same ``session_id`` and request."""
        ...

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume an interrupted or paused session."""
        ...

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Send a follow-up message: a new turn of a completed session, with its memory.

        An interrupted session resumes with it; a running or paused one queues
        it for its run's next step. Idempotent per ``message_id``. A failed
        session refuses with ``SESSION_FAILED``.
        """
        ...

    def stream(self, session_id: str, from_sequence: int = 0) -> AsyncIterator[TransportEvent]:
        """Yield the session's chunks with sequence > ``from_sequence``, then ``end``/``error``.

        A stream that stops without ``end`` or ``error`` was dropped: check
        :meth:`get_status` and reconnect from the last sequence held.
        Leaving the loop closes the stream.
        """
        ...

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status, including ``latest_sequence``."""
        ...

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Ask the session to stop softly (it can be resumed)."""
        ...

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Ask the session to stop for good."""
        ...

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer client tool call ``tool_call_id`` at ``session_id`` (routed to its owner).

        Idempotent: an identical repeat changes nothing. ``resumed`` in the
        answer says the owner had every answer and runs again.
        """
        ...

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Approve or deny gated call ``tool_call_id`` at ``session_id`` (routed to its owner)."""
        ...
