"""Pieces every store shares: batch validation, and delivering appends to ``tail`` readers."""

from __future__ import annotations

from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence

import anyio

from helix_agents.codec import decode_event, encode_event
from helix_agents.errors import EventDecodeError, UsageError
from helix_agents.events import Event
from helix_agents.ids import validate_session_id

__all__ = ["AppendNotifier", "Subscription", "check_batch", "tail_events"]

_MAX_BUFFERED = 1024  # past this a slow tail drops its buffer and re-reads the store


def check_batch(
    session_id: str, events: Sequence[Event], expected_seq: int
) -> tuple[list[bytes], list[Event]]:
    """Raise :class:`UsageError` unless ``events`` can be appended at ``expected_seq``.

    Every event must survive its own encoding: msgspec does not check field
    types when a struct is built, and a store must never accept an event it
    could not read back (``seq=2.0``, ``ts=None``...). Returns the encodings
    and the decoded copies: stores keep and publish the copies, so a live tail
    sees exactly what a later read returns (``(1, 2)`` becomes ``[1, 2]``).
    """
    validate_session_id(session_id)
    if isinstance(expected_seq, bool) or not isinstance(expected_seq, int) or expected_seq < 0:
        raise UsageError(f"expected_seq must be an int >= 0, not {expected_seq!r}")
    if not events:
        raise UsageError("append needs at least one event")
    encoded: list[bytes] = []
    decoded: list[Event] = []
    for offset, event in enumerate(events, start=1):
        if type(event.seq) is not int or type(event.session_id) is not str:
            raise UsageError(f"event {offset} of the batch has an ill-typed envelope")
        data = encode_event(event)
        try:
            decoded.append(decode_event(data))
        except EventDecodeError as exc:
            raise UsageError(f"event {offset} of the batch is not a valid event: {exc}") from exc
        encoded.append(data)
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
    return encoded, decoded


class Subscription:
    """One tail's inbox: the events appended through this store since it subscribed."""

    __slots__ = ("buffer", "overflowed", "wake")

    def __init__(self) -> None:
        self.buffer: list[Event] = []
        self.overflowed = False
        self.wake = anyio.Event()

    def deliver(self, events: Sequence[Event]) -> None:
        if self.overflowed:
            pass
        elif len(self.buffer) + len(events) > _MAX_BUFFERED:
            self.buffer.clear()
            self.overflowed = True
        else:
            self.buffer.extend(events)
        self.wake.set()

    def take(self) -> tuple[list[Event], bool]:
        """The buffered events and whether some were dropped; resets the inbox."""
        events, overflowed = self.buffer, self.overflowed
        self.buffer, self.overflowed = [], False
        self.wake = anyio.Event()
        return events, overflowed


class AppendNotifier:
    """Hands each append made through a store to the tails of that session.

    A tail subscribes *before* its catch-up read, so nothing appended in
    between is missed; afterwards it is fed from memory and reads the store
    only to fill a gap (appends by another process, or a dropped buffer).
    """

    __slots__ = ("_closed", "_subscriptions")

    def __init__(self) -> None:
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._closed = False

    def subscribe(self, session_id: str) -> Subscription:
        """Start collecting the session's appends."""
        subscription = Subscription()
        self._subscriptions.setdefault(session_id, set()).add(subscription)
        if self._closed:
            subscription.wake.set()
        return subscription

    def unsubscribe(self, session_id: str, subscription: Subscription) -> None:
        """Stop collecting (a tail ended)."""
        subscribers = self._subscriptions.get(session_id)
        if subscribers is not None:
            subscribers.discard(subscription)
            if not subscribers:
                del self._subscriptions[session_id]

    def publish(self, session_id: str, events: Sequence[Event]) -> None:
        """Deliver freshly appended events (empty: the log changed some other way)."""
        for subscription in self._subscriptions.get(session_id, ()):
            if events:
                subscription.deliver(events)
            else:
                subscription.overflowed = True
                subscription.wake.set()

    def close(self) -> None:
        """Wake every tail (the store is closing)."""
        self._closed = True
        for subscribers in self._subscriptions.values():
            for subscription in subscribers:
                subscription.wake.set()


async def tail_events(
    read: Callable[[str, int], Awaitable[list[Event]]],
    notifier: AppendNotifier,
    session_id: str,
    from_seq: int,
    *,
    poll_interval: float | None,
    is_closed: Callable[[], bool],
    closed_error: Callable[[], Exception],
) -> AsyncGenerator[Event, None]:
    """Yield a session's events after ``from_seq``, then each new one, exactly once, in order.

    ``poll_interval`` bounds each wait, after which the store is re-read, for
    stores that other processes may write to.
    """
    validate_session_id(session_id)
    cursor = from_seq
    subscription = notifier.subscribe(session_id)
    try:
        need_read = True
        while True:
            if is_closed():
                raise closed_error()
            if need_read:
                need_read = False
                batch = await read(session_id, cursor)
            else:
                if not subscription.buffer and not subscription.overflowed:
                    if poll_interval is None:
                        await subscription.wake.wait()
                    else:
                        with anyio.move_on_after(poll_interval) as waited:
                            await subscription.wake.wait()
                        if waited.cancelled_caught:
                            need_read = True  # maybe another process appended
                            continue
                    if is_closed():
                        raise closed_error()
                batch, overflowed = subscription.take()
                batch = [event for event in batch if event.seq > cursor]
                if overflowed or (batch and batch[0].seq != cursor + 1):
                    need_read = True  # a gap: fill it from the store
                    continue
            for event in batch:
                yield event
            if batch:
                cursor = batch[-1].seq
    finally:
        notifier.unsubscribe(session_id, subscription)
