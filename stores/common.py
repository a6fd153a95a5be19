"""Pieces every store shares: batch validation, and delivering appends to ``tail`` readers."""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence

import anyio

from helix_agents.errors import EventDecodeError, StoreError, UsageError
from helix_agents.events import Event
from helix_agents.ids import validate_session_id
from helix_agents.log.codec import decode_event, decode_events, encode_event

__all__ = [
    "AppendNotifier",
    "Probe",
    "Subscription",
    "TAIL_PAGE_BYTES",
    "check_batch",
    "page_of",
    "tail_events",
]

log = logging.getLogger("helix_agents.stores")

_MAX_BUFFERED = 1024  # past this a slow tail drops its buffer and re-reads the store
TAIL_PAGE_BYTES = 16 * 1024
"""Stored bytes of events a tail's catch-up reads at a time (at least one event)."""


def page_of(log: Sequence[Event], start: int, max_bytes: int) -> tuple[list[Event], bool]:
    """``log[start:]`` up to the event whose encoding brings it to ``max_bytes``; more follow?"""
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise UsageError(f"max_bytes must be an int >= 1, not {max_bytes!r}")
    page: list[Event] = []
    size = 0
    for index in range(start, len(log)):
        event = log[index]
        page.append(event)
        size += len(encode_event(event))
        if size >= max_bytes:
            return page, index + 1 < len(log)
    return page, False


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
    for offset, event in enumerate(events, start=1):
        if type(event.seq) is not int or type(event.session_id) is not str:
            raise UsageError(f"event {offset} of the batch has an ill-typed envelope")
        encoded.append(encode_event(event))
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
    if len(encoded) == 1:  # the common batch: a decode without the array around it
        try:
            return encoded, [decode_event(encoded[0])]
        except EventDecodeError as exc:
            raise UsageError(f"event 1 of the batch is not a valid event: {exc}") from exc
    try:
        decoded = decode_events(encoded)  # one pass for the batch; one by one only to blame
    except EventDecodeError:
        for offset, data in enumerate(encoded, start=1):
            try:
                decode_event(data)
            except EventDecodeError as exc:
                raise UsageError(
                    f"event {offset} of the batch is not a valid event: {exc}"
                ) from exc
        raise
    return encoded, decoded


class Subscription:
    """One tail's inbox: the events appended through this store since it subscribed.

    With ``kinds`` it keeps, and wakes its tail for, only events of those
    types; it still notes the seqs every delivery covered (``first``,
    ``covered``), so the tail's cursor moves past the rest without a read,
    and a delivery that does not follow the one before (``broken``) makes the
    tail re-read.
    """

    __slots__ = (
        "broken",
        "buffer",
        "covered",
        "first",
        "kinds",
        "overflowed",
        "promoted",
        "wake",
    )

    def __init__(self, kinds: tuple[type[Event], ...] | None = None) -> None:
        self.buffer: list[Event] = []
        self.overflowed = False
        self.promoted = False  # asked to take over the store's poller
        self.wake = anyio.Event()
        self.kinds = kinds
        self.first: int | None = None  # with kinds: the first seq delivered since the last take
        self.covered = 0  # with kinds: the last seq delivered since the last take
        self.broken = False  # with kinds: a delivery did not follow the one before

    @property
    def ready(self) -> bool:
        """Whether there is something to take (events, or a note to re-read the store)."""
        return bool(self.buffer) or self.overflowed or self.broken

    def deliver(self, events: Sequence[Event]) -> None:
        kinds = self.kinds
        if kinds is not None and events:
            if self.first is None:
                self.first = events[0].seq
            elif events[0].seq != self.covered + 1:
                self.broken = True
            self.covered = events[-1].seq
            events = [event for event in events if isinstance(event, kinds)]
            if not events and not self.broken:
                return  # nothing the tail wants: its cursor moves at its next take
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
        events, overflowed = self.buffer, self.overflowed or self.broken
        self.buffer, self.overflowed, self.broken = [], False, False
        self.wake = anyio.Event()
        return events, overflowed

    def take_covered(self) -> tuple[int | None, int]:
        """With ``kinds``: the seqs the deliveries since the last call covered; resets them."""
        first, covered = self.first, self.covered
        self.first, self.covered = None, 0
        return first, covered


Probe = Callable[[list[str]], Awaitable[Iterable[str]]]
"""A store's check for appends made elsewhere: given the watched sessions, those that changed."""


class AppendNotifier:
    """Hands each append made through a store to the tails of that session.

    A tail subscribes *before* its catch-up read, so nothing appended in
    between is missed; afterwards it is fed from memory and reads the store
    only to fill a gap (appends by another process, or a dropped buffer).

    Appends made elsewhere (another process) are found by **one poller per
    store**: every ``interval`` seconds ``probe`` is given the watched
    sessions and answers those that changed, and only their tails are woken
    to re-read. The poller is not a background task: one waiting tail runs
    it while it waits, and hands it to another waiting tail when it has
    events of its own to yield (or is cancelled), as the SQLite group commit
    hands over its leader.
    """

    __slots__ = ("_closed", "_idle", "_interval", "_polling", "_probe", "_subscriptions")

    def __init__(self, probe: Probe | None = None, interval: float | None = None) -> None:
        self._subscriptions: dict[str, set[Subscription]] = {}
        self._closed = False
        self._probe = probe if interval is not None else None
        self._interval = interval
        self._polling = False
        self._idle: dict[Subscription, None] = {}  # waiting tails, in arrival order

    def subscribe(
        self, session_id: str, kinds: tuple[type[Event], ...] | None = None
    ) -> Subscription:
        """Start collecting the session's appends (only events of ``kinds``, if given)."""
        subscription = Subscription(kinds)
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

    @property
    def polls(self) -> bool:
        """Whether a poller looks for appends made elsewhere."""
        return self._probe is not None

    def watched(self) -> list[str]:
        """The sessions some tail is following."""
        return list(self._subscriptions)

    def is_watched(self, session_id: str) -> bool:
        """Whether some tail is following ``session_id``."""
        return session_id in self._subscriptions

    def publish(self, session_id: str, events: Sequence[Event]) -> bool:
        """Deliver freshly appended events (empty: the log changed some other way).

        Returns whether some tail follows ``session_id`` (as ``is_watched``).
        """
        subscriptions = self._subscriptions.get(session_id)
        if subscriptions is None:
            return False
        for subscription in subscriptions:
            if events:
                subscription.deliver(events)
            else:
                subscription.overflowed = True
                subscription.wake.set()
        return True

    def ring_all(self) -> None:
        """Make every tail re-read the store (something may have been missed)."""
        for session_id in list(self._subscriptions):
            self.publish(session_id, [])

    async def wait(self, subscription: Subscription) -> None:
        """Wait until ``subscription`` holds something or the store closes.

        Meanwhile run the store's poller if no other tail does.
        """
        while not self._done_waiting(subscription):
            if subscription.promoted:
                subscription.promoted = False
            if self._probe is not None and not self._polling:
                await self._poll(subscription)
                continue
            self._idle[subscription] = None
            try:
                await subscription.wake.wait()
            except BaseException:
                self._idle.pop(subscription, None)
                if subscription.promoted:  # cancelled while being handed the poller
                    subscription.promoted = False
                    self._promote()
                raise
            self._idle.pop(subscription, None)
            if not subscription.ready:
                subscription.wake = anyio.Event()  # woken only to take over the poller
        if subscription.promoted:  # it has events to yield: pass the poller on
            subscription.promoted = False
            self._promote()

    def _done_waiting(self, subscription: Subscription) -> bool:
        return subscription.ready or self._closed

    async def _poll(self, subscription: Subscription) -> None:
        probe, interval = self._probe, self._interval
        assert probe is not None
        assert interval is not None
        self._polling = True
        try:
            while not self._done_waiting(subscription):
                with anyio.move_on_after(interval):
                    await subscription.wake.wait()
                if self._done_waiting(subscription):
                    break
                subscription.wake = anyio.Event()
                try:
                    changed = await probe(self.watched())
                except StoreError as exc:
                    if self._done_waiting(subscription):
                        break
                    log.warning("store poll failed (tails re-read): %s", exc)
                    self.ring_all()
                    continue
                for session_id in changed:
                    self.publish(session_id, [])
        finally:
            self._polling = False
            self._promote()

    def _promote(self) -> None:
        """Hand the poller to a waiting tail (the next one to wait takes it otherwise)."""
        if self._polling or self._probe is None:
            return
        for candidate in self._idle:
            if not candidate.ready:
                candidate.promoted = True
                candidate.wake.set()
                return

    def close(self) -> None:
        """Wake every tail (the store is closing)."""
        self._closed = True
        for subscribers in self._subscriptions.values():
            for subscription in subscribers:
                subscription.wake.set()


async def tail_events(
    read: Callable[[str, int, int], Awaitable[tuple[list[Event], bool]]],
    notifier: AppendNotifier,
    session_id: str,
    from_seq: int,
    *,
    is_closed: Callable[[], bool],
    closed_error: Callable[[], Exception],
    ends_at: Callable[[str, int], bool] | None = None,
    kinds: tuple[type[Event], ...] | None = None,
) -> AsyncGenerator[Event, None]:
    """Yield a session's events after ``from_seq``, then each new one, exactly once, in order.

    ``read(session, seq, max_bytes)`` reads a page of the log (a store's
    ``read_page``): a catch-up (the first, or one after a gap) reads page
    after page, each once the one before has been taken, until the log's
    end; a tail whose reader stops holds a page, never the rest of the log.

    Appends through the same store arrive from memory; the store's poller
    (see :class:`AppendNotifier`) rings the tail when it finds appends made
    elsewhere, and the tail then re-reads from its cursor. ``ends_at(session,
    seq)``, when given, tells whether the store knows, once the tail has
    subscribed, that the log ends at ``seq`` as far as this process has
    seen: the catch-up read is then skipped (appends made elsewhere reach
    the tail through the poller, which always reports a session the first
    time it watches it). With ``kinds``, only events of those types are
    yielded, and appends of nothing else do not wake the tail at all.
    """
    validate_session_id(session_id)
    cursor = from_seq
    subscription = notifier.subscribe(session_id, kinds)
    try:
        need_read = ends_at is None or not ends_at(session_id, cursor)
        while True:
            if is_closed():
                raise closed_error()
            if need_read:
                batch, more = await read(session_id, cursor, TAIL_PAGE_BYTES)
                need_read = more and bool(batch)  # read on until the log's end
                end = batch[-1].seq if batch else cursor
            else:
                await notifier.wait(subscription)
                if is_closed():
                    raise closed_error()
                batch, overflowed = subscription.take()
                batch = [event for event in batch if event.seq > cursor]
                if kinds is None:
                    if overflowed or (batch and batch[0].seq != cursor + 1):
                        need_read = True  # a gap: fill it from the store
                        continue
                    end = batch[-1].seq if batch else cursor
                else:
                    first, covered = subscription.take_covered()
                    if overflowed or (first is not None and first > cursor + 1):
                        need_read = True  # a gap: fill it from the store
                        continue
                    end = max(cursor, covered)
            for event in batch:
                if kinds is None or isinstance(event, kinds):
                    yield event
            cursor = max(cursor, end)
    finally:
        notifier.unsubscribe(session_id, subscription)
