"""The JetStream store's watch: one consumer for the whole store, ringing the tails.

A ``tail`` is fed this store's appends through the store's
:class:`AppendNotifier`; the store's one ordered, headers-only JetStream
consumer (created before a tail's catch-up read, shared by every tail, kept
:data:`WATCH_LINGER` seconds after the last leaves) rings it when another
process appends. The notifier's poller probes the consumer: gone, stuck, or
having delivered more than reached this process (a delivery lost on the way,
which nats-py cannot see before the consumer's first delivery arrives), and
every :data:`SWEEP_EVERY`-th poll (a last resort) re-reads every watched
session. What the consumer has reported lets a tail skip its catch-up read
(:meth:`StoreWatch.ends_at`).

asyncio lives here only because nats-py is asyncio-only.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import nats.errors
from nats.aio.msg import Msg
from nats.js import api as js_api
from nats.js.client import JetStreamContext

from helix_agents.errors import StoreClosedError
from helix_agents.ids import decode_session_token
from helix_agents.stores.common import AppendNotifier

from .wire import Position, StreamAccess

__all__ = ["SWEEP_EVERY", "WATCH_LINGER", "StoreWatch"]

WATCH_LINGER = 2.0
"""Seconds the store's consumer outlives its last tail (a new tail meanwhile reuses it)."""
SWEEP_EVERY = 12
"""Every this many polls, the poller re-reads every watched session whatever the consumer says.

A last resort against a loss no probe sees (none is known): with the default
poll interval, one read per watched session a minute.
"""
_REPORTED_SESSIONS = 16384  # sessions whose last reported stream seq a store remembers


class StoreWatch:
    """The store's one consumer, its tails' notifier, and which rings are the store's own."""

    def __init__(
        self,
        access: StreamAccess,
        positions: dict[str, Position],
        *,
        poll_interval: float | None,
        is_closed: Callable[[], bool],
    ) -> None:
        """Watch ``access``'s stream; ``positions`` are the store's last sights of its logs."""
        self._access = access
        self._nc = access.nc
        self._positions = positions
        self._is_closed = is_closed
        self.notifier = AppendNotifier(self.probe, poll_interval)
        """Wakes the tails: this store's appends, and the consumer's rings."""
        # session -> highest stream seq this store appended (its tails already know).
        self._own: dict[str, int] = {}
        # session -> appends of this store under way; while any is, the stream seqs the
        # consumer reports for it wait here (one may be ours, acknowledged later).
        self._appending: dict[str, int] = {}
        self._held_rings: dict[str, list[int]] = {}
        # One consumer for the whole store rings the tails of whichever session changed.
        self.consumer: JetStreamContext.PushSubscription | None = None
        self._refs = 0
        self._lock = anyio.Lock(fast_acquire=True)
        self._linger: asyncio.TimerHandle | None = None  # the unused consumer's deletion, due
        self._chores: set[asyncio.Task[None]] = set()  # the consumer's deletion, its coverage
        self._last_pending: tuple[int, int] = (0, 0)  # the consumer's (pending, delivered)
        # What the consumer has reported, so a tail can skip its catch-up read: every
        # stream message from ``covered_from`` on is (or will be) reported, unless the
        # connection reconnected since (``_covered_reconnects``) or a probe found the
        # consumer stuck or gone (``covered_from`` None: no skipping until a new one).
        self.covered_from: int | None = None
        self._covered_reconnects = 0
        self.reported: dict[str, int] = {}  # session -> highest stream seq reported
        self._forgotten = 0  # highest stream seq of a report evicted from reported
        self._probes = 0  # polls so far: every sweep_every-th re-reads every watched session
        self.sweep_every: int | None = SWEEP_EVERY
        """Polls between sweeps (``None``: no sweep; tests turn it off to see losses)."""
        # Deliveries that reached this process: consumer name -> highest consumer seq.
        self._received: dict[str, int] = {}
        # What the last probe heard the consumer had delivered: (name, consumer seq).
        self._last_delivered: tuple[str, int] = ("", 0)

    # --- this store's appends -------------------------------------------------------

    def append_began(self, session_id: str) -> None:
        """An append here began: the consumer's rings for the session wait for its end."""
        self._appending[session_id] = self._appending.get(session_id, 0) + 1

    def append_landed(self, session_id: str, stream_seq: int) -> None:
        """This store stored the session's message at ``stream_seq`` (its tails know)."""
        self._own[session_id] = max(self._own.get(session_id, 0), stream_seq)

    def append_ended(self, session_id: str) -> None:
        """An append here ended: ring for what the consumer reported meanwhile, unless ours."""
        left = self._appending[session_id] - 1
        if left:
            self._appending[session_id] = left
            return
        del self._appending[session_id]
        held = self._held_rings.pop(session_id, [])
        if any(stream_seq > self._own.get(session_id, 0) for stream_seq in held):
            self.notifier.publish(session_id, [])

    # --- the consumer -----------------------------------------------------------------

    def ends_at(self, session_id: str, seq: int) -> bool:
        """Whether the log surely ends at ``seq``, as far as a tail subscribed now can tell.

        True when this store's last sight of the session (its own append, or a
        read) ended at helix seq ``seq``, at stream seq P, and its consumer
        covers every stream message after P (it started at or before P + 1,
        without a reconnect or a failed probe since) and has reported none of
        the session's beyond P: whatever follows P will ring the tail, so its
        catch-up read would find nothing.
        """
        position = self._positions.get(session_id)
        covered = self.covered_from
        if position is None or position[1] != seq or covered is None or self.consumer is None:
            return False
        stream_seq = position[0]
        if covered > stream_seq + 1 or self._nc.stats["reconnects"] != self._covered_reconnects:
            return False
        reported = self.reported.get(session_id)
        if reported is None:
            return stream_seq >= self._forgotten
        return reported <= stream_seq

    async def acquire(self) -> None:
        """Start (or share) the store's consumer: headers only, every session's subject."""
        async with self._lock:
            if self._linger is not None:
                self._linger.cancel()  # a tail again: the lingering consumer serves it
                self._linger = None
            if self.consumer is None:
                if self._is_closed():
                    raise StoreClosedError()
                prefix = f"{self._access.subject_prefix}."

                async def ring(msg: Msg) -> None:
                    self.on_stored(msg, prefix)

                # Not cancelled half-way: a consumer the server made must be ours to
                # delete (a run ending while its watcher subscribed left one behind).
                with self._access.translate(), anyio.CancelScope(shield=True):
                    self.consumer = await self._access.js.subscribe(
                        f"{prefix}*",
                        stream=self._access.stream,
                        cb=ring,
                        ordered_consumer=True,
                        deliver_policy=js_api.DeliverPolicy.NEW,
                        headers_only=True,
                        # Deleted when unused (below); this bounds one left behind by a
                        # process that died, or by an ordered consumer's reset.
                        inactive_threshold=5.0,
                    )
                consumer = self.consumer
                assert consumer is not None  # (a shielded scope could, to a type checker, skip it)
                self._last_pending = (0, 0)
                self._received.clear()
                self._last_delivered = ("", 0)
                self._chore(self._cover(consumer))
            self._refs += 1

    async def _cover(self, consumer: JetStreamContext.PushSubscription) -> None:
        """Note from where the new consumer reports every message (best effort)."""
        reconnects = self._nc.stats["reconnects"]
        try:
            info = await consumer.consumer_info()
        except (nats.errors.Error, OSError):
            return  # unknown: tails read, as ever
        # A new consumer's delivered stream seq is the stream's last at its creation
        # (or later, if it delivered since: then this is later than need be).
        delivered = int(info.delivered.stream_seq or 0) if info.delivered else 0
        if consumer is self.consumer:
            self.covered_from = delivered + 1
            self._covered_reconnects = reconnects

    async def release(self) -> None:
        """A tail is done with the consumer; the last one leaves it lingering, then deleted."""
        async with self._lock:
            self._refs -= 1
            if self._refs > 0 or self.consumer is None:
                return
            if self._is_closed():
                await self._drop()
                return
            # Kept a moment for the next tail (tails come and go in bursts), then deleted.
            loop = asyncio.get_running_loop()
            self._linger = loop.call_later(WATCH_LINGER, self._linger_over)

    def _linger_over(self) -> None:
        self._linger = None
        self._chore(self._drop_if_unused())

    def _chore(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` in the background (no tail waits for it, none can cancel it)."""
        task = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)

    async def _drop_if_unused(self) -> None:
        async with self._lock:
            if self._refs == 0 and self._linger is None:
                await self._drop()

    async def _drop(self) -> None:
        """Unsubscribe the store's consumer and delete it on the server (never left to lapse)."""
        consumer, self.consumer = self.consumer, None
        self.covered_from = None  # (a late _cover of it sees it is no longer the one)
        if consumer is None:
            return
        name = getattr(consumer, "_consumer", None)  # the current one (an ordered consumer's reset)
        with contextlib.suppress(nats.errors.Error, OSError):
            await consumer.unsubscribe()
            if name:
                await self._access.jsm.delete_consumer(self._access.stream, name)

    async def close(self) -> None:
        """Delete the consumer unless a tail still holds it; drop the chores left."""
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        with anyio.move_on_after(self._access.timeout, shield=True):
            async with self._lock:
                if self._refs == 0:
                    await self._drop()
        for chore in list(self._chores):
            chore.cancel()  # a coverage check left (the consumer is gone)

    # --- rings and the poller ---------------------------------------------------------

    def on_stored(self, msg: Msg, prefix: str) -> None:
        """A message was stored: wake the session's tails unless the message is ours."""
        stream_seq: int | None
        try:
            metadata = msg.metadata
            stream_seq = metadata.sequence.stream
            self._note_received(metadata.consumer, metadata.sequence.consumer)
        except Exception:  # not a JetStream delivery we can parse: just ring
            stream_seq = None
        if not msg.subject.startswith(prefix):
            return
        try:
            session_id = decode_session_token(msg.subject[len(prefix) :])
        except ValueError:
            return  # not a subject we wrote
        if stream_seq is None:
            self.covered_from = None  # and skip no catch-up read from now on
        else:
            self._report(session_id, stream_seq)
        if not self.notifier.is_watched(session_id):
            return
        # Our own appends reached the tails through the notifier already, and
        # so did every message before them on the subject (a tail that missed
        # one sees a gap in our batch and re-reads). The consumer may report one
        # of ours before its acknowledgement: while an append here is under way,
        # the ring waits for it to end (``append_ended``).
        if stream_seq is not None and session_id in self._appending:
            self._held_rings.setdefault(session_id, []).append(stream_seq)
        elif stream_seq is None or stream_seq > self._own.get(session_id, 0):
            self.notifier.publish(session_id, [])

    def _report(self, session_id: str, stream_seq: int) -> None:
        """Remember the session's highest stream seq the consumer reported (bounded)."""
        reported = self.reported
        if stream_seq > reported.get(session_id, 0):
            reported[session_id] = stream_seq
            if len(reported) > _REPORTED_SESSIONS:
                oldest = next(iter(reported))
                self._forgotten = max(self._forgotten, reported.pop(oldest))

    def _note_received(self, consumer: str, consumer_seq: int) -> None:
        """A delivery of ``consumer`` reached this process (kept for its last few consumers)."""
        if consumer_seq > self._received.get(consumer, 0):
            self._received[consumer] = consumer_seq
            if len(self._received) > 8:  # nats-py re-created it since: forget the oldest
                del self._received[next(iter(self._received))]

    async def probe(self, sessions: list[str]) -> list[str]:
        """The poller's safety net: every watched session if a ring may have been lost.

        One request per poll, however many sessions are watched: the
        consumer's info. A ring may have been lost when the consumer is gone
        or unreachable; stuck (messages were pending at the last probe and
        nothing was delivered since); or when it had delivered, at the last
        probe, a consumer seq that has still not reached this process: a
        delivery lost on the way (the connection broke under it, as when the
        client's NATS node dies). nats-py's ordered consumer finds such a
        loss only from a later delivery, or from an idle heartbeat once it
        has received one delivery of the consumer: the loss of a new (or
        re-created) consumer's first deliveries followed by quiet would
        otherwise ring nothing for ever. Every :attr:`sweep_every`-th poll
        re-reads them all anyway (the last resort, one request each).
        """
        consumer = self.consumer
        if consumer is None or not sessions or self._is_closed():
            return []
        self._probes += 1
        if self.sweep_every and self._probes % self.sweep_every == 0:
            return sessions
        try:
            info = await consumer.consumer_info()
        except (nats.errors.Error, OSError):
            self._last_pending = (0, 0)
            self._last_delivered = ("", 0)
            self.covered_from = None  # it may have missed messages: tails read from now on
            return sessions  # gone (nats-py recreates it) or unreachable: re-read
        pending = int(info.num_pending or 0)
        delivered = int(info.delivered.stream_seq or 0) if info.delivered else 0
        stuck = self._last_pending[0] > 0 and delivered == self._last_pending[1]
        self._last_pending = (pending, delivered)
        # Lost on the way: what the consumer had delivered at the last probe (a poll
        # ago: long enough to arrive) has still not reached this process.
        name, was_delivered = self._last_delivered
        lost = name == info.name and self._received.get(name, 0) < was_delivered
        consumer_seq = int(info.delivered.consumer_seq or 0) if info.delivered else 0
        self._last_delivered = (info.name, consumer_seq)
        if lost:
            # Rung once: what the tails miss, they read now; the consumer's next
            # delivery shows nats-py the gap, and it re-creates the consumer.
            self._received[name] = max(self._received.get(name, 0), was_delivered)
        if stuck or lost:
            self.covered_from = None
        return sessions if stuck or lost else []
