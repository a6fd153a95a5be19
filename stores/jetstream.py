"""``JetStreamEventStore``: session logs in one NATS JetStream stream, a subject per session.

Layout: stream ``<stream>`` (default ``HELIX_EVENTS``) captures ``helix.<stream>.*``;
session ``s`` is the subject ``helix.<stream>.<encode_session_token(s)>``. Each
``append`` is **one message**: the JSON array of the batch's events, with headers
``Helix-First-Seq`` / ``Helix-Last-Seq`` (the batch's helix seqs), so a batch is
atomic and helix seqs are not stream seqs.

Compare-and-append uses ``Nats-Expected-Last-Subject-Sequence``: the stream seq
of the session's last message, which the store caches per session together
with that message's ``Helix-Last-Seq`` and re-derives from the stream (last
message by subject) when unknown or refused. ``Nats-Msg-Id`` is unique per
``append`` call (never per position: two writers racing for one position, or a
session recreated after a delete, must not be taken for duplicates), so a
publish retried after a lost acknowledgement is not stored twice.

``read`` and ``tail`` start at the subject's first message (from 0), right
after a batch this store saw end at ``from_seq`` (remembered), or else where a
binary search over stream seqs with "next message of the subject at or after
stream seq X" gets finds ``from_seq``; then they fetch the messages in batches
(direct gets, on an unreplicated stream; else one get per message). A
``tail`` is fed this store's appends through the shared ``AppendNotifier``;
the store's one ordered, headers-only JetStream consumer (created before the
catch-up read) rings it when another process appends. A tail skips its
catch-up read when it starts where the store last saw the session's log end
and the consumer covers everything after that without having reported any
of the session's messages (a run's watcher, started right after its run's
append). Batched gets answer to one long-lived inbox of the store.

asyncio lives here only because nats-py is asyncio-only; nats-py errors never
leave this module (they become :class:`StoreError`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Coroutine, Iterator, Sequence
from typing import Any

import anyio
import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api as js_api
from nats.js.client import JetStreamContext

from helix_agents.errors import (
    ConcurrencyConflict,
    DamagedLogError,
    StoreClosedError,
    StoreError,
    UsageError,
)
from helix_agents.events import Event
from helix_agents.ids import decode_session_token, encode_session_token, validate_session_id
from helix_agents.log.search import IndexedSession, SessionQuery

from ._chain import chain_of
from ._common import AppendNotifier, check_batch, tail_events
from ._jetstream_index import JetStreamSessionIndex
from ._nats_inbox import EXPECTED_LAST_SUBJECT_SEQ, WRONG_LAST_SEQUENCE, NatsInbox

__all__ = [
    "DEFAULT_OUTAGE_WAIT",
    "DEFAULT_STREAM",
    "JetStreamEventStore",
    "nats_servers",
]

DEFAULT_STREAM = "HELIX_EVENTS"
"""The stream a store uses when none is named."""

HEADER_FIRST_SEQ = "Helix-First-Seq"
HEADER_LAST_SEQ = "Helix-Last-Seq"
HEADER_CHAIN = "Helix-Chain"
_MSG_ID = "Nats-Msg-Id"
_EXPECTED_STREAM = "Nats-Expected-Stream"
_STREAM_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_API = "$JS.API"
_CONFLICT_ROUNDS = 5  # refused publishes an append re-tries while the log still ends where expected
_NO_LEADER_WAIT = 15.0  # seconds an append waits out a stream without a leader (an election)
_READ_ROUNDS = 5  # reads restarted because the log was deleted and rebuilt under them
_BATCH = 256  # messages one direct get returns at most
_MARKED_SESSIONS = 4096  # sessions whose batch positions a store remembers
log = logging.getLogger("helix_agents.stores")

DEFAULT_OUTAGE_WAIT = 600.0
"""Seconds an append waits for a lost NATS connection to come back before it fails."""
_OUTAGE_POLL = 1.0  # the longest pause between two looks at a lost connection
_DISCONNECTED = (
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
)
_HEADER_ROOM = 4096  # bytes of a message left for its headers (ids, seqs, chain, expectations)
_HEAD_GETS = 32  # last-message gets a session_heads call keeps in flight
_MARKS_PER_SESSION = 64
_REPORTED_SESSIONS = 16384  # sessions whose last reported stream seq a store remembers
WATCH_LINGER = 2.0
"""Seconds the store's consumer outlives its last tail (a new tail meanwhile reuses it)."""
SWEEP_EVERY = 3
"""Every this many polls, the poller re-reads every watched session whatever the consumer says."""

_batch_decoder = msgspec.json.Decoder(list[Event])


def nats_servers(url: str) -> list[str]:
    """The servers a NATS URL names: ``nats://a:1,nats://b:2`` lists several (a cluster).

    A single URL is a list of one. Blank items are a :class:`UsageError`.
    """
    servers = [server.strip() for server in url.split(",")]
    if not all(servers):
        raise UsageError(f"bad NATS URL {url!r}: a blank server in the comma-separated list")
    return servers


def validate_stream_name(stream: str) -> str:
    """Return ``stream`` if it is a usable stream name (``A-Za-z0-9_-``, 1-64), else UsageError."""
    if not isinstance(stream, str) or _STREAM_NAME.fullmatch(stream) is None:
        raise UsageError(f"stream name must be 1-64 characters of A-Za-z0-9_-, not {stream!r}")
    return stream


_Position = tuple[int, int, int | None]  # stream seq, helix seq, chain of a session's last message
_Suspect = tuple[int, str, int]  # helix seq, what looked wrong, the log's last stream seq


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
    ) -> None:
        """Use :meth:`connect`; this takes an already connected client and a ready stream."""
        self._nc = nc
        self.outage_wait = outage_wait
        """Seconds an append waits for a lost connection to NATS to come back."""
        self._outage_began: float | None = None  # when the appends began to wait, if they do
        self._outage_waiters = 0
        self._js = nc.jetstream(timeout=timeout)
        self._jsm = nc.jsm(timeout=timeout)
        self.stream = stream
        self.subject_prefix = f"helix.{stream}"
        self._timeout = timeout
        self._publish_attempts = publish_attempts
        # session -> (stream seq, helix seq, chain) of its last message, as last seen.
        self._positions: dict[str, _Position] = {}
        # session -> highest stream seq this store appended (its tails already know).
        self._own: dict[str, int] = {}
        # session -> appends of this store under way; while any is, the stream seqs the
        # consumer reports for it wait here (one may be ours, acknowledged later).
        self._appending: dict[str, int] = {}
        self._held_rings: dict[str, list[int]] = {}
        self._notifier = AppendNotifier(self._probe, poll_interval)
        # One consumer for the whole store rings the tails of whichever session changed.
        self._watch: JetStreamContext.PushSubscription | None = None
        self._watch_refs = 0
        self._watch_lock = anyio.Lock(fast_acquire=True)
        self._linger: asyncio.TimerHandle | None = None  # the unused consumer's deletion, due
        self._chores: set[asyncio.Task[None]] = set()  # the consumer's deletion, its coverage
        self._last_pending: tuple[int, int] = (0, 0)  # the consumer's (pending, delivered)
        # What the consumer has reported, so a tail can skip its catch-up read: every
        # stream message from ``_covered_from`` on is (or will be) reported, unless the
        # connection reconnected since (``_covered_reconnects``) or a probe found the
        # consumer stuck or gone (``_covered_from`` None: no skipping until a new one).
        self._covered_from: int | None = None
        self._covered_reconnects = 0
        self._reported: dict[str, int] = {}  # session -> highest stream seq reported
        self._forgotten = 0  # highest stream seq of a report evicted from _reported
        self._probes = 0  # polls so far: every SWEEP_EVERY-th re-reads every watched session
        self._closed = False
        self._active = 0
        self._idle: anyio.Event | None = None
        # Whether the stream answers batched direct gets (``allow_direct``); else one get
        # per message, as before.
        self._direct = False
        # session -> {helix seq a batch ends at: (its stream seq, its chain)}, as read:
        # a read from one of them starts right after that batch, in one request.
        self._marks: OrderedDict[str, dict[int, tuple[int, int | None]]] = OrderedDict()
        # Appends and batched gets answer to one long-lived inbox.
        self._inbox = NatsInbox(nc, timeout)
        # session_heads: each session's (message count, last seq) when last looked at.
        self._heads: dict[str, tuple[int, int]] = {}

    @property
    def connection(self) -> NatsClient:
        """The store's nats-py client: a process may send its other requests on it too.

        They then share the store's writes to the server. It is the store's:
        closing the store closes it.
        """
        return self._nc

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
                )
        except (nats.errors.Error, OSError) as exc:
            raise StoreError(f"cannot connect to NATS at {url!r}: {exc}") from exc
        if nc is None:
            raise StoreError(f"cannot connect to NATS at {url!r} within {request_timeout} s")
        store = cls(
            nc,
            stream=stream,
            timeout=request_timeout,
            publish_attempts=publish_attempts,
            poll_interval=poll_interval,
            outage_wait=outage_wait,
        )
        try:
            with store._translate():
                await store._ensure_stream(replicas)
        except BaseException:
            with anyio.move_on_after(request_timeout, shield=True):
                await nc.close()
            raise
        return store

    async def _ensure_stream(self, replicas: int) -> None:
        subjects = f"{self.subject_prefix}.*"
        jsm = self._jsm
        try:
            info = await jsm.stream_info(self.stream)
        except nats.js.errors.NotFoundError:
            try:
                await jsm.add_stream(
                    name=self.stream,
                    subjects=[subjects],
                    storage=js_api.StorageType.FILE,
                    num_replicas=replicas,
                    duplicate_window=120.0,
                    # Reads fetch a session's batches in one request. Only the
                    # leader's answers are current: replicated, reads stay on the
                    # leader (one get per message).
                    allow_direct=replicas == 1,
                )
            except nats.js.errors.BadRequestError:
                # Another process may have created it meanwhile: use it if it fits.
                info = await jsm.stream_info(self.stream)
            except nats.js.errors.APIError as exc:
                raise StoreError(
                    f"cannot create stream {self.stream!r} with {replicas} replica(s): "
                    f"{exc.description or exc!r}"
                ) from exc
            else:
                self._direct = replicas == 1
                return
        self._direct = bool(info.config.allow_direct) and info.config.num_replicas in (None, 1)
        if subjects not in (info.config.subjects or []):
            raise StoreError(
                f"stream {self.stream!r} exists but does not capture {subjects!r} "
                f"(it captures {info.config.subjects})"
            )

    # --- helpers ----------------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    @contextlib.contextmanager
    def _translate(self) -> Iterator[None]:
        """Turn nats-py errors into ours (StoreClosedError once the store is closing)."""
        try:
            yield
        except (nats.errors.Error, OSError) as exc:
            if self._closed:
                raise StoreClosedError() from exc
            raise StoreError(f"jetstream store {self.stream!r}: {exc!r}") from exc

    def _subject(self, session_id: str) -> str:
        return f"{self.subject_prefix}.{encode_session_token(session_id)}"

    async def _last_msg(self, subject: str) -> js_api.RawStreamMsg | None:
        try:
            return await self._jsm.get_last_msg(self.stream, subject)
        except nats.js.errors.NotFoundError:
            return None

    async def _next_msg(self, subject: str, stream_seq: int) -> js_api.RawStreamMsg | None:
        """The subject's first message at or after ``stream_seq``, if any."""
        try:
            return await self._jsm.get_msg(
                self.stream, seq=max(stream_seq, 1), subject=subject, next=True
            )
        except nats.js.errors.NotFoundError:
            return None

    def _helix_seqs(self, session_id: str, msg: js_api.RawStreamMsg, near: int) -> tuple[int, int]:
        """The (first, last) helix seqs a stored batch holds; ``near``: the seq to blame if none."""
        headers = msg.headers or {}
        try:
            first, last = int(headers[HEADER_FIRST_SEQ]), int(headers[HEADER_LAST_SEQ])
        except (KeyError, ValueError):
            raise DamagedLogError(
                session_id, near, f"stream message {msg.seq} is not a helix batch"
            ) from None
        if not 1 <= first <= last:
            raise DamagedLogError(session_id, near, f"stream message {msg.seq}: bad helix seqs")
        return first, last

    @staticmethod
    def _chain(session_id: str, msg: js_api.RawStreamMsg, first: int) -> int | None:
        """The message's chain header (None: written before chains existed)."""
        text = (msg.headers or {}).get(HEADER_CHAIN)
        if text is None:
            return None
        try:
            return int(text, 16)
        except ValueError:
            raise DamagedLogError(session_id, first, "checksum mismatch") from None

    @staticmethod
    def _decode(session_id: str, msg: js_api.RawStreamMsg, first: int, last: int) -> list[Event]:
        try:
            events: list[Event] = _batch_decoder.decode(msg.data or b"")
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError) as exc:
            raise DamagedLogError(session_id, first, f"undecodable batch: {exc}") from exc
        if [event.seq for event in events] != list(range(first, last + 1)) or any(
            event.session_id != session_id for event in events
        ):
            raise DamagedLogError(session_id, first, "the batch does not hold its headers' events")
        return events

    async def _position(self, session_id: str) -> _Position:
        """The session's (stream seq, helix seq, chain) of its last message, from the server."""
        msg = await self._last_msg(self._subject(session_id))
        if msg is None or msg.seq is None:
            self._positions.pop(session_id, None)
            return 0, 0, None
        first, last = self._helix_seqs(session_id, msg, 0)
        position = msg.seq, last, self._chain(session_id, msg, first)
        self._positions[session_id] = position
        return position

    async def _api(self, subject: str, request: dict[str, Any]) -> dict[str, Any]:
        reply = await self._nc.request(
            f"{_API}.{subject}", json.dumps(request).encode(), timeout=self._timeout
        )
        response: dict[str, Any] = json.loads(reply.data)
        error = response.get("error")
        if error is not None:
            raise StoreError(f"jetstream store {self.stream!r}: {subject}: {error}")
        return response

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
        self._appending[session_id] = self._appending.get(session_id, 0) + 1
        try:
            with self._translate():
                last = await self._append(session_id, encoded, expected_seq)
        finally:
            self._active -= 1
            if self._active == 0 and self._idle is not None:
                self._idle.set()
            self._appended(session_id)
        self._notifier.publish(session_id, decoded)
        return last

    def _appended(self, session_id: str) -> None:
        """An append here ended: ring for what the consumer reported meanwhile, unless ours."""
        left = self._appending[session_id] - 1
        if left:
            self._appending[session_id] = left
            return
        del self._appending[session_id]
        held = self._held_rings.pop(session_id, [])
        if any(stream_seq > self._own.get(session_id, 0) for stream_seq in held):
            self._notifier.publish(session_id, [])

    def _message_room(self) -> int:
        """Bytes a batch's payload may take in one message (the server's limit, less headers)."""
        return max(int(self._nc.max_payload) - _HEADER_ROOM, 1)

    async def _append(self, session_id: str, encoded: list[bytes], expected_seq: int) -> int:
        """Append ``encoded`` in one message, or, over the message limit, in several.

        A batch that does not fit in one NATS message (a large tool result with
        the messages that carry it) goes in consecutive messages, each a batch
        of its own (compare-and-append on the one before), rather than failing
        the run. An event that alone cannot fit is refused before anything is
        written.
        """
        room = self._message_room()
        if sum(len(data) + 1 for data in encoded) + 1 <= room:
            return await self._append_one(session_id, encoded, expected_seq)
        too_large = [len(data) for data in encoded if len(data) + 2 > room]
        if too_large:
            raise StoreError(
                f"append to session {session_id!r}: an event of {max(too_large)} bytes is over "
                f"the NATS message limit ({self._nc.max_payload} bytes)"
            )
        last = expected_seq
        part: list[bytes] = []
        size = 1
        for data in encoded:
            if part and size + len(data) + 1 > room:
                last = await self._append_one(session_id, part, last)
                part, size = [], 1
            part.append(data)
            size += len(data) + 1
        return await self._append_one(session_id, part, last)

    async def _append_one(self, session_id: str, encoded: list[bytes], expected_seq: int) -> int:
        last = expected_seq + len(encoded)
        subject = self._subject(session_id)
        payload = b"[" + b",".join(encoded) + b"]"
        # Unique per call, shared by its re-sends: only a re-send is a duplicate.
        msg_id = f"{session_id}:{expected_seq + 1}:{uuid.uuid4().hex}"
        position = self._positions.get(session_id)
        if position is None and expected_seq == 0:
            # A new session, most likely: publish expecting an empty subject (the
            # server refuses it otherwise), without asking where the log ends.
            position = (0, 0, None)
        elif position is None or position[1] != expected_seq:
            position = await self._position(session_id)  # the cache may be stale
        for _ in range(_CONFLICT_ROUNDS):
            if position[1] != expected_seq:
                raise ConcurrencyConflict(session_id, expected_seq, position[1])
            chain = chain_of(position[2], payload)
            headers = {
                EXPECTED_LAST_SUBJECT_SEQ: str(position[0]),
                _MSG_ID: msg_id,
                HEADER_FIRST_SEQ: str(expected_seq + 1),
                HEADER_LAST_SEQ: str(last),
                HEADER_CHAIN: f"{chain:08x}",
            }
            stream_seq = await self._publish(session_id, subject, payload, headers, position[0])
            if stream_seq is not None:
                self._positions[session_id] = (stream_seq, last, chain)
                self._own[session_id] = max(self._own.get(session_id, 0), stream_seq)
                self._mark(session_id, [(last, stream_seq, chain)])
                return last
            # Refused: the subject moved on. Re-derive where the log ends; if it
            # still ends at expected_seq (deleted and rebuilt meanwhile), go again.
            position = await self._position(session_id)
        raise ConcurrencyConflict(session_id, expected_seq, position[1])

    async def _publish(
        self,
        session_id: str,
        subject: str,
        payload: bytes,
        headers: dict[str, str],
        expected_stream_seq: int,
    ) -> int | None:
        """Publish one batch; its stream seq, or None if the expected sequence was refused."""
        unsure = False  # whether an earlier send may have landed without an acknowledgement
        attempts = 0
        deadline = anyio.current_time() + _NO_LEADER_WAIT
        delay = 0.05
        while attempts < self._publish_attempts:
            try:
                ack = await self._inbox.publish(
                    subject, payload, {**headers, _EXPECTED_STREAM: self.stream}
                )
            except nats.errors.NoRespondersError as exc:
                # Nobody took the message (the stream has no leader, as during an
                # election): it was not stored, so sending it again is safe.
                if anyio.current_time() >= deadline:
                    raise StoreError(
                        f"append to session {session_id!r}: the stream had no leader for "
                        f"{_NO_LEADER_WAIT:g} s"
                    ) from exc
                await anyio.sleep(delay)
                delay = min(delay * 2, 1.0)
                continue
            except (nats.errors.TimeoutError, *_DISCONNECTED) as exc:
                unsure = unsure or isinstance(exc, nats.errors.TimeoutError)
                if not self._nc.is_connected and not self._nc.is_closed:
                    # NATS is out of reach (restarting, cut off): wait for it, not
                    # counting the sends that could not be answered.
                    await self._wait_for_nats(session_id)
                    deadline = anyio.current_time() + _NO_LEADER_WAIT
                    continue
                if not isinstance(exc, nats.errors.TimeoutError):
                    raise
                attempts += 1
                continue
            if ack.error is not None:
                if ack.error.err_code not in WRONG_LAST_SEQUENCE:
                    raise StoreError(
                        f"append to session {session_id!r}: {ack.error.description} "
                        f"(code {ack.error.code}, err_code {ack.error.err_code})"
                    )
                if unsure:
                    # The server checks the expected sequence before deduplicating,
                    # so a re-send of a batch that landed is refused: look for it.
                    landed = await self._next_msg(subject, expected_stream_seq + 1)
                    if (
                        landed is not None
                        and (landed.headers or {}).get(_MSG_ID) == headers[_MSG_ID]
                    ):
                        return landed.seq
                return None
            return ack.seq  # ack.duplicate: an earlier send landed, this is its seq
        raise StoreError(
            f"append to session {session_id!r}: no acknowledgement after "
            f"{self._publish_attempts} tries; read the log to know whether it landed"
        )

    async def _wait_for_nats(self, session_id: str) -> None:
        """Wait, with bounded backoff, until the connection is back; at most ``outage_wait``.

        The first append to wait logs that the store is out of reach; the
        last one to see it back logs how long it was (``helix_agents.stores``).
        """
        now = anyio.current_time()
        if self._outage_began is None:
            self._outage_began = now
            log.warning(
                "jetstream store %r: NATS is out of reach; appends wait for it (up to %g s)",
                self.stream,
                self.outage_wait,
            )
        self._outage_waiters += 1
        delay = 0.05
        try:
            while not self._nc.is_connected:
                if self._nc.is_closed:
                    raise StoreError(f"append to session {session_id!r}: the store was closed")
                waited = anyio.current_time() - now
                if waited >= self.outage_wait:
                    raise StoreError(
                        f"append to session {session_id!r}: NATS out of reach for {waited:.0f} s "
                        f"(outage_wait {self.outage_wait:g} s)"
                    )
                await anyio.sleep(min(delay, self.outage_wait - waited))
                delay = min(delay * 2, _OUTAGE_POLL)
        finally:
            self._outage_waiters -= 1
            if self._outage_waiters == 0 and self._outage_began is not None:
                if self._nc.is_connected:
                    log.warning(
                        "jetstream store %r: NATS is back after %.1f s; appends go on",
                        self.stream,
                        anyio.current_time() - self._outage_began,
                    )
                self._outage_began = None

    @property
    def outage(self) -> float | None:
        """Seconds appends have been waiting for NATS to come back; None when none waits."""
        if self._outage_began is None:
            return None
        return anyio.current_time() - self._outage_began

    async def delete(self, session_id: str) -> bool:
        """Delete a session's log (purge its subject); return whether it existed."""
        self._ensure_open()
        validate_session_id(session_id)
        with self._translate():
            response = await self._api(
                f"STREAM.PURGE.{self.stream}", {"filter": self._subject(session_id)}
            )
        self._positions.pop(session_id, None)
        self._marks.pop(session_id, None)
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
        self._ensure_open()
        validate_session_id(session_id)
        suspect: _Suspect | None = None
        with self._translate():
            for _ in range(_READ_ROUNDS):
                result = await self._read(session_id, from_seq)
                if isinstance(result, list):
                    return result
                if result == suspect:
                    raise DamagedLogError(session_id, result[0], result[1])
                suspect = result
        raise StoreError(f"session {session_id!r} kept changing under a read")

    async def _read(self, session_id: str, from_seq: int) -> list[Event] | _Suspect:
        """One attempt: the events, or where and how the log looked damaged.

        Where the read starts: the subject's first message (``from_seq`` 0),
        right after a batch this store saw end at ``from_seq`` (its marks), or
        else the batch holding ``from_seq + 1`` (binary search). From there
        the messages come in batches of up to ``_BATCH`` per request (direct
        gets), or one get each on a stream without ``allow_direct``.
        """
        from_seq = max(from_seq, 0)
        subject = self._subject(session_id)
        previous: int | None = None
        chained = False  # whether previous is the chain of the batch before the first read
        marked = self._marks.get(session_id, {}).get(from_seq) if from_seq else None
        if from_seq == 0:
            start = 1
        elif marked is not None:
            start, previous, chained = marked[0] + 1, marked[1], True
        else:
            last = await self._last_msg(subject)
            if last is None or last.seq is None:
                return []
            first_seq, last_seq = self._helix_seqs(session_id, last, from_seq + 1)
            if last_seq <= from_seq:
                return []
            found = last
            if first_seq > from_seq + 1:
                found = await self._find(session_id, subject, from_seq, last)
            assert found.seq is not None
            start = found.seq
        events: list[Event] = []
        expected = from_seq + 1  # the next helix seq the log must hold
        end = 0
        marks: list[tuple[int, int, int | None]] = []
        while True:
            batch, more = await self._fetch(subject, start)
            for msg in batch:
                assert msg.seq is not None
                end = msg.seq
                first, last_in = self._helix_seqs(session_id, msg, expected)
                if first > expected or ((events or chained) and first != expected):
                    if chained and not events:
                        self._marks.pop(session_id, None)  # rebuilt since: find it afresh
                    return expected, "gap: the event is missing", end
                chain = self._chain(session_id, msg, first)
                payload = msg.data or b""
                if (
                    chain is not None
                    and (chained or first == 1)
                    and chain != chain_of(previous, payload)
                ):
                    return first, "checksum mismatch", end
                previous, chained = chain, True
                decoded = self._decode(session_id, msg, first, last_in)
                events.extend(event for event in decoded if event.seq > from_seq)
                expected = last_in + 1
                marks.append((last_in, msg.seq, chain))
            if not more or not batch:
                break
            start = end + 1
        self._mark(session_id, marks)
        if marks and self._direct:
            # Where the log ends, as of this read: the next append here need not ask.
            known = self._positions.get(session_id)
            if known is None or known[0] < end:
                self._positions[session_id] = (end, marks[-1][0], marks[-1][2])
        return events

    def _mark(self, session_id: str, marks: list[tuple[int, int, int | None]]) -> None:
        """Remember where the batches just read end (the last few of each session)."""
        if not marks:
            return
        known = self._marks.pop(session_id, {})
        for helix_seq, stream_seq, chain in marks[-_MARKS_PER_SESSION:]:
            known[helix_seq] = (stream_seq, chain)
        while len(known) > _MARKS_PER_SESSION:
            del known[next(iter(known))]
        self._marks[session_id] = known
        while len(self._marks) > _MARKED_SESSIONS:
            self._marks.popitem(last=False)

    async def _fetch(self, subject: str, start: int) -> tuple[list[js_api.RawStreamMsg], bool]:
        """The subject's messages from stream seq ``start`` on, one request; and if more follow."""
        if not self._direct:
            msg = await self._next_msg(subject, start)
            if msg is None:
                return [], False
            return [msg], True
        request = {"seq": max(start, 1), "next_by_subj": subject, "batch": _BATCH}
        replies = self._inbox.replies(
            f"{_API}.DIRECT.GET.{self.stream}", json.dumps(request).encode()
        )
        batch: list[js_api.RawStreamMsg] = []
        async with contextlib.aclosing(replies):
            async for reply in replies:
                headers = reply.headers or {}
                status = headers.get("Status")
                if status == "404":
                    return batch, False
                if status == "204":  # end of this batch
                    return batch, int(headers.get("Nats-Num-Pending") or 0) > 0
                if status is not None:
                    description = headers.get(js_api.Header.DESCRIPTION, "")
                    raise StoreError(
                        f"jetstream store {self.stream!r}: direct get: {status} {description}"
                    )
                batch.append(
                    js_api.RawStreamMsg(
                        subject=headers.get("Nats-Subject"),
                        seq=int(headers["Nats-Sequence"]),
                        data=reply.data,
                        headers=headers,
                    )
                )
        raise AssertionError("unreachable: the replies never end by themselves")

    async def _find(
        self, session_id: str, subject: str, from_seq: int, last: js_api.RawStreamMsg
    ) -> js_api.RawStreamMsg:
        """The subject's first message holding a helix seq above ``from_seq``.

        ``last`` (the subject's last message) holds one. Binary search over
        stream seqs: a "next message of the subject at or after ``mid``" get
        tells on which side of ``mid`` the answer lies, so this costs
        log2(stream seq of ``last``) gets however the subject is interleaved.
        """
        assert last.seq is not None
        found, low, high = last, 1, last.seq - 1
        while low <= high:
            mid = (low + high) // 2
            msg = await self._next_msg(subject, mid)
            if msg is None or msg.seq is None or msg.seq > high:
                high = mid - 1  # no message of the subject in [mid, high]
            elif self._helix_seqs(session_id, msg, from_seq + 1)[1] > from_seq:
                found, high = msg, mid - 1
            else:
                low = msg.seq + 1
        return found

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
            await self._watch_store()
            watching = True
            events = tail_events(
                self.read,
                self._notifier,
                session_id,
                from_seq,
                is_closed=lambda: self._closed,
                closed_error=StoreClosedError,
                ends_at=self._ends_at,
                kinds=kinds,
            )
            async with contextlib.aclosing(events):
                async for event in events:
                    yield event
        finally:
            if watching:
                with anyio.move_on_after(self._timeout, shield=True):
                    await self._unwatch_store()

    def _ends_at(self, session_id: str, seq: int) -> bool:
        """Whether the log surely ends at ``seq``, as far as a tail subscribed now can tell.

        True when this store's last sight of the session (its own append, or a
        read) ended at helix seq ``seq``, at stream seq P, and its consumer
        covers every stream message after P (it started at or before P + 1,
        without a reconnect or a failed probe since) and has reported none of
        the session's beyond P: whatever follows P will ring the tail, so its
        catch-up read would find nothing.
        """
        position = self._positions.get(session_id)
        covered = self._covered_from
        if position is None or position[1] != seq or covered is None or self._watch is None:
            return False
        stream_seq = position[0]
        if covered > stream_seq + 1 or self._nc.stats["reconnects"] != self._covered_reconnects:
            return False
        reported = self._reported.get(session_id)
        if reported is None:
            return stream_seq >= self._forgotten
        return reported <= stream_seq

    async def _watch_store(self) -> None:
        """Start (or share) the store's consumer: headers only, every session's subject."""
        async with self._watch_lock:
            if self._linger is not None:
                self._linger.cancel()  # a tail again: the lingering consumer serves it
                self._linger = None
            if self._watch is None:
                self._ensure_open()
                prefix = f"{self.subject_prefix}."

                async def ring(msg: Msg) -> None:
                    self._on_stored(msg, prefix)

                # Not cancelled half-way: a consumer the server made must be ours to
                # delete (a run ending while its watcher subscribed left one behind).
                with self._translate(), anyio.CancelScope(shield=True):
                    self._watch = await self._js.subscribe(
                        f"{prefix}*",
                        stream=self.stream,
                        cb=ring,
                        ordered_consumer=True,
                        deliver_policy=js_api.DeliverPolicy.NEW,
                        headers_only=True,
                        # Deleted when unused (below); this bounds one left behind by a
                        # process that died, or by an ordered consumer's reset.
                        inactive_threshold=5.0,
                    )
                watch = self._watch
                assert watch is not None  # (a shielded scope could, to a type checker, skip it)
                self._last_pending = (0, 0)
                self._chore(self._cover(watch))
            self._watch_refs += 1

    async def _cover(self, watch: JetStreamContext.PushSubscription) -> None:
        """Note from where the new consumer reports every message (best effort)."""
        reconnects = self._nc.stats["reconnects"]
        try:
            info = await watch.consumer_info()
        except (nats.errors.Error, OSError):
            return  # unknown: tails read, as ever
        # A new consumer's delivered stream seq is the stream's last at its creation
        # (or later, if it delivered since: then this is later than need be).
        delivered = int(info.delivered.stream_seq or 0) if info.delivered else 0
        if watch is self._watch:
            self._covered_from = delivered + 1
            self._covered_reconnects = reconnects

    async def _unwatch_store(self) -> None:
        async with self._watch_lock:
            self._watch_refs -= 1
            if self._watch_refs > 0 or self._watch is None:
                return
            if self._closed:
                await self._drop_watch()
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
        async with self._watch_lock:
            if self._watch_refs == 0 and self._linger is None:
                await self._drop_watch()

    async def _drop_watch(self) -> None:
        """Unsubscribe the store's consumer and delete it on the server (never left to lapse)."""
        watch, self._watch = self._watch, None
        self._covered_from = None  # (a late _cover of it sees it is no longer the one)
        if watch is None:
            return
        name = getattr(watch, "_consumer", None)  # the current one (an ordered consumer's reset)
        with contextlib.suppress(nats.errors.Error, OSError):
            await watch.unsubscribe()
            if name:
                await self._jsm.delete_consumer(self.stream, name)

    def _on_stored(self, msg: Msg, prefix: str) -> None:
        """A message was stored: wake the session's tails unless the message is ours."""
        if not msg.subject.startswith(prefix):
            return
        try:
            session_id = decode_session_token(msg.subject[len(prefix) :])
        except ValueError:
            return  # not a subject we wrote
        stream_seq: int | None
        try:
            stream_seq = msg.metadata.sequence.stream
        except Exception:  # not a JetStream delivery we can parse: just ring
            stream_seq = None
        if stream_seq is None:
            self._covered_from = None  # and skip no catch-up read from now on
        else:
            self._report(session_id, stream_seq)
        if not self._notifier.is_watched(session_id):
            return
        # Our own appends reached the tails through the notifier already, and
        # so did every message before them on the subject (a tail that missed
        # one sees a gap in our batch and re-reads). The consumer may report one
        # of ours before its acknowledgement: while an append here is under way,
        # the ring waits for it to end (``_appended``).
        if stream_seq is not None and session_id in self._appending:
            self._held_rings.setdefault(session_id, []).append(stream_seq)
        elif stream_seq is None or stream_seq > self._own.get(session_id, 0):
            self._notifier.publish(session_id, [])

    def _report(self, session_id: str, stream_seq: int) -> None:
        """Remember the session's highest stream seq the consumer reported (bounded)."""
        reported = self._reported
        if stream_seq > reported.get(session_id, 0):
            reported[session_id] = stream_seq
            if len(reported) > _REPORTED_SESSIONS:
                oldest = next(iter(reported))
                self._forgotten = max(self._forgotten, reported.pop(oldest))

    async def _probe(self, sessions: list[str]) -> list[str]:
        """The poller's safety net: every watched session if the consumer seems stuck or gone.

        One request per poll, however many sessions are watched: the
        consumer's info. Stuck means messages were pending at the last probe
        and nothing was delivered since. Every :data:`SWEEP_EVERY`-th poll
        re-reads them all anyway (one request each).
        """
        watch = self._watch
        if watch is None or not sessions or self._closed:
            return []
        self._probes += 1
        if self._probes % SWEEP_EVERY == 0:
            # A slow sweep: a ring lost all the same (a push missed across a
            # reconnect while the consumer moved on, found by the soak test)
            # delays a tail by a few polls, never for ever.
            return sessions
        try:
            info = await watch.consumer_info()
        except (nats.errors.Error, OSError):
            self._last_pending = (0, 0)
            self._covered_from = None  # it may have missed messages: tails read from now on
            return sessions  # gone (nats-py recreates it) or unreachable: re-read
        pending = int(info.num_pending or 0)
        delivered = int(info.delivered.stream_seq or 0) if info.delivered else 0
        stuck = self._last_pending[0] > 0 and delivered == self._last_pending[1]
        self._last_pending = (pending, delivered)
        if stuck:
            self._covered_from = None
        return sessions if stuck else []

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
                msg = await self._last_msg(self._subject(session_id))
            if msg is not None:
                last = self._helix_seqs(session_id, msg, 1)[1]
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
        """The sessions matching ``query``, newest first, from a KV index (``_jetstream_index``)."""
        self._ensure_open()
        if self._search_index is None:
            self._search_index = JetStreamSessionIndex(
                self._js,
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
                response = await self._api(
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

    async def close(self) -> None:
        """Wait for appends under way, then close the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._notifier.close()
        while self._active:
            self._idle = anyio.Event()
            await self._idle.wait()
        if self._linger is not None:
            self._linger.cancel()
            self._linger = None
        with anyio.move_on_after(self._timeout, shield=True):
            async with self._watch_lock:
                if self._watch_refs == 0:
                    await self._drop_watch()
        for chore in list(self._chores):
            chore.cancel()  # a coverage check left (the consumer is gone)
        with (
            anyio.move_on_after(self._timeout, shield=True),
            contextlib.suppress(nats.errors.Error, OSError),
        ):
            await self._nc.close()

    async def __aenter__(self) -> JetStreamEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
