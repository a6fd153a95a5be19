"""Pieces every store shares: batch validation and append notification for ``tail``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence

import anyio

from helix_agents.errors import UsageError
from helix_agents.events import Event
from helix_agents.ids import validate_session_id

__all__ = ["AppendNotifier", "check_batch", "tail_events"]


def check_batch(session_id: str, events: Sequence[Event], expected_seq: int) -> None:
    """Raise :class:`UsageError` unless ``events`` can be appended at ``expected_seq``."""
    validate_session_id(session_id)
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0:
        raise UsageError(f"expected_seq must be an int >= 0, not {expected_seq!r}")
    if not events:
        raise UsageError("append needs at least one event")
    for offset, event in enumerate(events, start=1):
        if event.session_id != session_id:
            raise UsageError(
                f"event {offset} of the batch belongs to session {event.session_id!r}, "
                f"not {session_id!r}"
            )
        if event.seq != expected_seq + offset:
            raise UsageError(
                f"event {offset} of the batch has seq {event.seq}; appending at "
                f"{expected_seq} it must be {expected_seq + offset}"
            )


class AppendNotifier:
    """Wakes ``tail`` readers of a session when that session's log grows.

    Only sessions with a waiter hold an entry: ``notify`` removes it.
    """

    __slots__ = ("_events",)

    def __init__(self) -> None:
        self._events: dict[str, anyio.Event] = {}

    def waiter(self, session_id: str) -> anyio.Event:
        """An event that is set at the next append to ``session_id``."""
        event = self._events.get(session_id)
        if event is None:
            event = self._events[session_id] = anyio.Event()
        return event

    def notify(self, session_ids: Iterable[str]) -> None:
        """Wake every waiter of the given sessions."""
        for session_id in session_ids:
            event = self._events.pop(session_id, None)
            if event is not None:
                event.set()

    def notify_all(self) -> None:
        """Wake every waiter (used on close)."""
        events, self._events = self._events, {}
        for event in events.values():
            event.set()


async def tail_events(
    read: Callable[[str, int], Awaitable[list[Event]]],
    notifier: AppendNotifier,
    session_id: str,
    from_seq: int,
    *,
    poll_interval: float | None,
    is_closed: Callable[[], bool],
    closed_error: Callable[[], Exception],
) -> AsyncIterator[Event]:
    """Yield a session's events after ``from_seq``, then wait for and yield new ones.

    The waiter is taken *before* each read, so an append that lands between
    the read and the wait still wakes us. ``poll_interval`` bounds each wait,
    for stores that other processes may write to.
    """
    validate_session_id(session_id)
    cursor = from_seq
    while True:
        if is_closed():
            raise closed_error()
        woken = notifier.waiter(session_id)
        batch = await read(session_id, cursor)
        if batch:
            for event in batch:
                yield event
            cursor = batch[-1].seq
            continue
        if poll_interval is None:
            await woken.wait()
        else:
            with anyio.move_on_after(poll_interval):
                await woken.wait()
