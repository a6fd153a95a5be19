"""``SqliteEventStore``: the embedded default store (one file, WAL, group commit).

Group commit without a background task: appenders queue their batch; the first
to find no commit under way becomes the *leader*, commits everything queued in
one transaction on a worker thread, wakes the others, and repeats until the
queue is empty. Concurrent appends from many sessions thus share one
transaction and one fsync, while compare-and-append is still checked per
request inside that transaction, against the ``sessions`` table, so it holds
even with several processes writing one file. A leader that is cancelled hands
leadership to the next waiter; a waiter cancelled before its batch was taken
removes it, so a cancelled append was written only if the batch had already
been taken.
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
    ConcurrencyConflict,
    DamagedLogError,
    DamagedStoreError,
    StoreClosedError,
    StoreError,
    UsageError,
)
from helix_agents.events import EVENT_TYPES, Event
from helix_agents.ids import validate_session_id

from ._batched import BatchedCall, BatchedCalls
from ._chain import chain_of, verified_events
from ._common import AppendNotifier, check_batch, tail_events

__all__ = ["SqliteEventStore"]

T = TypeVar("T")

log = logging.getLogger("helix_agents.stores")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    ts REAL NOT NULL,
    data BLOB NOT NULL,
    chain INTEGER,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS helix_sessions (
    session_id TEXT PRIMARY KEY
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS helix_meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
"""

_TAGS: dict[type, str] = {cls: str(cls.__struct_config__.tag) for cls in EVENT_TYPES}

_Row = tuple[str, int, str, float, bytes]
_StoredRow = tuple[str, int, str, float, bytes, int]  # with its chain


class _Op:
    """A queued write; ``wake`` is set when it is done or when it is promoted to leader."""

    __slots__ = ("done", "error", "promoted", "result", "session_id", "wake")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.wake = anyio.Event()
        self.promoted = False
        self.done = False
        self.result = 0
        self.error: BaseException | None = None


class _Append(_Op):
    __slots__ = ("events", "expected_seq", "rows")

    def __init__(
        self, session_id: str, expected_seq: int, rows: list[_Row], events: Sequence[Event]
    ) -> None:
        super().__init__(session_id)
        self.expected_seq = expected_seq
        self.rows = rows
        self.events = events


class _Delete(_Op):
    __slots__ = ()


_SQLITE_MAX_INT = 2**63 - 1
_MAX_BATCH = 1000  # bounds one transaction; the rest waits for the next leader
_MAX_CACHED_SESSIONS = 100_000
_KNOWN_ENDS = 10_000  # sessions whose end this store remembers (for tails starting there)
_READ_THREADS = 40  # worker threads reading at once (each with its own connection)
_INLINE_READ = 512  # events a read may return to be done on the event loop's thread
_READ_BATCH = 64  # reads one worker thread takes in one hop (see _batched.py)
_PROBE_CHUNK = 500  # session ids per poller query (SQLite's bound on parameters is 32,766)


class _LastSeqCache:
    """Each session's last seq and chain, as of our last commit; used only on the writer thread.

    ``PRAGMA data_version`` changes exactly when *another* connection commits
    to the file, so one cheap read per transaction tells whether the cache
    still holds; if not, it is dropped and rebuilt from the primary key.
    """

    __slots__ = ("ends", "version")

    def __init__(self) -> None:
        self.ends: dict[str, tuple[int, int | None]] = {}
        self.version: int | None = None

    def validate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self.version or len(self.ends) > _MAX_CACHED_SESSIONS:
            self.ends.clear()
            self.version = version

    def get(self, conn: sqlite3.Connection, session_id: str) -> tuple[int, int | None]:
        """The session's last seq (0 for none) and that event's chain."""
        end = self.ends.get(session_id)
        if end is None:
            found = conn.execute(
                "SELECT seq, chain FROM helix_events WHERE session_id = ? "
                "ORDER BY seq DESC LIMIT 1",
                (session_id,),
            ).fetchone()
            end = self.ends[session_id] = (found[0], found[1]) if found else (0, None)
        return end


def _apply_batch(conn: sqlite3.Connection, cache: _LastSeqCache, batch: list[_Op]) -> bool:
    """Apply a batch inside an open write transaction; whether it changed anything.

    Compare-and-append is decided in order against the last-seq cache (so two
    appends to one session in one batch see each other), each accepted row is
    chained to its predecessor, and the rows go in with one ``executemany``.
    ``helix_sessions`` only lists sessions, so it is written when a session is
    created, not per append. A delete first flushes the rows accepted before
    it. The caller drops the cache if the transaction does not commit.
    """
    cache.validate(conn)
    ends = cache.ends
    rows: list[_StoredRow] = []
    created: list[tuple[str]] = []
    changed = False
    for op in batch:
        if isinstance(op, _Append):
            actual, chain = cache.get(conn, op.session_id)
            if actual != op.expected_seq:
                op.error = ConcurrencyConflict(op.session_id, op.expected_seq, actual)
                continue
            for session_id, seq, tag, ts, data in op.rows:
                chain = chain_of(chain, data)
                rows.append((session_id, seq, tag, ts, data, chain))
            if actual == 0:
                created.append((op.session_id,))
            op.result = op.expected_seq + len(op.rows)
            ends[op.session_id] = (op.result, chain)
            changed = True
        else:
            _flush(conn, rows, created)
            rows, created = [], []
            op.result = conn.execute(
                "DELETE FROM helix_sessions WHERE session_id = ?", (op.session_id,)
            ).rowcount
            conn.execute("DELETE FROM helix_events WHERE session_id = ?", (op.session_id,))
            ends[op.session_id] = (0, None)
            changed = changed or op.result > 0
    _flush(conn, rows, created)
    return changed


def _insert_sql(count: int) -> str:
    return "INSERT INTO helix_events (session_id, seq, type, ts, data, chain) VALUES " + ",".join(
        ["(?, ?, ?, ?, ?, ?)"] * count
    )


_INSERT_ROWS = [_insert_sql(1 << power) for power in range(9)]  # 1, 2, 4 ... 256 rows


def _flush(conn: sqlite3.Connection, rows: list[_StoredRow], created: list[tuple[str]]) -> None:
    """Insert ``rows`` a few statements at a time, not one statement per row.

    ``executemany`` steps once per row, and each step hands the GIL over and
    back: on a busy event loop that is a wait per row. One statement of
    many rows steps once; the counts are powers of two (at most 256 rows, 1,536
    parameters), so a handful of statements serve every batch from the cache.
    """
    start = 0
    while start < len(rows):
        power = min((len(rows) - start).bit_length() - 1, len(_INSERT_ROWS) - 1)
        count = 1 << power
        conn.execute(
            _INSERT_ROWS[power], [value for row in rows[start : start + count] for value in row]
        )
        start += count
    if created:
        conn.executemany("INSERT OR IGNORE INTO helix_sessions VALUES (?)", created)


def _is_corruption(exc: sqlite3.Error) -> bool:
    """Whether SQLite found the file itself damaged (not busy, not a misuse)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


_RETURNING = sqlite3.sqlite_version_info >= (3, 35)  # UPSERT ... RETURNING


def _count_commit(conn: sqlite3.Connection) -> int:
    """Add one to the file's commit counter (inside the transaction); the new count."""
    if _RETURNING:  # one statement, not three
        counted: int = conn.execute(
            "INSERT INTO helix_meta VALUES ('commits', 1) "
            "ON CONFLICT (key) DO UPDATE SET value = value + 1 RETURNING value"
        ).fetchone()[0]
        return counted
    conn.execute("INSERT OR IGNORE INTO helix_meta VALUES ('commits', 0)")
    conn.execute("UPDATE helix_meta SET value = value + 1 WHERE key = 'commits'")
    count: int = conn.execute("SELECT value FROM helix_meta WHERE key = 'commits'").fetchone()[0]
    return count


def _held_commits(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT value FROM helix_meta WHERE key = 'commits'").fetchone()
    return int(row[0]) if row else 0


def _add_chain_column(conn: sqlite3.Connection) -> None:
    """Files written before chains existed get the column (their rows stay unchained)."""

    def has_chain() -> bool:
        return any(row[1] == "chain" for row in conn.execute("PRAGMA table_info(helix_events)"))

    if has_chain():
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not has_chain():  # another process may have added it meanwhile
            conn.execute("ALTER TABLE helix_events ADD COLUMN chain INTEGER")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


class _HighWaterMark:
    """The file's commit count as last seen by a writer, kept beside it in ``<file>-hwm``.

    Written after each commit (not fsynced: it may lag, never lead, unless the
    database itself lost commits). A database holding fewer commits than its
    high-water mark lost some: a truncated, emptied or replaced file, or WAL
    frames dropped as damaged.
    """

    __slots__ = ("_failed", "_fd", "path")

    def __init__(self, database: str) -> None:
        self.path = f"{database}-hwm"
        self._fd: int | None = None
        self._failed = False

    def read(self) -> int | None:
        """The recorded count; None when there is none (a new or older store) or it is garbled."""
        try:
            with open(self.path, "rb") as file:
                text = file.read(64).strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read the high-water mark %s: %s", self.path, exc)
            return None
        return int(text) if text.isdigit() else None

    def record(self, commits: int) -> None:
        """Write the count (fixed width, in place); a failure is logged once, never raised."""
        if self._failed:
            return
        try:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            os.pwrite(self._fd, b"%020d\n" % commits, 0)
        except OSError as exc:
            self._failed = True
            log.warning("cannot keep the high-water mark %s: %s", self.path, exc)

    def close(self) -> None:
        """Close the file if it was opened."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


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
    ) -> None:
        self.path = os.fspath(path)
        if self.path == ":memory:" or self.path.startswith("file::memory:"):
            raise UsageError("SqliteEventStore needs a file; use MemoryEventStore for memory")
        if synchronous not in ("FULL", "NORMAL"):
            raise UsageError(f"synchronous must be 'FULL' or 'NORMAL', not {synchronous!r}")
        self._synchronous = synchronous
        self._busy_ms = int(busy_timeout * 1000)
        self._high_water = _HighWaterMark(self.path)
        writer: sqlite3.Connection | None = None
        try:
            writer = self._connect()
            writer.executescript(_SCHEMA)
            _add_chain_column(writer)
            held = _held_commits(writer)
        except sqlite3.Error as exc:
            if writer is not None:
                writer.close()
            if _is_corruption(exc):
                raise DamagedStoreError(f"sqlite store {self.path!r} is damaged: {exc}") from exc
            raise StoreError(f"cannot open sqlite store {self.path!r}: {exc}") from exc
        self._writer = writer
        recorded = self._high_water.read()
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
        self._queue: list[_Op] = []
        self._thread_limiters: tuple[anyio.CapacityLimiter, anyio.CapacityLimiter] | None = None
        self._cache = _LastSeqCache()
        self._leading = False
        self._leading_task_active = False
        self._idle: anyio.Event | None = None
        self._closed = False
        self._notifier = AppendNotifier(self._probe, poll_interval)
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._active_reads = 0
        self._reads_idle: anyio.Event | None = None
        # Concurrent reads share worker-thread hops (a burst of streams opening).
        self._reads = BatchedCalls(self._run_reads, lanes=_READ_THREADS, max_batch=_READ_BATCH)
        # The poller's own connection: data_version is per connection.
        self._poll_conn: sqlite3.Connection | None = None
        self._loop_conn: sqlite3.Connection | None = None  # small reads on the loop's thread
        self._poll_version: int | None = None
        self._poll_seen: dict[str, int] = {}  # watched session -> last seq the poller saw
        self._own_ends: dict[str, int] = {}  # watched session -> last seq we appended
        # Recently written session -> the seq our last commit left its log at
        # (a tail starting there needs no catch-up read); the oldest go first.
        self._ends: dict[str, int] = {}

    def _limiters(self) -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        """The worker threads for commits (one) and for reads, made on first use.

        Limits of their own, not anyio's shared one: a commit never queues
        behind a burst of reads (hundreds of streams opening at once), so
        the chunks of running sessions keep flowing meanwhile.
        """
        if self._thread_limiters is None:
            self._thread_limiters = (
                anyio.CapacityLimiter(1),
                anyio.CapacityLimiter(_READ_THREADS),
            )
        return self._thread_limiters

    def _connect(self, busy_ms: int | None = None) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms if busy_ms is None else busy_ms}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        return conn

    # --- writes ---------------------------------------------------------------

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        """Append ``events`` if the log ends at ``expected_seq`` (see ``EventStore.append``)."""
        self._ensure_open()
        encoded, decoded = check_batch(session_id, events, expected_seq)
        rows: list[_Row] = [
            (session_id, event.seq, _TAGS[type(event)], event.ts, data)
            for event, data in zip(decoded, encoded, strict=True)
        ]
        op = _Append(session_id, expected_seq, rows, decoded)
        await self._submit(op)
        return op.result

    async def delete(self, session_id: str) -> bool:
        """Delete a session's log; return whether it existed."""
        self._ensure_open()
        validate_session_id(session_id)
        op = _Delete(session_id)
        await self._submit(op)
        return op.result > 0

    async def _submit(self, op: _Op) -> None:
        self._queue.append(op)
        if self._leading:
            try:
                await op.wake.wait()
            except BaseException:
                self._withdraw(op)
                raise
            if not op.promoted:
                self._raise_for(op)
                return
        try:
            await self._lead()
        except BaseException:
            self._withdraw(op)
            raise
        self._raise_for(op)

    def _withdraw(self, op: _Op) -> None:
        """Called when ``op``'s caller is cancelled: make sure it is written or forgotten."""
        if op.done:
            return
        if op in self._queue:
            self._queue.remove(op)  # never taken, so never written
        if op.promoted and not self._leading_task_active:
            self._hand_over()

    async def _lead(self) -> None:
        """Commit one batch (it holds the leader's own op), then pass leadership on.

        One batch per leader keeps appends fair: no caller keeps leading while
        others keep appending.
        """
        self._leading = True
        self._leading_task_active = True
        try:
            # Let the appenders woken by the previous commit queue up first, so
            # they share this commit instead of trailing one by one.
            await anyio.lowlevel.checkpoint()
            cap = _MAX_BATCH
            batch, self._queue = self._queue[:cap], self._queue[cap:]
            if batch:
                # A taken batch always commits: its appenders wait for this very
                # commit, and a cancellation arriving before the worker thread
                # starts must not let them return "done" for a batch never written.
                # The leader sees its cancellation right after.
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(self._commit, batch, limiter=self._limiters()[0])
                ends = self._ends
                for op in batch:
                    op.done = True
                    op.wake.set()
                    if op.error is None:
                        if isinstance(op, _Append):
                            if self._notifier.is_watched(op.session_id):
                                self._own_ends[op.session_id] = op.result
                            ends.pop(op.session_id, None)  # to the back: the newest
                            ends[op.session_id] = op.result
                            self._notifier.publish(op.session_id, op.events)
                        else:
                            self._own_ends.pop(op.session_id, None)
                            ends.pop(op.session_id, None)
                            self._notifier.publish(op.session_id, [])
                while len(ends) > _KNOWN_ENDS:
                    del ends[next(iter(ends))]  # the session written longest ago
        finally:
            self._leading_task_active = False
            self._hand_over()

    def _hand_over(self) -> None:
        if self._queue:
            successor = self._queue[0]
            successor.promoted = True
            successor.wake.set()
            return
        self._leading = False
        if self._idle is not None:
            self._idle.set()

    def _commit(self, batch: list[_Op]) -> None:
        """Run on a worker thread: apply every op of the batch in one transaction."""
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                commits = _count_commit(conn) if _apply_batch(conn, self._cache, batch) else 0
                conn.execute("COMMIT")
            except BaseException:
                self._cache = _LastSeqCache()
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if commits:
                self._high_water.record(commits)
        except sqlite3.Error as exc:
            for op in batch:
                error = StoreError(f"sqlite store {self.path!r}: {exc}")
                error.__cause__ = exc
                op.error = error
                op.result = 0

    @staticmethod
    def _raise_for(op: _Op) -> None:
        if op.error is not None:
            raise op.error

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
        self, session_id: str, from_seq: int, conn: sqlite3.Connection | None = None
    ) -> list[Event]:
        if self._closed:
            raise StoreClosedError()
        if from_seq >= _SQLITE_MAX_INT:
            return []  # nothing can come after the largest seq SQLite holds
        from_seq = max(from_seq, 0)
        try:
            # From from_seq itself, so the first event's chain can be checked
            # against its predecessor's.
            records: list[tuple[int, bytes, int | None]] = (
                (conn or self._reader())
                .execute(
                    "SELECT seq, data, chain FROM helix_events WHERE session_id = ? AND seq >= ? "
                    "ORDER BY seq",
                    (session_id, from_seq),
                )
                .fetchall()
            )
        except sqlite3.DatabaseError as exc:
            if _is_corruption(exc):
                raise DamagedLogError(
                    session_id, from_seq + 1, "the database file is damaged (SQLITE_CORRUPT)"
                ) from exc
            raise StoreError(f"sqlite store {self.path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path!r}: {exc}") from exc
        previous: int | None = None
        if from_seq > 0 and records:
            if records[0][0] != from_seq:
                # Events follow from_seq but from_seq itself is gone.
                raise DamagedLogError(session_id, from_seq, "gap: the event is missing")
            previous = records[0][2]
            records = records[1:]
        return verified_events(session_id, from_seq + 1, previous, records)

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
        events = self._read_here(session_id, from_seq)
        if events is not None:
            return events
        read: list[Event] = await self._reads.call(session_id, from_seq)
        return read

    async def _run_reads(self, reads: list[BatchedCall]) -> None:
        await self._in_thread(self._read_batch_sync, reads)

    def _read_batch_sync(self, reads: list[BatchedCall]) -> None:
        """Run on a worker thread: each read of the batch, its result or error kept apart."""
        for read in reads:
            try:
                read.result = self._read_sync(*read.args)
            except Exception as exc:
                read.error = exc

    def _read_here(self, session_id: str, from_seq: int) -> list[Event] | None:
        """A small read, done on the event loop's own thread; None: leave it to a worker.

        One look at the primary key says how many events follow ``from_seq``:
        none, or at most ``_INLINE_READ``, are read here at once (a worker
        thread's round trip costs more than such a read). Its connection
        never waits for a lock: a busy file goes to a worker too.
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
        if found is None:
            return []
        if found[0] - from_seq > _INLINE_READ:
            return None
        try:
            return self._read_sync(session_id, from_seq, conn)
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
            return await anyio.to_thread.run_sync(fn, *args, limiter=self._limiters()[1])
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
            self.read,
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
        try:
            if self._poll_conn is None:
                self._poll_conn = self._connect()
            conn = self._poll_conn
            # Read the version before the ends: a commit after this read shows
            # up as a new version at the next probe.
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            seen = self._poll_seen
            watched = set(sessions)
            for gone in [session for session in seen if session not in watched]:
                del seen[gone]
            if version == self._poll_version:
                asked = [session for session in sessions if session not in seen]
            else:
                asked = sessions
            self._poll_version = version
            ends: dict[str, int] = {}
            for start in range(0, len(asked), _PROBE_CHUNK):
                chunk = asked[start : start + _PROBE_CHUNK]
                marks = ",".join("?" * len(chunk))
                ends.update(
                    conn.execute(
                        "SELECT session_id, MAX(seq) FROM helix_events "
                        f"WHERE session_id IN ({marks}) GROUP BY session_id",
                        chunk,
                    ).fetchall()
                )
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path!r}: {exc}") from exc
        changed: list[str] = []
        for session in asked:
            end = ends.get(session, 0)
            if (session not in seen or seen[session] != end) and own_ends.get(session) != end:
                changed.append(session)
            seen[session] = end
        return changed

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
        conn = self._reader()
        try:
            for (line,) in conn.execute("PRAGMA quick_check(10)").fetchall():
                if line != "ok":
                    found.append((None, f"the database file is damaged: {line}"))
            unlisted = conn.execute(
                "SELECT DISTINCT session_id FROM helix_events WHERE session_id NOT IN "
                "(SELECT session_id FROM helix_sessions) ORDER BY session_id"
            ).fetchall()
        except sqlite3.DatabaseError as exc:
            found.append((None, f"the database file is damaged: {exc}"))
            return found
        for (session_id,) in unlisted:
            found.append(
                (str(session_id), f"session {session_id!r} has events but is not in the list")
            )
        return found

    # --- lifecycle ------------------------------------------------------------

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    async def close(self) -> None:
        """Wait for appends under way, then close every connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._notifier.close()
        while self._leading:
            self._idle = anyio.Event()
            await self._idle.wait()
        while self._active_reads:
            self._reads_idle = anyio.Event()
            await self._reads_idle.wait()
        self._writer.close()
        self._high_water.close()
        if self._poll_conn is not None:
            self._poll_conn.close()
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
