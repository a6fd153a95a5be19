"""``JetStreamEventStore``: session logs in one NATS JetStream stream, a subject per session.

Layout: stream ``<stream>`` (default ``HELIX_EVENTS``) captures ``helix.<stream>.*``;
session ``s`` is the subject ``helix.<stream>.<encode_session_token(s)>``. Each
``append`` is **one message**: the JSON array of the batch's events, with headers
``Helix-First-Seq`` / ``Helix-Last-Seq`` (the batch's helix seqs), so a batch is
atomic and helix seqs are not stream seqs.

The store is composed of: the wire format and plain stream requests
(``wire.py``: names, headers, decoding, :class:`StreamAccess`), the
append path (``append.py``: compare-and-append publishes, batches over
the message limit, NATS outages waited out), reads (``reads.py``:
where a read starts, batched direct gets, remembered batch ends), and the
store-wide watch (``watch.py``: the one consumer ringing the tails,
its poller probe and sweeps), plus the session search index
(``index.py``, made at the first search). This class holds them
together and owns the sessions' last known positions, which they share, and
the lifecycle. Batched gets and appends answer to one long-lived inbox of the
store.

asyncio lives here only because nats-py is asyncio-only; nats-py errors never
leave these modules (they become :class:`StoreError`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator, Sequence

import anyio
import nats
import nats.errors
from nats.aio.client import Client as NatsClient

from helix_agents.errors import (
    DamagedLogError,
    StoreClosedError,
    StoreError,
    StoreUnavailableError,
    UsageError,
)
from helix_agents.events import Event
from helix_agents.ids import decode_session_token, validate_session_id
from helix_agents.log.search import IndexedSession, SessionQuery
from helix_agents.stores.common import check_batch, tail_events

from .append import DEFAULT_OUTAGE_WAIT, JetStreamAppender
from .inbox import NatsInbox
from .index import JetStreamSessionIndex
from .memory import JetStreamMemoryStore
from .reads import BatchMarks, LogReader
from .watch import SWEEP_EVERY as SWEEP_EVERY, WATCH_LINGER as WATCH_LINGER, StoreWatch
from .wire import (
    DEFAULT_STREAM,
    LostConnection,
    Position,
    StreamAccess,
    Suspect,
    helix_seqs,
    nats_servers,
    validate_stream_name,
)

__all__ = [
    "DEFAULT_OUTAGE_WAIT",
    "DEFAULT_STREAM",
    "JetStreamEventStore",
    "nats_servers",
]

_READ_ROUNDS = 5  # reads restarted because the log was deleted and rebuilt under them
_HEAD_GETS = 32  # last-message gets a session_heads call keeps in flight


class JetStreamEventStore:
    """An :class:`~helix_agents.EventStore` on NATS JetStream; open it with :meth:`connect`.

    Several store objects, in any number of processes, may share one stream:
    compare-and-append is decided by the server. Appends are durable once
    JetStream acknowledged them (its own storage and replication settings
    decide what that means: file storage, ``replicas`` copies).
    """

    def __init__(
        self,
        nc: NatsClient,
        *,
        stream: str,
        timeout: float,
        publish_attempts: int,
        poll_interval: float | None,
        outage_wait: float = DEFAULT_OUTAGE_WAIT,
        lost: LostConnection | None = None,
    ) -> None:
        """Use :meth:`connect`; this takes an already connected client and a ready stream.

        ``lost``: told by the client's callbacks when its connection is lost and back.
        """
        self._nc = nc
        self.stream = stream
        self.subject_prefix = f"helix.{stream}"
        self._timeout = timeout
        self._closed = False
        self._active = 0
        self._idle: anyio.Event | None = None
        self._access = StreamAccess(nc, stream, timeout, lambda: self._closed)
        # session -> (stream seq, helix seq, chain) of its last message, as last seen
        # (by an append, a read, or the append path asking the server).
        self._positions: dict[str, Position] = {}
        # Appends and batched gets answer to one long-lived inbox.
        self._inbox = NatsInbox(nc, timeout)
        marks = BatchMarks()
        self._marks = marks
        self._watch = StoreWatch(
            self._access,
            self._positions,
            poll_interval=poll_interval,
            is_closed=lambda: self._closed,
        )
        self._notifier = self._watch.notifier
        self._reader = LogReader(self._access, self._inbox, self._positions, marks)
        self._appender = JetStreamAppender(
            self._access,
            self._inbox,
            self._positions,
            marks,
            landed=self._watch.append_landed,
            publish_attempts=publish_attempts,
            outage_wait=outage_wait,
        )
        # session_heads: each session's (message count, last seq) when last looked at.
        self._heads: dict[str, tuple[int, int]] = {}
        self._lost = lost if lost is not None else LostConnection()
        self._outage_wall: tuple[float, float] | None = None  # (its monotonic start, epoch)

    @property
    def connection(self) -> NatsClient:
        """The store's nats-py client: a process may send its other requests on it too.

        They then share the store's writes to the server. It is the store's:
        closing the store closes it.
        """
        return self._nc

    @property
    def outage_wait(self) -> float:
        """Seconds an append waits for a lost connection to NATS to come back."""
        return self._appender.outage_wait

    @outage_wait.setter
    def outage_wait(self, seconds: float) -> None:
        self._appender.outage_wait = seconds

    @property
    def outage(self) -> float | None:
        """Seconds NATS has been out of reach; None while it is reachable.

        From the moment the connection was lost (until it is back), or since
        appends began to wait for it, whichever is longer.
        """
        began = self._outage_began()
        return None if began is None else anyio.current_time() - began

    @property
    def outage_since(self) -> float | None:
        """When this outage began, in seconds since the epoch; None while NATS is reachable.

        The same value for the whole outage (however often it is asked).
        """
        began = self._outage_began()
        if began is None:
            return None
        if self._outage_wall is None or self._outage_wall[0] != began:
            self._outage_wall = (began, time.time() - (anyio.current_time() - began))
        return self._outage_wall[1]

    def _outage_began(self) -> float | None:
        known = [t for t in (self._lost.since, self._appender.outage_began) if t is not None]
        return min(known) if known else None

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<JetStreamEventStore stream={self.stream!r}{state}>"

    @classmethod
    async def connect(
        cls,
        url: str = "nats://127.0.0.1:4222",
        *,
        stream: str = DEFAULT_STREAM,
        replicas: int = 1,
        request_timeout: float = 5.0,
        publish_attempts: int = 3,
        poll_interval: float | None = 5.0,
        outage_wait: float = DEFAULT_OUTAGE_WAIT,
    ) -> JetStreamEventStore:
        """Connect to NATS, create the stream if missing, and return an open store.

        Args:
            url: the NATS server (``nats://host:port``), or several servers of one
                cluster separated by commas (``nats://a:4222,nats://b:4222``): the
                client connects to one and fails over to the others.
            stream: the JetStream stream; it captures ``helix.<stream>.*``.
            replicas: copies JetStream keeps of each message (used when creating the stream).
            request_timeout: seconds each request to the server may take.
            publish_attempts: how often an unacknowledged append is re-sent (same
                ``Nats-Msg-Id``) before it fails with an unknown outcome.
            poll_interval: how often the store's poller checks that its one
                consumer still delivers (one request, however many tails);
                when it does not, every tail re-reads (``None``: never).
            outage_wait: seconds an append waits, re-sending with bounded backoff,
                while the connection to NATS is lost (a server restarting, a
                network cut): an outage is not a verdict on the run. Unanswered
                sends while disconnected do not count against ``publish_attempts``.

        Raises:
            UsageError: a bad stream name or replica count.
            StoreError: the server is unreachable, or the stream cannot be created
                (for instance another stream already captures its subjects).
        """
        validate_stream_name(stream)
        if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= 5:
            raise UsageError(f"replicas must be an int from 1 to 5, not {replicas!r}")
        if publish_attempts < 1:
            raise UsageError("publish_attempts must be at least 1")
        if isinstance(outage_wait, bool) or not (
            isinstance(outage_wait, int | float) and 0 <= outage_wait < float("inf")
        ):
            raise UsageError(f"outage_wait must be a finite number >= 0, not {outage_wait!r}")
        servers = nats_servers(url)

        async def quiet(exc: Exception) -> None:
            pass  # nats-py would log every disconnect; failures surface as StoreError

        nc: NatsClient | None = None
        lost = LostConnection()
        try:
            # nats-py retries a refused first connection for ever (we want it to
            # keep reconnecting later), so the first one is bounded here.
            with anyio.move_on_after(request_timeout):
                nc = await nats.connect(
                    servers=servers,
                    connect_timeout=request_timeout,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    error_cb=quiet,
                    disconnected_cb=lost.disconnected,
                    reconnected_cb=lost.reconnected,
                )
        except (nats.errors.Error, OSError) as exc:
            raise StoreUnavailableError(f"cannot connect to NATS at {url!r}: {exc}") from exc
        if nc is None:
            raise StoreUnavailableError(
                f"cannot connect to NATS at {url!r} within {request_timeout} s"
            )
        store = cls(
            nc,
            stream=stream,
            timeout=request_timeout,
            publish_attempts=publish_attempts,
            poll_interval=poll_interval,
            outage_wait=outage_wait,
            lost=lost,
        )
        store._replicas = replicas  # the memory bucket's, when it is made
        try:
            with store._translate():
                direct, replicated = await store._access.ensure_stream(replicas)
            store._reader.direct, store._reader.replicated = direct, replicated
        except BaseException:
            with anyio.move_on_after(request_timeout, shield=True):
                await nc.close()
            raise
        return store

    # --- helpers ----------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    def _translate(self) -> contextlib.AbstractContextManager[None]:
        """Turn nats-py errors into ours (StoreClosedError once the store is closing)."""
        return self._access.translate()

    # --- writes -----------------------------------------------------------------------

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """Append ``events`` if the log ends at ``expected_seq`` (see ``EventStore.append``).

        Raises :class:`StoreError` when no acknowledgement came after
        ``publish_attempts`` sends: the batch may or may not have landed (read
        the log to know), exactly as after a cancelled append.
        """
        self._ensure_open()
        encoded, decoded = check_batch(session_id, events, expected_seq)
        self._active += 1
        self._watch.append_began(session_id)
        try:
            with self._translate():
                last = await self._appender.append(session_id, encoded, expected_seq)
        finally:
            self._active -= 1
            if self._active == 0 and self._idle is not None:
                self._idle.set()
            self._watch.append_ended(session_id)
        self._notifier.publish(session_id, decoded)
        return last

    async def delete(self, session_id: str) -> bool:
        """Delete a session's log (purge its subject); return whether it existed."""
        self._ensure_open()
        validate_session_id(session_id)
        with self._translate():
            response = await self._access.api(
                f"STREAM.PURGE.{self.stream}", {"filter": self._access.subject(session_id)}
            )
        self._positions.pop(session_id, None)
        self._marks.forget(session_id)
        self._heads.pop(session_id, None)
        existed = int(response.get("purged", 0)) > 0
        if existed:
            self._notifier.publish(session_id, [])
        return existed

    # --- reads ------------------------------------------------------------------------

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        """Return the events with seq > ``from_seq``.

        Checks what it reads: every batch's seqs follow the previous one's and
        every batch's chain its predecessor's (from the first batch of the
        log, or the second batch read). A hole or a chain break seen twice in a
        row over an unchanged log is damage (:class:`DamagedLogError`); once,
        it may be a delete and rebuild under the read, which is read again.
        """
        events, _ = await self._read(session_id, from_seq, None)
        return events

    async def read_page(
        self, session_id: str, from_seq: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        """The events after ``from_seq``, to the batch reaching ``max_bytes``; more may follow?"""
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise UsageError(f"max_bytes must be an int >= 1, not {max_bytes!r}")
        return await self._read(session_id, from_seq, max_bytes)

    async def _read(
        self, session_id: str, from_seq: int, max_bytes: int | None
    ) -> tuple[list[Event], bool]:
        self._ensure_open()
        validate_session_id(session_id)
        suspect: Suspect | None = None
        with self._translate():
            for _ in range(_READ_ROUNDS):
                result = await self._reader.read(session_id, from_seq, max_bytes)
                if isinstance(result[0], list):
                    return result
                if result == suspect:
                    raise DamagedLogError(session_id, result[0], result[1])
                suspect = result
        raise StoreError(f"session {session_id!r} kept changing under a read")

    def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the events after ``from_seq`` (of ``kinds``, if given), then new ones."""
        return self._tail(session_id, from_seq, kinds)

    async def _tail(
        self, session_id: str, from_seq: int, kinds: tuple[type[Event], ...] | None
    ) -> AsyncIterator[Event]:
        validate_session_id(session_id)
        self._ensure_open()
        watching = False
        try:
            # The consumer exists before the catch-up read: whatever another process
            # stores after that read rings the tail.
            await self._watch.acquire()
            watching = True
            events = tail_events(
                self.read_page,
                self._notifier,
                session_id,
                from_seq,
                is_closed=lambda: self._closed,
                closed_error=StoreClosedError,
                ends_at=self._watch.ends_at,
                kinds=kinds,
            )
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        finally:
            if watching:
                with anyio.move_on_after(self._timeout, shield=True):
                    await self._watch.release()

    async def list_sessions(self) -> list[str]:
        """Return every session id, sorted (from the stream's per-subject counts)."""
        self._ensure_open()
        return sorted(await self._subject_counts())

    async def session_heads(self) -> dict[str, int]:
        """Return every session's last seq, by id.

        One stream info call gives each session subject's message count (a
        batch per message); the last message of a subject whose count changed
        since this store last looked gives its last seq (``Helix-Last-Seq``),
        so a call over sessions at rest costs one request. A subject another
        process deleted and rebuilt to the same count in between keeps its old
        head until it next moves.
        """
        self._ensure_open()
        counts = await self._subject_counts()
        for gone in set(self._heads) - set(counts):
            del self._heads[gone]
        moved = [
            session_id
            for session_id, count in counts.items()
            if self._heads.get(session_id, (0, 0))[0] != count
        ]
        limiter = anyio.CapacityLimiter(_HEAD_GETS)

        async def fetch(session_id: str) -> None:
            async with limiter:
                msg = await self._access.last_msg(self._access.subject(session_id))
            if msg is not None:
                last = helix_seqs(session_id, msg, 1)[1]
                self._heads[session_id] = (counts[session_id], last)

        with self._translate():
            async with anyio.create_task_group() as tg:
                for session_id in moved:
                    tg.start_soon(fetch, session_id)
        return {
            session_id: self._heads[session_id][1]
            for session_id in counts
            if session_id in self._heads
        }

    _search_index: JetStreamSessionIndex | None = None

    async def search_sessions(
        self, query: SessionQuery, *, before: tuple[float, str] | None, limit: int
    ) -> list[IndexedSession]:
        """The sessions matching ``query``, newest first, from a KV index (``index.py``)."""
        self._ensure_open()
        if self._search_index is None:
            self._search_index = JetStreamSessionIndex(
                self._access.js,
                self.stream,
                heads=self.session_heads,
                read=self.read,
                translate=self._translate,
            )
        return await self._search_index.search(query, before=before, limit=limit)

    async def _subject_counts(self) -> dict[str, int]:
        """Every session's message count on the stream (one ``STREAM.INFO`` page at a time)."""
        prefix = f"{self.subject_prefix}."
        counts: dict[str, int] = {}
        offset = 0
        with self._translate():
            while True:
                response = await self._access.api(
                    f"STREAM.INFO.{self.stream}",
                    {"subjects_filter": f"{prefix}*", "offset": offset},
                )
                subjects: dict[str, int] = response.get("state", {}).get("subjects") or {}
                for subject, count in subjects.items():
                    if count > 0 and subject.startswith(prefix):
                        with contextlib.suppress(ValueError):  # not a subject we wrote
                            token = decode_session_token(subject[len(prefix) :])
                            counts[validate_session_id(token)] = count
                offset += len(subjects)
                if not subjects or offset >= int(response.get("total", 0)):
                    break
        return counts

    # --- lifecycle --------------------------------------------------------------------

    _memory: JetStreamMemoryStore | None = None
    _replicas = 1

    def memory_store(self) -> JetStreamMemoryStore:
        """Its memory store (``helix_agents.memory``): KV bucket ``HELIX_MEMORY_<stream>``."""
        if self._memory is None:
            bucket, js = f"HELIX_MEMORY_{self.stream}", self._access.js
            self._memory = JetStreamMemoryStore(js, bucket, replicas=self._replicas)
        return self._memory

    async def close(self) -> None:
        """Wait for appends under way, then close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._notifier.close()
        while self._active:
            self._idle = anyio.Event()
            await self._idle.wait()
        await self._watch.close()
        with (
            anyio.move_on_after(self._timeout, shield=True),
            contextlib.suppress(nats.errors.Error, OSError),
        ):
            await self._nc.close()

    async def __aenter__(self) -> JetStreamEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
