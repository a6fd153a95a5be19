"""``InProcessTransport``: the :class:`RemoteAgentTransport` for sessions in this process.

Local sub-agents are reached through it, so local and remote children take the
same path. Requests are copied through their wire encoding, so a child never
shares mutable data with its parent and anything that could not cross a
network fails here too. It lives in core (and is re-exported by
``helix_agents.transports``) because the executor uses it by default and core
imports nothing from the other folders.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Protocol, TypeVar

import msgspec

from .protocol import (
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
)

__all__ = ["AgentService", "InProcessTransport"]

T = TypeVar("T")


class AgentService(Protocol):
    """The server-side operations a transport exposes (the seeds' AgentServer API)."""

    async def start_agent(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session (idempotent)."""
        ...

    async def resume_agent(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume a session."""
        ...

    def stream_agent(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """Stream a session from a sequence."""
        ...

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """A session's status."""
        ...

    async def interrupt_agent(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt a session."""
        ...

    async def abort_agent(self, session_id: str, reason: str | None = None) -> None:
        """Abort a session."""
        ...

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call."""
        ...

    async def submit_approval(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> SubmitResponse:
        """Approve or deny a gated call."""
        ...


def _copy(value: T, kind: type[T]) -> T:
    copied: T = msgspec.json.decode(msgspec.json.encode(value), type=kind)
    return copied


class InProcessTransport:
    """A :class:`~helix_agents.RemoteAgentTransport` over an in-process :class:`AgentService`."""

    def __init__(self, service: AgentService) -> None:
        self.service = service

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session through the service."""
        return await self.service.start_agent(_copy(request, RemoteStartRequest))

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume a session through the service."""
        return await self.service.resume_agent(_copy(request, RemoteResumeRequest))

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream from ``from_sequence``."""
        events = self.service.stream_agent(session_id, from_sequence)
        try:
            async for event in events:
                yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status."""
        return await self.service.get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt the session."""
        await self.service.interrupt_agent(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Abort the session."""
        await self.service.abort_agent(session_id, reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call (routed to its owner)."""
        copied = msgspec.json.decode(msgspec.json.encode(result))
        return await self.service.submit_tool_result(session_id, tool_call_id, copied, error)

    async def submit_approval(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> SubmitResponse:
        """Approve or deny a gated call (routed to its owner)."""
        return await self.service.submit_approval(session_id, tool_call_id, approved, reason)
