"""``FaultyTransport``: wraps any transport and injects the faults of a plan (for tests).

Each call of an operation takes the next fault planned for that operation,
if any: a control call can fail (like a 5xx or a network error) or be
delayed; a stream can drop after k events (end without ``end``), deliver an
event twice, or pause before an event. Faults are data (``Fault`` structs), so
Hypothesis can generate plans and a failing plan prints readably.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable
from typing import Any, Literal

import anyio
import msgspec

from helix_agents import RemoteAgentTransport
from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError, TransportError
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

__all__ = ["Fault", "FaultyTransport", "Operation"]

Operation = Literal[
    "start", "resume", "message", "stream", "status", "interrupt", "abort", "submit"
]
"""The transport operations a fault can target."""


class Fault(msgspec.Struct, frozen=True, kw_only=True):
    """One planned fault.

    ``kind``:
    - ``fail``: the call raises (``error="server"``: an ``INTERNAL_ERROR``, like
      a 5xx; ``"network"``: a :class:`TransportError`) without reaching the
      inner transport;
    - ``delay``: wait ``seconds``, then proceed (for ``stream``: before event
      ``after``);
    - ``drop``: the stream ends after ``after`` events, without ``end``;
    - ``duplicate``: the stream delivers event ``after`` twice.
    """

    op: Operation
    kind: Literal["fail", "delay", "drop", "duplicate"]
    after: int = 0
    seconds: float = 0.0
    error: Literal["server", "network"] = "server"


class FaultyTransport:
    """A :class:`~helix_agents.RemoteAgentTransport` that injects planned faults.

    ``injected`` lists the faults that fired, in order.
    """

    def __init__(self, inner: RemoteAgentTransport, plan: Iterable[Fault] = ()) -> None:
        self.inner = inner
        self._plan: dict[str, deque[Fault]] = defaultdict(deque)
        for fault in plan:
            self._plan[fault.op].append(fault)
        self.injected: list[Fault] = []

    def _next(self, op: Operation) -> Fault | None:
        queue = self._plan.get(op)
        return queue.popleft() if queue else None

    async def _control(self, op: Operation) -> None:
        fault = self._next(op)
        if fault is None:
            return
        self.injected.append(fault)
        if fault.kind == "delay":
            await anyio.sleep(fault.seconds)
        elif fault.kind == "fail":
            if fault.error == "network":
                raise TransportError(f"injected network failure in {op}")
            raise AgentServerError("INTERNAL_ERROR", f"injected server failure in {op}")

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start, unless a fault says otherwise."""
        await self._control("start")
        return await self.inner.start(request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume, unless a fault says otherwise."""
        await self._control("resume")
        return await self.inner.resume(request)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Send a follow-up message, unless a fault says otherwise."""
        await self._control("message")
        return await self.inner.send_message(request)

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """Stream, with the next stream fault applied."""
        fault = self._next("stream")
        if fault is not None and fault.kind == "fail":
            self.injected.append(fault)
            await self._raise(fault)
        async with closing_iter(self.inner.stream(session_id, from_sequence)) as events:
            index = 0
            async for event in events:
                if fault is not None and index == fault.after:
                    if fault.kind == "drop":
                        self.injected.append(fault)
                        return
                    if fault.kind == "delay":
                        self.injected.append(fault)
                        await anyio.sleep(fault.seconds)
                    elif fault.kind == "duplicate":
                        self.injected.append(fault)
                        yield event
                yield event
                index += 1

    @staticmethod
    async def _raise(fault: Fault) -> None:
        if fault.error == "network":
            raise TransportError("injected network failure in stream")
        raise AgentServerError("INTERNAL_ERROR", "injected server failure in stream")

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """Status, unless a fault says otherwise."""
        await self._control("status")
        return await self.inner.get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt, unless a fault says otherwise."""
        await self._control("interrupt")
        await self.inner.interrupt(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Abort, unless a fault says otherwise."""
        await self._control("abort")
        await self.inner.abort(session_id, reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Submit a tool result, unless a fault says otherwise."""
        await self._control("submit")
        return await self.inner.submit_tool_result(session_id, tool_call_id, result, error)

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Submit an approval decision, unless a fault says otherwise."""
        await self._control("submit")
        return await self.inner.submit_approval(
            session_id, tool_call_id, approved, reason, decided_by=decided_by
        )
