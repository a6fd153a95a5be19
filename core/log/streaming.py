"""A session's protocol stream: its chunks from a sequence on, then ``end`` or ``error``.

Served by tailing the log, so a late or reconnecting reader misses nothing and
sees nothing twice. The stream ends when the session's current run ends
(completed, failed, aborted or interrupted) with no newer run after it; a
paused session's stream stays open, since its run goes on in the same log.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError
from helix_agents.events import Aborted, Completed, Event, Failed, Interrupted, RunStarted
from helix_agents.log.projections import SessionProjector, project_state, stream_item
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent

__all__ = [
    "RUN_ENDING_EVENTS",
    "EndedStream",
    "final_event",
    "open_session_stream",
    "run_from_sequence",
    "stream_session",
]

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


async def stream_session(
    store: EventStore, session_id: str, from_sequence: int = 0, *, must_exist: bool = False
) -> AsyncIterator[TransportEvent]:
    """Yield the session's chunks with sequence > ``from_sequence``, then ``end`` or ``error``.

    One read of the log serves the items already there (and, for a run that has
    ended, its final event, with no tail at all); the tail then goes on from
    the end of that read. A session that does not exist yet yields nothing
    until it is created, or raises ``NOT_FOUND`` with ``must_exist``. Leaving
    the loop stops the tail.
    """
    known = await store.read(session_id)
    if not known and must_exist:
        raise _not_found(session_id)
    async with closing_iter(_stream_from(store, session_id, from_sequence, known)) as events:
        async for event in events:
            yield event


class EndedStream:
    """A stream whose run had ended when it was opened: every item is at hand, no tail.

    An async iterator like any stream; an edge may also take :attr:`items`
    at once (``/sse`` writes them as one body).
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
    """The session's stream (as :func:`stream_session`), opened: its one read of the log is done.

    Raises ``NOT_FOUND`` now, before any event, for a session that does not
    exist: an edge can refuse the request before it answers (``/sse``'s 404)
    without reading the log a second time. A session whose run has ended
    comes back as an :class:`EndedStream`.
    """
    known = await store.read(session_id)
    if not known:
        raise _not_found(session_id)
    final = final_event(known)
    if final is not None:
        return EndedStream(_ended_items(known, from_sequence, final))
    return _stream_from(store, session_id, from_sequence, known)


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


async def _stream_from(
    store: EventStore, session_id: str, from_sequence: int, known: list[Event]
) -> AsyncIterator[TransportEvent]:
    """The stream, given the log as one read found it (``known``)."""
    final = final_event(known)
    if final is not None:
        for ended in _ended_items(known, from_sequence, final):
            yield ended
        return
    for event in known:
        if event.seq <= from_sequence:
            continue
        item = stream_item(event)
        if item is not None:
            yield ChunkEvent(chunk=item.chunk, sequence=item.sequence)
    cursor = max(from_sequence, known[-1].seq if known else 0)
    # Fold the log as the tail delivers it, so that the run's end needs no
    # second read of the whole log (only a look at what follows the end).
    # Without the start of the log (a session created after the stream
    # opened) or with a cursor past its end, the end re-reads the log.
    projector: SessionProjector | None = None
    if known and cursor == known[-1].seq:
        projector = SessionProjector()
        projector.apply_all(known)
    known = []  # not kept while the stream is open
    async with closing_iter(store.tail(session_id, cursor)) as events:
        async for event in events:
            if projector is not None:
                projector.apply(event)
            item = stream_item(event)
            if item is not None:
                yield ChunkEvent(chunk=item.chunk, sequence=item.sequence)
            elif isinstance(event, RUN_ENDING_EVENTS):
                if projector is not None:
                    later = await store.read(session_id, event.seq)
                    if not any(isinstance(e, _RUN_BOUNDARIES) for e in later):
                        yield _ending(event, projector.state)
                        return
                    continue
                final = final_event(await store.read(session_id))
                if final is not None and final[0] == event.seq:
                    yield final[1]
                    return
                # A newer run, or a later end, follows: the tail delivers it.
