"""What an executor keeps of its live runs: per-session locks, the active runs, their spans."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractContextManager, asynccontextmanager

import anyio

from helix_agents.agents.config import AgentConfig
from helix_agents.events import Event, RunStarted, SessionCreated
from helix_agents.runtime.run_loop import SessionRun
from helix_agents.tracing import Span, Tracer, run_span

__all__ = ["ActiveRun", "SessionLocks"]


class SessionLocks:
    """One lock per key (a session id), kept only while someone holds or waits for it.

    Taking a lock nobody holds does not yield to the event loop (anyio's
    ``fast_acquire``): under load, a yield there would queue each start
    behind every other task ready to run.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock for the block (other holders wait)."""
        held = self._locks.get(session_id)
        lock, users = held if held is not None else (anyio.Lock(fast_acquire=True), 0)
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


class ActiveRun:
    """A run this executor launched: its id, where it started, its end, its ``SessionRun``."""

    __slots__ = ("done", "run", "run_id", "start_seq")

    def __init__(self, run_id: str, start_seq: int) -> None:
        self.run_id = run_id
        self.start_seq = start_seq
        self.done = anyio.Event()
        self.run: SessionRun | None = None

    def span(
        self, tracer: Tracer, agent: AgentConfig, log_: Sequence[Event]
    ) -> AbstractContextManager[Span]:
        """The run's span, under the trace context stored at the session's start."""
        first, started = log_[0], log_[-1]  # a valid log begins with session_created
        created = first if isinstance(first, SessionCreated) else None
        return run_span(
            tracer,
            agent_name=agent.name,
            session_id=first.session_id,
            run_id=self.run_id,
            mode=started.mode if isinstance(started, RunStarted) else "resume",
            parent_session_id=created.parent_session_id if created is not None else None,
            root_session_id=created.root_session_id if created is not None else None,
            model=agent.llm_config.model,
            trace_context=created.trace_context if created is not None else {},
        )
