"""Reading a JetStream store's session: where a read starts, batched gets, remembered batch ends.

A read starts at the subject's first message (from 0), right after a batch
this store saw end at ``from_seq`` (:class:`BatchMarks`), or else where a
binary search over stream seqs finds ``from_seq``; then the messages come in
batches (batched direct gets, on a stream with ``allow_direct``; else one get
per message), each checked against its predecessor's seqs and chain.

On a replicated stream any replica may answer a direct get, and a follower
may lag the leader: what it returns is right (a stream's messages never
change) but may stop short. So there the batches are followed by one get from
the leader, after the last message read: nothing there, the read is
complete; a message, the read goes on from the leader, one get each (a
follower rarely lags by more than the last append or two).
"""

from __future__ import annotations

import contextlib
import json
from collections import OrderedDict

import anyio
from nats.js import api as js_api

from helix_agents.errors import StoreError
from helix_agents.events import Event
from helix_agents.stores.chain import chain_of

from .inbox import NatsInbox
from .wire import (
    API,
    Position,
    StreamAccess,
    Suspect,
    chain_header,
    decode_batch,
    helix_seqs,
)

__all__ = ["BatchMarks", "LogReader", "Mark"]

_BATCH = 256  # messages one direct get returns at most
_NO_RESPONDER_PAUSES = (0.05, 0.1, 0.2, 0.4)
"""Pauses before a direct get nobody answered is sent again; then the leader is asked."""
_MARKED_SESSIONS = 4096  # sessions whose batch positions a store remembers
_MARKS_PER_SESSION = 64

Mark = tuple[int, int, int | None]  # helix seq a batch ends at, its stream seq, its chain


class BatchMarks:
    """Where the batches a store read or wrote end, the last few of each session (bounded)."""

    def __init__(self) -> None:
        """No marks yet."""
        # session -> {helix seq a batch ends at: (its stream seq, its chain)}, as read:
        # a read from one of them starts right after that batch, in one request.
        self._marks: OrderedDict[str, dict[int, tuple[int, int | None]]] = OrderedDict()

    def get(self, session_id: str, helix_seq: int) -> tuple[int, int | None] | None:
        """The (stream seq, chain) of the session's batch ending at ``helix_seq``, if known."""
        return self._marks.get(session_id, {}).get(helix_seq)

    def forget(self, session_id: str) -> None:
        """Drop what is known of the session (deleted, or rebuilt under a read)."""
        self._marks.pop(session_id, None)

    def mark(self, session_id: str, marks: list[Mark]) -> None:
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


class LogReader:
    """One attempt at reading a session's log from the stream, checked as it goes."""

    def __init__(
        self,
        access: StreamAccess,
        inbox: NatsInbox,
        positions: dict[str, Position],
        marks: BatchMarks,
    ) -> None:
        """Read through ``access`` and ``inbox``; note where logs end in ``positions``."""
        self._access = access
        self._inbox = inbox
        self._positions = positions
        self._marks = marks
        # Whether the stream answers batched direct gets (``allow_direct``); else one get
        # per message, as before. Set once the stream is known.
        self.direct = False
        # Whether direct gets may come from a lagging follower (a replicated stream):
        # the leader then says where the log ends.
        self.replicated = False

    async def read(
        self, session_id: str, from_seq: int, max_bytes: int | None = None
    ) -> tuple[list[Event], bool] | Suspect:
        """One attempt: the events and whether more may follow, or where the log looked damaged.

        With ``max_bytes``, a page: the read stops after the batch whose
        payloads bring it to ``max_bytes`` (the rest of the log is not
        fetched, and more may follow); else it reads to the log's end.

        Where the read starts: the subject's first message (``from_seq`` 0),
        right after a batch this store saw end at ``from_seq`` (its marks), or
        else the batch holding ``from_seq + 1`` (binary search). From there
        the messages come in batches of up to ``_BATCH`` per request (direct
        gets), or one get each on a stream without ``allow_direct``. On a
        replicated stream the leader is asked once more after the batches
        (see the module).
        """
        from_seq = max(from_seq, 0)
        subject = self._access.subject(session_id)
        previous: int | None = None
        chained = False  # whether previous is the chain of the batch before the first read
        marked = self._marks.get(session_id, from_seq) if from_seq else None
        if from_seq == 0:
            start = 1
        elif marked is not None:
            start, previous, chained = marked[0] + 1, marked[1], True
        else:
            last = await self._access.last_msg(subject)
            if last is None or last.seq is None:
                return [], False
            first_seq, last_seq = helix_seqs(session_id, last, from_seq + 1)
            if last_seq <= from_seq:
                return [], False
            found = last
            if first_seq > from_seq + 1:
                found = await self._find(session_id, subject, from_seq, last)
            assert found.seq is not None
            start = found.seq
        events: list[Event] = []
        expected = from_seq + 1  # the next helix seq the log must hold
        end = 0
        marks: list[Mark] = []
        from_leader = not self.direct
        size = 0
        while True:
            batch, more = await self._fetch(subject, start, from_leader)
            for msg in batch:
                assert msg.seq is not None
                end = msg.seq
                first, last_in = helix_seqs(session_id, msg, expected)
                if first > expected or ((events or chained) and first != expected):
                    if chained and not events:
                        self._marks.forget(session_id)  # rebuilt since: find it afresh
                    return expected, "gap: the event is missing", end
                chain = chain_header(session_id, msg, first)
                payload = msg.data or b""
                size += len(payload)
                if (
                    chain is not None
                    and (chained or first == 1)
                    and chain != chain_of(previous, payload)
                ):
                    return first, "checksum mismatch", end
                previous, chained = chain, True
                decoded = decode_batch(session_id, msg, first, last_in)
                events.extend(event for event in decoded if event.seq > from_seq)
                expected = last_in + 1
                marks.append((last_in, msg.seq, chain))
            if max_bytes is not None and size >= max_bytes and batch:
                self._marks.mark(session_id, marks)
                return events, True  # a page: more may follow
            if more and batch:
                start = end + 1
            elif self.replicated and not from_leader:
                from_leader = True  # a follower may have answered: is there more?
                start = end + 1 if end else start
            else:
                break
        self._marks.mark(session_id, marks)
        if marks and self.direct:
            # Where the log ends, as of this read: the next append here need not ask.
            known = self._positions.get(session_id)
            if known is None or known[0] < end:
                self._positions[session_id] = (end, marks[-1][0], marks[-1][2])
        return events, False

    async def _fetch(
        self, subject: str, start: int, from_leader: bool
    ) -> tuple[list[js_api.RawStreamMsg], bool]:
        """The subject's messages from stream seq ``start`` on, one request; and if more follow.

        ``from_leader``: one message, from the stream's leader (else a batched direct get).
        """
        if from_leader:
            msg = await self._access.next_msg(subject, start)
            if msg is None:
                return [], False
            return [msg], True
        for pause in _NO_RESPONDER_PAUSES:
            found = await self._direct_batch(subject, start)
            if found is not None:
                return found
            # No server answered the direct get (a replica not serving them yet, as
            # right after an election or a stream's update): wait a moment, try again.
            await anyio.sleep(pause)
        # Still nobody: the leader answers, one message a request.
        msg = await self._access.next_msg(subject, start)
        return ([], False) if msg is None else ([msg], True)

    async def _direct_batch(
        self, subject: str, start: int
    ) -> tuple[list[js_api.RawStreamMsg], bool] | None:
        """One batched direct get from stream seq ``start`` on; ``None`` if no server answered."""
        stream = self._access.stream
        request = {"seq": max(start, 1), "next_by_subj": subject, "batch": _BATCH}
        replies = self._inbox.replies(f"{API}.DIRECT.GET.{stream}", json.dumps(request).encode())
        batch: list[js_api.RawStreamMsg] = []
        async with contextlib.aclosing(replies):
            async for reply in replies:
                headers = reply.headers or {}
                status = headers.get("Status")
                if status == "404":
                    return batch, False
                if status == "204":  # end of this batch
                    return batch, int(headers.get("Nats-Num-Pending") or 0) > 0
                if status == "503" and not batch:  # no responders
                    return None
                if status is not None:
                    description = headers.get(js_api.Header.DESCRIPTION, "")
                    raise StoreError(
                        f"jetstream store {stream!r}: direct get: {status} {description}"
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
            msg = await self._access.next_msg(subject, mid)
            if msg is None or msg.seq is None or msg.seq > high:
                high = mid - 1  # no message of the subject in [mid, high]
            elif helix_seqs(session_id, msg, from_seq + 1)[1] > from_seq:
                found, high = msg, mid - 1
            else:
                low = msg.seq + 1
        return found
