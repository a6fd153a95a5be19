"""The JetStream store's session index: a KV bucket of session documents, caught up on search.

Bucket ``HELIX_INDEX_<stream>`` holds a key per session (its subject token,
``encode_session_token``, with ``:`` as ``=``) whose value is the session's
:class:`~helix_agents.log.search.SessionDoc` as JSON: agent type, parent,
metadata, created and updated times, the set of its words, and ``last_seq``,
the last event it covers. Each store keeps a
:class:`~helix_agents.log.search.MemorySessionIndex` mirror and answers
searches from it.

It is not written on append (an append stays one publish). Instead a search
first catches up: ``session_heads`` (one stream-info request while sessions
are at rest) names the sessions whose log moved past the mirror; for each,
the bucket's entry is fetched, and if it is behind too, only the events after
its ``last_seq`` are read, folded in, and written back with a compare-and-set
on the entry's revision (a process that loses the race keeps its own copy in
its mirror; both are the same document). So each event is read for the index
about once across every process sharing the stream, and the index is right
after any crash: it is derived from the log, and a document behind its log
is brought up to date at the next search. Sessions gone from the stream are
dropped (and purged from the bucket). A session deleted and created again
between two searches, to at least the same length, keeps its old words until
the store's mirror is rebuilt (a new process): the same blind spot as
``session_heads``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from helix_agents.errors import DamagedLogError, LogError
from helix_agents.events import Event
from helix_agents.ids import encode_session_token
from helix_agents.log.search import IndexedSession, MemorySessionIndex, SessionDoc, SessionQuery

__all__ = ["JetStreamSessionIndex"]

log = logging.getLogger("helix_agents.stores")

_REFRESHES = 16  # sessions caught up at once
_MAX_DOC_BYTES = 512 * 1024  # a larger document stays in this process's mirror only

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(SessionDoc)


def _key(session_id: str) -> str:
    """The session's key in the bucket (KV keys hold no ``:``; tokens hold no ``=``)."""
    return encode_session_token(session_id).replace(":", "=")


class JetStreamSessionIndex:
    """A JetStream store's :class:`~helix_agents.log.search.SessionIndex` (see the module).

    It gets what it uses of its store as arguments: the JetStream context, the
    stream's name, ``session_heads``, ``read``, and the context manager that
    turns nats-py errors into the store's own.
    """

    def __init__(
        self,
        js: JetStreamContext,
        stream: str,
        *,
        heads: Callable[[], Awaitable[dict[str, int]]],
        read: Callable[[str, int], Awaitable[list[Event]]],
        translate: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self._js = js
        self._heads = heads
        self._read = read
        self._translate = translate
        self.bucket = f"HELIX_INDEX_{stream}"
        self._kv: KeyValue | None = None
        self._mirror = MemorySessionIndex()
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"<JetStreamSessionIndex bucket={self.bucket!r} {self._mirror!r}>"

    async def search(
        self, query: SessionQuery, *, before: tuple[float, str] | None, limit: int
    ) -> list[IndexedSession]:
        """Catch up with the stream, then answer from the mirror."""
        async with self._lock:
            await self._catch_up()
        return self._mirror.search(query, before=before, limit=limit)

    async def _bucket(self) -> KeyValue:
        if self._kv is None:
            self._kv = await self._js.create_key_value(bucket=self.bucket, history=1)
        return self._kv

    async def _catch_up(self) -> None:
        heads = await self._heads()
        docs = self._mirror.docs
        gone = [session_id for session_id in docs if session_id not in heads]
        moved = [
            (session_id, head)
            for session_id, head in heads.items()
            if session_id not in docs or docs[session_id].last_seq != head
        ]
        if not gone and not moved:
            return
        with self._translate():
            kv = await self._bucket()
            for session_id in gone:
                self._mirror.drop(session_id)
                with contextlib.suppress(nats.errors.Error):
                    await kv.purge(_key(session_id))
            limiter = anyio.CapacityLimiter(_REFRESHES)

            async def refresh(session_id: str, head: int) -> None:
                async with limiter:
                    await self._refresh(kv, session_id, head)

            async with anyio.create_task_group() as tg:
                for session_id, head in moved:
                    tg.start_soon(refresh, session_id, head)

    async def _refresh(self, kv: KeyValue, session_id: str, head: int) -> None:
        """Bring one session's document up to ``head``: from the bucket, then from its log."""
        key = _key(session_id)
        doc: SessionDoc | None = None
        revision: int | None = None
        try:
            entry = await kv.get(key)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            entry = None
        if entry is not None and entry.value:
            revision = entry.revision
            with contextlib.suppress(msgspec.DecodeError):
                doc = _decoder.decode(entry.value)
        if doc is not None and doc.session_id != session_id:
            doc = None
        if doc is not None and doc.last_seq == head:
            self._mirror.put(doc)
            return
        if doc is not None and doc.last_seq > head:
            doc = None  # the log was deleted and is shorter now: start again
        try:
            events = await self._read(session_id, 0 if doc is None else doc.last_seq)
        except (LogError, DamagedLogError) as exc:
            log.warning("session index: %s not indexed: %s", session_id, exc)
            return
        if doc is None:
            if not events:
                return
            doc = SessionDoc.start(events[0])
        doc.add(events)
        self._mirror.put(doc)
        data = _encoder.encode(doc)
        if len(data) > _MAX_DOC_BYTES:
            return
        try:
            if revision is None:
                await kv.create(key, data)
            else:
                await kv.update(key, data, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass  # another process wrote it meanwhile: the same document, or a later one
        except nats.js.errors.BadRequestError:
            pass  # create() of a key another process created meanwhile
