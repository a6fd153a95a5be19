"""``GuardedTransport``: a target as one identity may use it (the front-end streams, MCP).

Every operation asks the :class:`~.gate.Gate` first (``Gate.start`` for a
start, ``Gate.session`` for the rest: ``read`` to look, ``write`` to change),
and each change that succeeds is recorded (``request_made``); an approval's
``decided_by`` is the identity's user when it names one. An entrance that
drives a target through several operations (a front end's run: status, then
a start or a resume, then answers) wraps the target once per request and
cannot skip a check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from helix_agents import RemoteAgentTransport
from helix_agents.hitl.routing import send_approval
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

from .gate import Gate
from .identity import Identity, decided_by as decider

__all__ = ["GuardedTransport"]


class GuardedTransport:
    """``target`` as ``identity`` may use it through ``gate`` (a ``RemoteAgentTransport``)."""

    def __init__(self, gate: Gate, identity: Identity, target: RemoteAgentTransport) -> None:
        self.gate = gate
        self.identity = identity
        self.target = target

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """``Gate.start``, then the target's start."""
        return await self.target.start(await self.gate.start(self.identity, request))

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """A write of the session, recorded."""
        await self.gate.session(self.identity, "write", request.session_id)
        answer = await self.target.resume(request)
        await self.gate.record(self.identity, request.session_id, "resume")
        return answer

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """A write of the session, recorded."""
        await self.gate.session(self.identity, "write", request.session_id)
        answer = await self.target.send_message(request)
        await self.gate.record(self.identity, request.session_id, "message", request.message_id)
        return answer

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """A read of the session: its stream, once the session is within reach."""
        await self.gate.session(self.identity, "read", session_id)
        async for event in self.target.stream(session_id, from_sequence):
            yield event

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """A read of the session."""
        await self.gate.session(self.identity, "read", session_id)
        return await self.target.get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """A write of the session, recorded."""
        await self.gate.session(self.identity, "write", session_id)
        await self.target.interrupt(session_id, reason)
        await self.gate.record(self.identity, session_id, "interrupt")

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """A write of the session, recorded."""
        await self.gate.session(self.identity, "write", session_id)
        await self.target.abort(session_id, reason)
        await self.gate.record(self.identity, session_id, "abort")

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """A write of the session, recorded."""
        await self.gate.session(self.identity, "write", session_id)
        answer = await self.target.submit_tool_result(session_id, tool_call_id, result, error)
        await self.gate.record(self.identity, session_id, "tool_result", tool_call_id)
        return answer

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """A write of the session, recorded; ``decided_by`` filled from the identity."""
        await self.gate.session(self.identity, "write", session_id)
        answer = await send_approval(
            self.target,
            session_id,
            tool_call_id,
            approved,
            reason,
            decider(self.identity, decided_by),
        )
        await self.gate.record(self.identity, session_id, "approval", tool_call_id)
        return answer
