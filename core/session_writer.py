"""``SessionWriter``: the run loop's single gateway to its session's log.

It keeps the folded state, stamps each batch with the next seqs, and appends
with compare-and-append. When another writer got there first (an interrupt,
an abort, a client tool result, another host), it folds their events and
tries again, so the loop always decides on the latest log. Appends from
concurrent tool calls are serialised by a lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

import anyio
import msgspec

from .errors import ConcurrencyConflict, OwnershipLost
from .events import (
    Aborted,
    AbortRequested,
    Completed,
    Event,
    Failed,
    HostClaimed,
    Interrupted,
    InterruptRequested,
    RunStarted,
)
from .projections import SessionProjector
from .state import SessionState
from .store import EventStore

__all__ = ["SessionWriter", "StopRequest"]


class StopRequest(msgspec.Struct, frozen=True):
    """An interrupt or abort found in the log."""

    kind: str  # "interrupt" | "abort"
    reason: str | None


EventsFactory = Callable[[SessionState], Sequence[Event]]


class SessionWriter:
    """Appends to one session's log on behalf of its run loop.

    Events are built with any ``seq`` and ``ts`` (use 0); the writer stamps
    them. ``on_stop`` is called when a folded foreign event asks the run to
    stop.
    """

    def __init__(
        self,
        store: EventStore,
        log: Sequence[Event],
        *,
        run_id: str | None = None,
        host_id: str | None = None,
        on_stop: Callable[[StopRequest], None] | None = None,
    ) -> None:
        self._store = store
        self._projector = SessionProjector()
        self._projector.apply_all(log)
        self._lock = anyio.Lock()
        self._run_id = run_id
        self._host_id = host_id
        self._on_stop = on_stop

    @property
    def state(self) -> SessionState:
        """The state folded from every event seen so far."""
        return self._projector.state

    @property
    def session_id(self) -> str:
        """The session this writer appends to."""
        return self._projector.state.session_id

    @property
    def last_seq(self) -> int:
        """The seq of the last event folded."""
        return self._projector.last_seq

    async def append(self, *events: Event) -> SessionState:
        """Append ``events`` as one atomic batch; return the state after them."""
        return await self.append_with(lambda _state: events)

    async def append_with(self, factory: EventsFactory) -> SessionState:
        """Append the events ``factory(state)`` builds from the latest state.

        The factory runs under the writer's lock and again after each conflict,
        so read-modify-write updates (custom state) are atomic. An empty batch
        appends nothing.
        """
        async with self._lock:
            while True:
                state = self._projector.state
                drafts = factory(state)
                if not drafts:
                    return state
                base = state.last_seq
                now = time.time()
                batch = [
                    msgspec.structs.replace(
                        event, session_id=state.session_id, seq=base + offset, ts=now
                    )
                    for offset, event in enumerate(drafts, start=1)
                ]
                try:
                    await self._store.append(state.session_id, batch, base)
                except ConcurrencyConflict:
                    await self.refresh_locked()
                    continue
                return self._projector.apply_all(batch)

    async def refresh(self) -> SessionState:
        """Fold events other writers appended since the last one seen."""
        async with self._lock:
            await self.refresh_locked()
            return self._projector.state

    async def refresh_locked(self) -> None:
        """:meth:`refresh` for a caller already holding the lock."""
        foreign = await self._store.read(self.session_id, self.last_seq)
        for event in foreign:
            self._projector.apply(event)
            self.observe(event)

    def observe(self, event: Event) -> None:
        """React to an event another writer appended (stop requests, takeovers)."""
        if isinstance(event, InterruptRequested) and self._on_stop is not None:
            self._on_stop(StopRequest("interrupt", event.reason))
        elif isinstance(event, AbortRequested) and self._on_stop is not None:
            self._on_stop(StopRequest("abort", event.reason))
        elif isinstance(event, HostClaimed) and event.host_id != self._host_id:
            raise OwnershipLost(f"host {event.host_id!r} claimed session {self.session_id!r}")
        elif isinstance(event, RunStarted) and event.run_id != self._run_id:
            raise OwnershipLost(f"run {event.run_id} started on session {self.session_id!r}")
        elif isinstance(event, Completed | Failed | Aborted | Interrupted):
            raise OwnershipLost(f"session {self.session_id!r} was ended by another writer")
