"""``SqliteEventStore``: the embedded default store (one file, WAL, group commit).

The store is composed of: the file's schema and connections
(``schema.py``), the group-commit writer (``commit.py``), reads and
the poller's probe (``reads.py``), and the commit counter, high-water
mark and file check (``integrity.py``).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal, TypeVar

import anyio
import anyio.lowlevel

from helix_agents.errors import (
    DamagedLogError,
    DamagedStoreError,
    StoreClosedError,
    StoreError,
    UsageError,
)
from helix_agents.events import Event
from helix_agents.ids import validate_session_id
from helix_agents.log.search import IndexedSession, SessionQuery
from helix_agents.stores.common import AppendNotifier, check_batch, tail_events

from .batched import BatchedCall, BatchedCalls
from .commit import Append, Delete, GroupCommit, Op
from .index import ensure_index, index_ready, search_sql
from .integrity import HighWaterMark, held_commits, storage_problems
from .memory import SqliteMemoryStore
from .reads import ChangeProbe, read_events
from .schema import (
    SCHEMA,
    add_chain_column,
    add_last_seq_column,
    connect,
    connect_read_only,
    is_corruption,
)

__all__ = ["SqliteEventStore"]

T = TypeVar("T")

log = logging.getLogger("helix_agents.stores")

_KNOWN_ENDS = 10_000  # sessions whose end this store remembers (for tails starting there)
_READ_THREADS = 40  # worker threads reading at once (each with its own connection)
_INLINE_READ = 512  # events a read may return to be done on the event loop's thread
_READ_BATCH = 64  # reads one worker thread takes in one hop (see batched.py)


class SqliteEventStore:
    """A durable :class:`~helix_agents.EventStore` in one SQLite file.

    Args:
        path: the database file (created if missing). ``":memory:"`` is not
            supported: use ``MemoryEventStore``.
        synchronous: ``"FULL"`` (default) fsyncs every commit, so an acknowledged
            append survives power loss; ``"NORMAL"`` survives a process crash only.
        poll_interval: how often the store's one poller checks whether
            another process committed (``PRAGMA data_version``), waking only
            the tails of sessions that changed; appends in this process wake
            them at once. ``None`` disables it.
        busy_timeout: seconds to wait for another process's write lock.
        read_only: open the file read-only: nothing is created or written
            (no schema, no journal mode, no high-water mark, no ``-wal`` or
            ``-shm``, as root too), and ``append``/``delete`` raise
            :class:`UsageError`. A file closed cleanly (no ``-wal``) is opened
            immutable, as it stands; one with a ``-wal`` ``mode=ro``, through
            it (immutable where its ``-shm`` cannot be made). For a one-shot
            inspection: an immutable reader does not see later appends.

    Attributes:
        lost_commits: found when the store was opened: how many commits the
            file holds fewer than its high-water mark (``<path>-hwm``); 0 when
            it holds them all. Anything else is logged as an error at once.
    """

    shares_start_commit = True
    """A start's events are committed with its run's first batch (one fsync for a fast task)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
        poll_interval: float | None = 0.5,
        busy_timeout: float = 10.0,
        read_only: bool = False,
    ) -> None:
        self.path = os.fspath(path)
        self.read_only = read_only
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            raise UsageError("SqliteEventStore needs a file; use MemoryEventStore for memory")
        if synchronous not in ("FULL", "NORMAL"):
            raise UsageError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        high_water = HighWaterMark(self.path)
        writer: sqlite3.Connection | None = None
        try:
            writer = self._connect()
            if not read_only:
                writer.executescript(SCHEMA)
                add_chain_column(writer)
                add_last_seq_column(writer)
                self._indexed = ensure_index(writer)
            else:
                self._indexed = index_ready(writer)
            held = held_commits(writer)
        except sqlite3.Error as exc:
            if writer is not None:
                writer.close()
            if is_corruption(exc):
                raise DamagedStoreError(f"sqlite store {self.path!r} is damaged: {exc}") from exc
            raise StoreError(f"cannot open sqlite store {self.path!r}: {exc}") from exc
        recorded = high_water.read()
        self.lost_commits = max((recorded or 0) - held, 0)
        self._lost_note = (
            f"the file holds {held} commit(s) but its high-water mark says {recorded}: "
            f"{self.lost_commits} lost (the file was truncated, emptied or replaced, "
            "or WAL frames were dropped as damaged)"
        )
        if self.lost_commits:
            log.error(
                "sqlite store %r: %s; run 'helix-agents check' to see the damaged sessions",
                self.path,
                self._lost_note,
            )
        self._writes = GroupCommit(writer, self.path, high_water, self._committed)
        self._writes.indexed = self._indexed
        self._read_limiter: anyio.CapacityLimiter | None = None
        self._closed = False
        self._notifier = AppendNotifier(self._probe, poll_interval)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._active_reads = 0
        self._reads_idle: anyio.Event | None = None
        # Concurrent reads share worker-thread hops (a burst of streams opening).
        self._reads = BatchedCalls(self._run_reads, lanes=_READ_THREADS, max_batch=_READ_BATCH)
        self._changes = ChangeProbe(self._connect, self.path)
        self._loop_conn: sqlite3.Connection | None = None  # small reads on the loop's thread
        self._own_ends: dict[str, int] = {}  # watched session -> last seq we appended
        # Recently written session -> the seq our last commit left its log at
        # (a tail starting there needs no catch-up read); the oldest go first.
        self._ends: dict[str, int] = {}

    def _read_threads(self) -> anyio.CapacityLimiter:
        """The worker threads for reads, made on first use (commits have their own, one)."""
        if self._read_limiter is None:
            self._read_limiter = anyio.CapacityLimiter(_READ_THREADS)
        return self._read_limiter

    def _connect(self, busy_ms: int | None = None) -> sqlite3.Connection:
        if self.read_only:
            return connect_read_only(
                self.path, busy_ms=self._busy_ms if busy_ms is None else busy_ms
            )
        return connect(
            self.path,
            busy_ms=self._busy_ms if busy_ms is None else busy_ms,
            synchronous=self._synchronous,
        )

    # --- writes ---------------------------------------------------------------

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """Append ``events`` if the log ends at ``expected_seq`` (see ``EventStore.append``)."""
        if self._closed:
            raise StoreClosedError()
        self._ensure_writable()
        encoded, decoded = check_batch(session_id, events, expected_seq)
        op = Append(session_id, expected_seq, encoded, decoded)
        await self._writes.submit(op)
        return op.result

    async def delete(self, session_id: str) -> bool:
        """Delete a session's log; return whether it existed."""
        self._ensure_open()
        self._ensure_writable()
        validate_session_id(session_id)
        op = Delete(session_id)
        await self._writes.submit(op)
        return op.result > 0

    def _ensure_writable(self) -> None:
        if self.read_only:
            raise UsageError(f"sqlite store {self.path!r} was opened read-only")

    def _committed(self, op: Op) -> None:
        """A committed op reaches the tails, and the ends this store remembers."""
        ends = self._ends
        if isinstance(op, Append):
            ends.pop(op.session_id, None)  # to the back: the newest
            ends[op.session_id] = op.result
            if self._notifier.publish(op.session_id, op.events):  # a tail follows it
                self._own_ends[op.session_id] = op.result
        else:
            self._own_ends.pop(op.session_id, None)
            ends.pop(op.session_id, None)
            self._notifier.publish(op.session_id, [])
        while len(ends) > _KNOWN_ENDS:
            del ends[next(iter(ends))]  # the session written longest ago

    # --- reads ----------------------------------------------------------------

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _read_sync(
        self,
        session_id: str,
        from_seq: int,
        max_bytes: int | None = None,
        conn: sqlite3.Connection | None = None,
    ) -> tuple[list[Event], bool]:
        if self._closed:
            raise StoreClosedError()
        return read_events(
            self._reader if conn is None else lambda: conn,
            self.path,
            session_id,
            from_seq,
            max_bytes,
        )

    def _scalar_sync(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        if self._closed:
            raise StoreClosedError()
        try:
            return self._reader().execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path!r}: {exc}") from exc

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        """Return the events with seq > ``from_seq``."""
        self._ensure_open()
        validate_session_id(session_id)
        await anyio.lowlevel.checkpoint()  # a read is a checkpoint, however it is served
        self._ensure_open()
        found = self._read_here(session_id, from_seq)
        if found is None:
            found = await self._reads.call(session_id, from_seq)
        events: list[Event] = found[0]
        return events

    async def read_page(
        self, session_id: str, from_seq: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        """The events after ``from_seq``, about ``max_bytes`` of them, and whether more follow."""
        self._ensure_open()
        validate_session_id(session_id)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            raise UsageError(f"max_bytes must be an int >= 1, not {max_bytes!r}")
        await anyio.lowlevel.checkpoint()
        self._ensure_open()
        page = self._read_here(session_id, from_seq, max_bytes)
        if page is None:
            page = await self._reads.call(session_id, from_seq, max_bytes)
        return page

    async def _run_reads(self, reads: list[BatchedCall]) -> None:
        await self._in_thread(self._read_batch_sync, reads)

    def _read_batch_sync(self, reads: list[BatchedCall]) -> None:
        """Run on a worker thread: each read of the batch, its result or error kept apart."""
        for read in reads:
            try:
                read.result = self._read_sync(*read.args)
            except Exception as exc:
                read.error = exc

    def _read_here(
        self, session_id: str, from_seq: int, max_bytes: int | None = None
    ) -> tuple[list[Event], bool] | None:
        """A small read, done on the event loop's own thread; None: leave it to a worker.

        One look at the primary key says how many events follow ``from_seq``:
        none, or at most ``_INLINE_READ``, are read here at once (a worker
        thread's round trip costs more than such a read), and so is a page
        (``max_bytes``), however long the log. Its connection never waits
        for a lock: a busy file goes to a worker too.
        """
        if self._loop_conn is None:
            try:
                self._loop_conn = self._connect(busy_ms=0)
            except sqlite3.Error:
                return None
        conn = self._loop_conn
        try:
            found = conn.execute(
                "SELECT seq FROM helix_events WHERE session_id = ? ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
        except sqlite3.Error:
            return None  # busy, or damaged: a worker's read says which
        if found is None or found[0] <= from_seq:
            return [], False
        if max_bytes is None and found[0] - from_seq > _INLINE_READ:
            return None
        try:
            return self._read_sync(session_id, from_seq, max_bytes, conn)
        except StoreError as exc:
            if isinstance(exc.__cause__, sqlite3.OperationalError) and not isinstance(
                exc, DamagedLogError
            ):
                return None  # busy: a worker waits for the lock
            raise

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        """Run a read on a worker thread; ``close`` waits for reads under way."""
        self._active_reads += 1
        try:
            # Not abandoned on cancellation: the count must stay true while
            # the thread still uses its connection.
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._read_threads())
        finally:
            self._active_reads -= 1
            if self._active_reads == 0 and self._reads_idle is not None:
                self._reads_idle.set()

    def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        """Yield the events after ``from_seq`` (of ``kinds``, if given), then new ones."""
        return tail_events(
            self.read_page,
            self._notifier,
            session_id,
            from_seq,
            is_closed=lambda: self._closed,
            closed_error=StoreClosedError,
            ends_at=self._ends_at if self._notifier.polls else None,
            kinds=kinds,
        )

    def _ends_at(self, session_id: str, seq: int) -> bool:
        """Whether this store's own last commit to ``session_id`` left its log ending at ``seq``."""
        return self._ends.get(session_id) == seq

    async def _probe(self, sessions: list[str]) -> list[str]:
        """The store's poller: which watched sessions did another connection change?"""
        if self._closed:
            return []
        watched = set(sessions)
        for gone in [session for session in self._own_ends if session not in watched]:
            del self._own_ends[gone]
        # The worker thread gets a copy: appends go on meanwhile on this thread.
        # A session no tail watched when we last wrote it: the end that write left.
        own_ends = dict(self._own_ends)
        for session in sessions:
            if session not in own_ends and session in self._ends:
                own_ends[session] = self._ends[session]
        changed = await self._in_thread(self._probe_sync, sessions, own_ends)
        for session in changed:
            self._ends.pop(session, None)  # written elsewhere: a new tail must read
        return changed

    def _probe_sync(self, sessions: list[str], own_ends: dict[str, int]) -> list[str]:
        """One ``PRAGMA data_version`` when nothing changed; else each watched session's end.

        Runs on a worker thread, one probe at a time (there is one poller).
        A session that ends where this store's own last append left it is
        not reported: its tails have those events, from memory or from their
        catch-up read (an append made elsewhere before ours would show as a
        gap when ours reached them, and they re-read then). Any other session
        seen for the first time is reported (its tails re-read once): its
        baseline is taken after its tails' catch-up reads, and an append made
        elsewhere in between must not be missed.
        """
        if self._closed:
            return []
        return self._changes.changed(sessions, own_ends)

    async def list_sessions(self) -> list[str]:
        """Return every session id, sorted."""
        self._ensure_open()
        rows = await self._in_thread(
            self._scalar_sync, "SELECT session_id FROM helix_sessions ORDER BY session_id", ()
        )
        return [str(row[0]) for row in rows]

    async def session_heads(self) -> dict[str, int]:
        """Return every session's last seq, by id (one index probe per session, one query)."""
        self._ensure_open()
        rows = await self._in_thread(
            self._scalar_sync,
            "SELECT s.session_id, (SELECT MAX(e.seq) FROM helix_events e"
            " WHERE e.session_id = s.session_id) FROM helix_sessions s",
            (),
        )
        return {str(row[0]): int(row[1]) for row in rows if isinstance(row[1], int)}

    async def search_sessions(
        self, query: SessionQuery, *, before: tuple[float, str] | None, limit: int
    ) -> list[IndexedSession] | None:
        """The sessions matching ``query``, newest first, from the index (``index.py``).

        None when the file has no index (read-only on a file never indexed, or
        no FTS5 in this SQLite): the session list then folds the logs.
        """
        self._ensure_open()
        if not self._indexed:
            return None
        sql, params = search_sql(query, before, limit)
        rows = await self._in_thread(self._scalar_sync, sql, tuple(params))
        return [
            IndexedSession(str(row[0]), float(row[1]), int(row[2]))  # type: ignore[arg-type]
            for row in rows
            if isinstance(row[2], int)
        ]

    async def check_storage(self) -> list[tuple[str | None, str]]:
        """Damage beyond single logs, as (session or None, one line): for ``check_store``.

        Lost commits (found at open), SQLite's ``PRAGMA quick_check`` of the
        file, and sessions that have events but are missing from the list.
        """
        self._ensure_open()
        return await self._in_thread(self._check_storage_sync)

    def _check_storage_sync(self) -> list[tuple[str | None, str]]:
        if self._closed:
            raise StoreClosedError()
        found: list[tuple[str | None, str]] = []
        if self.lost_commits:
            found.append((None, self._lost_note))
        found.extend(storage_problems(self._reader()))
        return found

    # --- lifecycle ------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    _memory: SqliteMemoryStore | None = None

    def memory_store(self) -> SqliteMemoryStore:
        """Its memory store (``helix_agents.memory``): a table of the same file, closed with it.

        A read-only store offers none (``UsageError``: nothing is written to its file).
        """
        self._ensure_writable()
        if self._memory is None:
            self._memory = SqliteMemoryStore(self.path, busy_timeout=self._busy_ms / 1000)
        return self._memory

    async def close(self) -> None:
        """Wait for appends under way, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._memory is not None:
            await self._memory.close()
        self._notifier.close()
        await self._writes.wait_idle()
        while self._active_reads:
            self._reads_idle = anyio.Event()
            await self._reads_idle.wait()
        self._writes.close()
        self._changes.close()
        if self._loop_conn is not None:
            self._loop_conn.close()
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()

    def __repr__(self) -> str:
        state = " closed" if self._closed else ""
        return f"<SqliteEventStore path={self.path!r}{state}>"

    async def __aenter__(self) -> SqliteEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
