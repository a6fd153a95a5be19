"""A session's protocol stream: its chunks from a sequence on, then ``end`` or ``error``.

Served by tailing the log, so a late or reconnecting reader misses nothing and
sees nothing twice. The stream ends when the session's current run ends
(completed, failed, aborted or interrupted) with no newer run after it; a
paused session's stream stays open, since its run goes on in the same log.

The log is read in pages of about :data:`PAGE_BYTES` (:func:`read_page`), each
when the reader has taken the one before: a reader that stops reading holds one
page, never the whole log, however long the session (``specs/http.md``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence

from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    Aborted,
    Completed,
    Event,
    Failed,
    Interrupted,
    RunStarted,
    SessionCreated,
    StateUpdated,
)
from helix_agents.log.projections import SessionProjector, project_state, stream_item
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent

__all__ = [
    "PAGE_BYTES",
    "RUN_ENDING_EVENTS",
    "EndFold",
    "EndedStream",
    "PagedStream",
    "final_event",
    "fold_session",
    "open_session_stream",
    "read_page",
    "run_from_sequence",
    "stream_session",
]

PAGE_BYTES = 16 * 1024
"""Stored bytes of events a stream reads from the log at a time (at least one event)."""

RUN_ENDING_EVENTS = (Completed, Failed, Aborted, Interrupted)
"""Events after which a run is over and its stream ends (unless a new run starts)."""
_RUN_BOUNDARIES = (RunStarted, *RUN_ENDING_EVENTS)


def final_event(events: Sequence[Event]) -> tuple[int, TransportEvent] | None:
    """The seq and ``end``/``error`` event of the log's last run, if that run has ended."""
    for event in reversed(events):
        if isinstance(event, RunStarted):
            return None
        if isinstance(event, RUN_ENDING_EVENTS):
            if isinstance(event, Interrupted):
                return event.seq, _ending(event, None)
            return event.seq, _ending(event, project_state(events))
    return None


def run_from_sequence(events: Sequence[Event]) -> int:
    """The ``fromSequence`` that reads only the log's last run (0 for a session's first run)."""
    for event in reversed(events):
        if isinstance(event, RunStarted):
            return 0 if event.mode == "start" else event.seq - 1
    return 0


def _ending(event: Event, state: SessionState | None) -> TransportEvent:
    """The ``end``/``error`` item for a run-ending ``event``, ``state`` folded up to it."""
    if isinstance(event, Interrupted):
        reason = f": {event.reason}" if event.reason else ""
        return ErrorEvent(error=f"interrupted{reason}", recoverable=True)
    assert state is not None
    if isinstance(event, Completed):
        return EndEvent(output=event.output, state=state.custom_state)
    return ErrorEvent(error=state.error or "failed", recoverable=state.recoverable)


async def read_page(
    store: EventStore, session_id: str, from_seq: int, max_bytes: int | None = None
) -> tuple[list[Event], bool]:
    """The events after ``from_seq``, about ``max_bytes`` of them, and whether more may follow.

    A store with ``read_page`` (:class:`~helix_agents.log.store.ReadsPages`:
    every store of this package) reads only that page; any other is read to
    the end at once (one page: the whole rest of the log). ``max_bytes``
    defaults to :data:`PAGE_BYTES`.
    """
    paged = getattr(store, "read_page", None)
    if paged is not None:
        size = PAGE_BYTES if max_bytes is None else max_bytes
        page: tuple[list[Event], bool] = await paged(session_id, from_seq, size)
        return page
    return await store.read(session_id, from_seq), False


async def fold_session(store: EventStore, session_id: str) -> SessionState | None:
    """The session's state, its log folded a page at a time (never held whole); None if empty.

    What a server reads of every session when it starts (recovery) needs the
    state only: a long log read whole would set the process's peak memory.
    """
    projector = SessionProjector()
    seq, more = 0, True
    while more:
        page, more = await read_page(store, session_id, seq)
        if not page:
            break
        projector.apply_all(page)
        seq = page[-1].seq
    return projector.state if seq else None


class EndFold:
    """What a run's ``end``/``error`` item needs, folded event by event from the log.

    The session's custom state (its ``session_created`` initial state, then
    each ``state_updated``) and the last run boundary (a run's start or
    end), as :class:`~helix_agents.log.projections.SessionProjector` folds
    them, without the rest of the state (the messages): a stream holds a few
    references, not the session.
    """

    __slots__ = ("boundary", "custom_state")

    def __init__(self) -> None:
        self.custom_state: dict[str, object] = {}
        self.boundary: Event | None = None

    def apply(self, event: Event) -> None:
        """Fold one more event."""
        if isinstance(event, StateUpdated):
            self.custom_state = event.state
        elif isinstance(event, _RUN_BOUNDARIES):
            self.boundary = event
        elif isinstance(event, SessionCreated):
            self.custom_state = event.initial_state

    @property
    def ended(self) -> bool:
        """Whether the last run boundary folded is a run's end."""
        return isinstance(self.boundary, RUN_ENDING_EVENTS)

    def ending(self, event: Event) -> TransportEvent:
        """The item ending the stream at ``event`` (a run's end), as :func:`final_event` says."""
        if isinstance(event, Interrupted):
            return _ending(event, None)
        if isinstance(event, Completed):
            return EndEvent(output=event.output, state=dict(self.custom_state))
        if isinstance(event, Failed):
            return ErrorEvent(error=event.error or "failed", recoverable=event.recoverable)
        assert isinstance(event, Aborted)
        reason = f"aborted: {event.reason}" if event.reason else "aborted"
        return ErrorEvent(error=reason, recoverable=False)


async def stream_session(
    store: EventStore, session_id: str, from_sequence: int = 0, *, must_exist: bool = False
) -> AsyncIterator[TransportEvent]:
    """Yield the session's chunks with sequence > ``from_sequence``, then ``end`` or ``error``.

    The log is read in pages, each when the one before has been taken (and,
    for a run that has ended, its final event follows the last page, with
    no tail at all); the tail then goes on from the end of the last page. A
    session that does not exist yet yields nothing until it is created, or
    raises ``NOT_FOUND`` with ``must_exist``. Leaving the loop stops the tail.
    """
    first = await read_page(store, session_id, 0)
    if not first[0] and must_exist:
        raise _not_found(session_id)
    async with closing_iter(PagedStream(store, session_id, from_sequence, first)) as events:
        async for event in events:
            yield event


class EndedStream:
    """A stream whose run had ended when it was opened: every item is at hand, no tail.

    An async iterator like any stream; an edge may also take :attr:`items`
    at once (``/sse`` writes them in pages). Only a log that fits in one
    page (:data:`PAGE_BYTES`) comes as one: a longer one is read page by page.
    """

    __slots__ = ("_next", "items")

    def __init__(self, items: list[TransportEvent]) -> None:
        self.items = items
        self._next = 0

    def __aiter__(self) -> EndedStream:
        return self

    async def __anext__(self) -> TransportEvent:
        if self._next >= len(self.items):
            raise StopAsyncIteration
        self._next += 1
        return self.items[self._next - 1]

    async def aclose(self) -> None:
        """Nothing to release; the stream ends here."""
        self._next = len(self.items)


async def open_session_stream(
    store: EventStore, session_id: str, from_sequence: int = 0
) -> AsyncIterator[TransportEvent]:
    """The session's stream (as :func:`stream_session`), opened: its first page is read.

    Raises ``NOT_FOUND`` now, before any event, for a session that does not
    exist: an edge can refuse the request before it answers (``/sse``'s 404).
    A session whose run has ended and whose log fits in one page comes back
    as an :class:`EndedStream`; any other is read page by page as it is taken.
    """
    first, more = await read_page(store, session_id, 0)
    if not first:
        raise _not_found(session_id)
    if not more:
        final = final_event(first)
        if final is not None:
            return EndedStream(_ended_items(first, from_sequence, final))
    return PagedStream(store, session_id, from_sequence, (first, more))


def _ended_items(
    known: list[Event], from_sequence: int, final: tuple[int, TransportEvent]
) -> list[TransportEvent]:
    """The items of a log whose last run has ended: its chunks after ``from_sequence``, its end."""
    items: list[TransportEvent] = []
    for event in known:
        if event.seq <= from_sequence:
            continue
        if event.seq > final[0]:
            break
        item = stream_item(event)
        if item is not None:
            items.append(ChunkEvent(chunk=item.chunk, sequence=item.sequence))
    items.append(final[1])
    return items


def _not_found(session_id: str) -> AgentServerError:
    return AgentServerError("NOT_FOUND", f"session {session_id!r} not found")


async def _pages_from(
    store: EventStore,
    session_id: str,
    from_sequence: int,
    first: tuple[list[Event], bool],
    tailing: Callable[[], None],
) -> AsyncGenerator[list[TransportEvent], None]:
    """The stream a page at a time, from the log's ``first`` page on (read from seq 0, and
    whether more follow): each page's items as one list, the tail's one by one.

    The log is read on in pages to its end, each page's items yielded before
    the next is read. A chunk after a run's end is
    held until a new run starts (a log ending there does not stream it, as
    :func:`final_event` says). The log's end: the stream ends if its last
    run has; else the tail goes on from there, folding what it delivers, so
    that the run's end needs no second read of the log (only a look at what
    follows the end). ``tailing()`` is called before the last page of the log
    is yielded when the tail follows it: what comes next may wait for new events.
    """
    fold = EndFold()
    held: list[TransportEvent] = []  # chunks after a run's end, until a run starts
    cursor = 0
    page, more = first
    del first
    if not page:
        tailing()
    while page:
        cursor = page[-1].seq
        items: list[TransportEvent] = []
        for event in page:
            fold.apply(event)
            item = stream_item(event)
            if item is None:
                if held and isinstance(event, RunStarted):
                    items.extend(held)
                    held.clear()
                continue
            if event.seq <= from_sequence:
                continue
            chunk = ChunkEvent(chunk=item.chunk, sequence=item.sequence)
            if fold.ended:
                held.append(chunk)
            else:
                items.append(chunk)
        page = []
        last = not more and fold.boundary is not None and fold.ended
        if last:
            assert fold.boundary is not None
            items.append(fold.ending(fold.boundary))
        elif not more:
            tailing()
        if items:
            yield items  # the next page is read once these were taken
        items = []
        if last:
            return
        if more:
            page, more = await read_page(store, session_id, cursor)
    if fold.boundary is not None and fold.ended:
        yield [fold.ending(fold.boundary)]
        return
    async with closing_iter(store.tail(session_id, cursor)) as events:
        async for event in events:
            fold.apply(event)
            if event.seq <= from_sequence:
                continue  # folded, but not the reader's: it has read past them
            item = stream_item(event)
            if item is not None:
                yield [ChunkEvent(chunk=item.chunk, sequence=item.sequence)]
            elif isinstance(event, RUN_ENDING_EVENTS) and not await _run_follows(
                store, session_id, event.seq
            ):
                yield [fold.ending(event)]
                return
            # Else a newer run, or a later end, follows: the tail delivers it.


class PagedStream:
    """A session's stream read a page at a time as it is taken (see :func:`stream_session`).

    Iterate it item by item as any stream, or take it a page's items at a
    time with :meth:`page` (``/sse`` sends pages as one body: a reader
    catching up on a long log costs a few operations per page, not per
    item). Either way, the next page is read only once the one before has
    been taken. :meth:`aclose` stops it (and its tail).
    """

    __slots__ = ("_items", "_pages", "tailing")

    def __init__(
        self,
        store: EventStore,
        session_id: str,
        from_sequence: int,
        first: tuple[list[Event], bool],
    ) -> None:
        self.tailing = False
        """True once the log has been read to its end: what follows may wait for new events."""
        self._pages = _pages_from(store, session_id, from_sequence, first, self._tail)
        self._items: deque[TransportEvent] = deque()

    def _tail(self) -> None:
        self.tailing = True

    def __aiter__(self) -> PagedStream:
        return self

    async def __anext__(self) -> TransportEvent:
        while not self._items:
            self._items.extend(await self._pages.__anext__())
        return self._items.popleft()

    async def page(self) -> list[TransportEvent] | None:
        """The next page's items (first what an item-by-item reader left); None at the end."""
        if self._items:
            left = list(self._items)
            self._items.clear()
            return left
        try:
            return await self._pages.__anext__()
        except StopAsyncIteration:
            return None

    async def aclose(self) -> None:
        """Stop the stream: its tail, if one is open, ends now."""
        self._items.clear()
        await self._pages.aclose()


async def _run_follows(store: EventStore, session_id: str, seq: int) -> bool:
    """Whether a run's start or end follows ``seq`` in the log (read a page at a time)."""
    more = True
    while more:
        page, more = await read_page(store, session_id, seq)
        if any(isinstance(event, _RUN_BOUNDARIES) for event in page):
            return True
        if not page:
            return False
        seq = page[-1].seq
    return False
