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
from typing import Any, TypeVar

import msgspec

from helix_agents._aio import closing_iter
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
from helix_agents.transport import RemoteAgentTransport

__all__ = ["InProcessTransport"]

T = TypeVar("T")


def _copy(value: T, kind: type[T]) -> T:
    copied: T = msgspec.json.decode(msgspec.json.encode(value), type=kind)
    return copied


class InProcessTransport:
    """A :class:`~helix_agents.RemoteAgentTransport` over one in this process, by copy.

    ``target`` is usually an executor's ``service``. Requests and results
    cross through their wire encoding, so nothing mutable is shared and
    whatever could not cross a network fails here too.
    """

    def __init__(self, target: RemoteAgentTransport) -> None:
        self.target = target

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session."""
        return await self.target.start(_copy(request, RemoteStartRequest))

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume a session."""
        return await self.target.resume(_copy(request, RemoteResumeRequest))

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Send a follow-up message to a session."""
        return await self.target.send_message(_copy(request, RemoteMessageRequest))

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream from ``from_sequence``."""
        async with closing_iter(self.target.stream(session_id, from_sequence)) as events:
            async for event in events:
                yield event

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status."""
        return await self.target.get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt the session."""
        await self.target.interrupt(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Abort the session."""
        await self.target.abort(session_id, reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call (routed to its owner)."""
        copied = msgspec.json.decode(msgspec.json.encode(result))
        return await self.target.submit_tool_result(session_id, tool_call_id, copied, error)

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Approve or deny a gated call (routed to its owner)."""
        return await self.target.submit_approval(
            session_id, tool_call_id, approved, reason, decided_by=decided_by
        )
