"""``SessionWriter``: the run loop's single gateway to its session's log.

It keeps the folded state, stamps each batch with the next seqs, and appends
with compare-and-append. When another writer got there first (an interrupt,
an abort, a client tool result, another host), it folds their events and
tries again, so the loop always decides on the latest log. Appends from
concurrent tool calls are serialised by a lock.

Stream chunks (text deltas, forwarded child chunks) can be handed over with
:meth:`SessionWriter.emit` instead: the run goes on at once, a flusher
commits whatever has accumulated (group-commit style, so a burst shares one
commit), and the next :meth:`append` carries any still pending in the same
batch, before its own events. Order is kept; an emitted chunk is acknowledged,
like any event, only once committed.

A new session's start events can be handed over *unsaved* (``unsaved=``):
the run begins at once on the state they make, and they go into the store
in the same batch as the run's first events (the flusher's window bounds
the wait), so a fast run's start and body share one commit. The
:class:`StartCommit` tells the start when they are durable, or why they never
will be: then the writer is abandoned and its run writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import anyio
import msgspec

from helix_agents.errors import ConcurrencyConflict, OwnershipLost
from helix_agents.events import (
    Aborted,
    AbortRequested,
    ChildChunkForwarded,
    Completed,
    Event,
    EventBase,
    Failed,
    HostClaimed,
    Interrupted,
    InterruptRequested,
    RunStarted,
    SessionCreated,
)
from helix_agents.log.projections import SessionProjector
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore

__all__ = ["SessionWriter", "StartCommit", "StopRequest", "stamp"]


class StopRequest(msgspec.Struct, frozen=True):
    """An interrupt or abort found in the log."""

    kind: str  # "interrupt" | "abort"
    reason: str | None


EventsFactory = Callable[[SessionState], Sequence[Event]]
EventT = TypeVar("EventT", bound=EventBase)


def _nothing(state: SessionState) -> Sequence[Event]:
    return ()


class StartCommit:
    """Whether a run's unsaved start events are durable yet (see the module doc)."""

    __slots__ = ("_settled", "error")

    def __init__(self) -> None:
        self._settled = anyio.Event()
        self.error: BaseException | None = None

    @property
    def settled(self) -> bool:
        """Whether the outcome is known."""
        return self._settled.is_set()

    def settle(self, error: BaseException | None = None) -> None:
        """Record the outcome (the first one counts): durable, or ``error``."""
        if not self._settled.is_set():
            self.error = error
            self._settled.set()

    async def wait_settled(self) -> None:
        """Return once the outcome is known, whatever it is."""
        await self._settled.wait()

    async def wait(self) -> None:
        """Return once the start events are durable; raise why they are not."""
        await self._settled.wait()
        if self.error is not None:
            raise self.error


def stamp(
    session_id: str, after_seq: int, events: Sequence[EventT], ts: float | None = None
) -> list[EventT]:
    """``events`` with their envelopes set: the session, the seqs after ``after_seq``, one time.

    The one place an envelope is stamped: builders give only the payload
    (``EventBase``), and whoever appends stamps here just before the append.
    """
    now = time.time() if ts is None else ts
    return [
        msgspec.structs.replace(event, session_id=session_id, seq=after_seq + offset, ts=now)
        for offset, event in enumerate(events, start=1)
    ]


class SessionWriter:
    """Appends to one session's log on behalf of its run loop.

    Events are built with any ``seq`` and ``ts`` (use 0); the writer stamps
    them. ``on_stop`` is called when a folded foreign event asks the run to
    stop. ``unsaved``: how many events at the end of ``log`` (a new session's
    start) are not in the store yet; ``start`` is settled when they are.
    """

    def __init__(
        self,
        store: EventStore,
        log: Sequence[Event],
        *,
        host_id: str | None = None,
        on_stop: Callable[[StopRequest], None] | None = None,
        unsaved: int = 0,
        start: StartCommit | None = None,
    ) -> None:
        self._store = store
        self._projector = SessionProjector()
        self._projector.apply_all(log)
        # Uncontended (the usual case) it is taken without a trip round the event
        # loop: with a thousand live sessions one trip is a wait behind all of them.
        self._lock = anyio.Lock(fast_acquire=True)
        self._host_id = host_id
        self._pending: list[Event] = []
        self._pending_ready = anyio.Event()
        self._on_stop = on_stop
        self._unsaved: list[Event] = list(log[len(log) - unsaved :]) if unsaved else []
        self._start = start
        self._abandoned: str | None = None  # why this writer may write nothing more
        if self._unsaved:
            self._pending_ready.set()  # the flusher's window runs from now

    @property
    def state(self) -> SessionState:
        """The state folded from every event seen so far."""
        return self._projector.state

    @property
    def store(self) -> EventStore:
        """The store this writer appends to."""
        return self._store

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
                if self._abandoned is not None:
                    raise OwnershipLost(self._abandoned)
                state = self._projector.state
                taken = len(self._pending)
                prefix = self._unsaved
                drafts = [*self._pending[:taken], *factory(state)]
                if not drafts and not prefix:
                    return state
                base = state.last_seq
                now = time.time()
                batch = [*prefix, *stamp(state.session_id, base, drafts, now)]
                try:
                    await self._store.append(state.session_id, batch, base - len(prefix))
                except ConcurrencyConflict:
                    if prefix:
                        await self._start_conflict(prefix)
                    else:
                        await self.refresh_locked()
                    continue
                except Exception as exc:
                    if prefix:
                        self._abandon(exc)
                    raise
                # Chunks emitted while this append was in flight stay pending.
                del self._pending[:taken]
                if prefix:
                    self._unsaved = []
                    if self._start is not None:
                        self._start.settle()
                return self._projector.apply_all(batch[len(prefix) :])

    @property
    def start_saved(self) -> bool:
        """Whether the start events handed over unsaved are in the store (or there were none)."""
        return not self._unsaved

    async def start_settled(self) -> None:
        """Return once the start events handed over unsaved are durable or abandoned."""
        if self._unsaved and self._start is not None:
            await self._start.wait_settled()

    async def save_start(self) -> None:
        """Commit the unsaved start events now (with any pending chunks), if not done yet."""
        if self._unsaved and self._abandoned is None:
            await self.append_with(_nothing)

    def _abandon(self, error: BaseException) -> None:
        """The start events will never be written: stop every later append."""
        self._abandoned = f"the start of session {self.session_id!r} was not recorded: {error}"
        if self._start is not None:
            self._start.settle(error)
        raise OwnershipLost(self._abandoned) from error

    async def _start_conflict(self, prefix: list[Event]) -> None:
        """The log was not empty: our own start (an append cut short) or another's session."""
        log_ = await self._store.read(self.session_id)
        first = log_[0] if log_ else None
        mine = prefix[0]
        if (
            isinstance(first, SessionCreated)
            and isinstance(mine, SessionCreated)
            and first.run_id == mine.run_id  # run ids are unique: this start wrote it
        ):
            self._unsaved = []
            if self._start is not None:
                self._start.settle()
            await self.refresh_locked()
            return
        actual = log_[-1].seq if log_ else 0
        self._abandon(ConcurrencyConflict(self.session_id, 0, actual))

    def emit(self, *events: Event) -> None:
        """Hand stream chunks over without waiting for their commit (see the module doc)."""
        self._pending.extend(events)
        self._pending_ready.set()

    def held_child_seq(self, child_session_id: str) -> int:
        """The last seq of child ``child_session_id`` forwarded: committed or still pending."""
        ref = self.state.sub_sessions.get(child_session_id)
        held = ref.last_child_seq if ref is not None else 0  # its start may still be pending
        for event in self._pending:
            if (
                isinstance(event, ChildChunkForwarded)
                and event.child_session_id == child_session_id
            ):
                held = max(held, event.child_seq)
        return held

    async def flush_forever(self, linger: float = 0.001) -> None:
        """Commit emitted events as they come; run it in the run's task group.

        It lingers ``linger`` seconds after the first pending event, so what
        follows at once (the rest of a burst, or the append that ends a fast
        turn and carries them all) shares one commit; for a real model, whose
        tokens come tens of milliseconds apart, the delay is invisible.
        """
        while True:
            await self._pending_ready.wait()
            if linger:
                await anyio.sleep(linger)
            self._pending_ready = anyio.Event()
            if self._pending or self._unsaved:
                await self.append_with(_nothing)

    async def refresh_locked(self) -> None:
        """Fold events other writers appended since the last one seen (lock held)."""
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
        elif isinstance(event, RunStarted):  # any run started by another writer
            raise OwnershipLost(f"run {event.run_id} started on session {self.session_id!r}")
        elif isinstance(event, Completed | Failed | Aborted | Interrupted):
            raise OwnershipLost(f"session {self.session_id!r} was ended by another writer")
