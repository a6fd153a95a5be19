"""The JetStream store's append path: compare-and-append publishes, split batches, outages.

Compare-and-append uses ``Nats-Expected-Last-Subject-Sequence``: the stream
seq of the session's last message, cached per session with that message's
``Helix-Last-Seq`` and re-derived from the stream (last message by subject)
when unknown or refused. ``Nats-Msg-Id`` is unique per ``append`` call, so a
publish retried after a lost acknowledgement is not stored twice. A batch
over the message limit goes in consecutive messages; a lost connection to
NATS is waited out (``outage_wait``), not counted against the attempts.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

import anyio
import nats.errors

from helix_agents.errors import ConcurrencyConflict, StoreError, StoreUnavailableError
from helix_agents.stores.chain import chain_of

from .inbox import EXPECTED_LAST_SUBJECT_SEQ, WRONG_LAST_SEQUENCE, NatsInbox
from .reads import BatchMarks
from .wire import (
    HEADER_CHAIN,
    HEADER_FIRST_SEQ,
    HEADER_LAST_SEQ,
    Position,
    StreamAccess,
    chain_header,
    helix_seqs,
)

__all__ = ["DEFAULT_OUTAGE_WAIT", "JetStreamAppender"]

DEFAULT_OUTAGE_WAIT = 600.0
"""Seconds an append waits for a lost NATS connection to come back before it fails."""

_MSG_ID = "Nats-Msg-Id"
_EXPECTED_STREAM = "Nats-Expected-Stream"
_CONFLICT_ROUNDS = 5  # refused publishes an append re-tries while the log still ends where expected
_NO_LEADER_WAIT = 15.0  # seconds an append waits out a stream without a leader (an election)
_OUTAGE_POLL = 1.0  # the longest pause between two looks at a lost connection
_DISCONNECTED = (
    nats.errors.ConnectionReconnectingError,
    nats.errors.OutboundBufferLimitError,
    nats.errors.StaleConnectionError,
)
_HEADER_ROOM = 4096  # bytes of a message left for its headers (ids, seqs, chain, expectations)
log = logging.getLogger("helix_agents.stores")


class JetStreamAppender:
    """Appends batches to sessions' subjects, compare-and-append, through one inbox."""

    def __init__(
        self,
        access: StreamAccess,
        inbox: NatsInbox,
        positions: dict[str, Position],
        marks: BatchMarks,
        *,
        landed: Callable[[str, int], None],
        publish_attempts: int,
        outage_wait: float,
    ) -> None:
        """Publish through ``inbox``; keep ``positions`` and ``marks`` up to date.

        ``landed(session_id, stream_seq)`` is told of every message this
        appender stored.
        """
        self._access = access
        self._nc = access.nc
        self._inbox = inbox
        # session -> (stream seq, helix seq, chain) of its last message, as last seen.
        self._positions = positions
        self._marks = marks
        self._landed = landed
        self._publish_attempts = publish_attempts
        self.outage_wait = outage_wait
        """Seconds an append waits for a lost connection to NATS to come back."""
        self._outage_began: float | None = None  # when the appends began to wait, if they do
        self._outage_waiters = 0

    @property
    def outage(self) -> float | None:
        """Seconds appends have been waiting for NATS to come back; None when none waits."""
        if self._outage_began is None:
            return None
        return anyio.current_time() - self._outage_began

    @property
    def outage_began(self) -> float | None:
        """When (``anyio.current_time()``) appends began to wait for NATS; None when none waits."""
        return self._outage_began

    def _message_room(self) -> int:
        """Bytes a batch's payload may take in one message (the server's limit, less headers)."""
        return max(int(self._nc.max_payload) - _HEADER_ROOM, 1)

    async def append(self, session_id: str, encoded: list[bytes], expected_seq: int) -> int:
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

    async def _position(self, session_id: str) -> Position:
        """The session's (stream seq, helix seq, chain) of its last message, from the server."""
        msg = await self._access.last_msg(self._access.subject(session_id))
        if msg is None or msg.seq is None:
            self._positions.pop(session_id, None)
            return 0, 0, None
        first, last = helix_seqs(session_id, msg, 0)
        position = msg.seq, last, chain_header(session_id, msg, first)
        self._positions[session_id] = position
        return position

    async def _append_one(self, session_id: str, encoded: list[bytes], expected_seq: int) -> int:
        last = expected_seq + len(encoded)
        subject = self._access.subject(session_id)
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
                self._landed(session_id, stream_seq)
                self._marks.mark(session_id, [(last, stream_seq, chain)])
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
                    subject, payload, {**headers, _EXPECTED_STREAM: self._access.stream}
                )
            except nats.errors.NoRespondersError as exc:
                # Nobody took the message (the stream has no leader, as during an
                # election): it was not stored, so sending it again is safe.
                if anyio.current_time() >= deadline:
                    raise StoreUnavailableError(
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
                    landed = await self._access.next_msg(subject, expected_stream_seq + 1)
                    if (
                        landed is not None
                        and (landed.headers or {}).get(_MSG_ID) == headers[_MSG_ID]
                    ):
                        return landed.seq
                return None
            return ack.seq  # ack.duplicate: an earlier send landed, this is its seq
        raise StoreUnavailableError(
            f"append to session {session_id!r}: no acknowledgement after "
            f"{self._publish_attempts} tries; read the log to know whether it landed"
        )

    async def _wait_for_nats(self, session_id: str) -> None:
        """Wait, with bounded backoff, until the connection is back; at most ``outage_wait``.

        The first append to wait logs that the store is out of reach; the
        last one to see it back logs how long it was (``helix_agents.stores``).
        """
        stream = self._access.stream
        now = anyio.current_time()
        if self._outage_began is None:
            self._outage_began = now
            log.warning(
                "jetstream store %r: NATS is out of reach; appends wait for it (up to %g s)",
                stream,
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
                    raise StoreUnavailableError(
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
                        stream,
                        anyio.current_time() - self._outage_began,
                    )
                self._outage_began = None
