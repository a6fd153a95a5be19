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

import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Literal, TypeVar

import anyio
import anyio.lowlevel

from helix_agents.codec import decode_event, decode_events
from helix_agents.errors import (
    ConcurrencyConflict,
    EventDecodeError,
    StoreClosedError,
    StoreError,
    UsageError,
)
from helix_agents.events import EVENT_TYPES, Event
from helix_agents.ids import validate_session_id

from ._common import AppendNotifier, check_batch, tail_events

__all__ = ["SqliteEventStore"]

T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_events (
    session_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    ts REAL NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (session_id, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS helix_sessions (
    session_id TEXT PRIMARY KEY
) WITHOUT ROWID;
"""

_TAGS: dict[type, str] = {cls: str(cls.__struct_config__.tag) for cls in EVENT_TYPES}

_Row = tuple[str, int, str, float, bytes]


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


class _LastSeqCache:
    """Each session's last seq, as of our last commit; used only on the writer thread.

    ``PRAGMA data_version`` changes exactly when *another* connection commits
    to the file, so one cheap read per transaction tells whether the cache
    still holds; if not, it is dropped and rebuilt from the primary key.
    """

    __slots__ = ("seqs", "version")

    def __init__(self) -> None:
        self.seqs: dict[str, int] = {}
        self.version: int | None = None

    def validate(self, conn: sqlite3.Connection) -> None:
        version = conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self.version or len(self.seqs) > _MAX_CACHED_SESSIONS:
            self.seqs.clear()
            self.version = version

    def get(self, conn: sqlite3.Connection, session_id: str) -> int:
        seq = self.seqs.get(session_id)
        if seq is None:
            found = conn.execute(
                "SELECT MAX(seq) FROM helix_events WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
            seq = self.seqs[session_id] = found or 0
        return seq


def _apply_batch(conn: sqlite3.Connection, cache: _LastSeqCache, batch: list[_Op]) -> None:
    """Apply a batch inside an open write transaction.

    Compare-and-append is decided in order against the last-seq cache (so two
    appends to one session in one batch see each other), and the accepted rows
    go in with one ``executemany``. ``helix_sessions`` only lists sessions, so
    it is written when a session is created, not per append. A delete first
    flushes the rows accepted before it. The caller drops the cache if the
    transaction does not commit.
    """
    cache.validate(conn)
    seqs = cache.seqs
    rows: list[_Row] = []
    created: list[tuple[str]] = []
    for op in batch:
        if isinstance(op, _Append):
            actual = cache.get(conn, op.session_id)
            if actual != op.expected_seq:
                op.error = ConcurrencyConflict(op.session_id, op.expected_seq, actual)
                continue
            rows.extend(op.rows)
            if actual == 0:
                created.append((op.session_id,))
            op.result = seqs[op.session_id] = op.expected_seq + len(op.rows)
        else:
            _flush(conn, rows, created)
            rows, created = [], []
            op.result = conn.execute(
                "DELETE FROM helix_sessions WHERE session_id = ?", (op.session_id,)
            ).rowcount
            conn.execute("DELETE FROM helix_events WHERE session_id = ?", (op.session_id,))
            seqs[op.session_id] = 0
    _flush(conn, rows, created)


def _flush(conn: sqlite3.Connection, rows: list[_Row], created: list[tuple[str]]) -> None:
    if rows:
        conn.executemany("INSERT INTO helix_events VALUES (?, ?, ?, ?, ?)", rows)
    if created:
        conn.executemany("INSERT OR IGNORE INTO helix_sessions VALUES (?)", created)


def _bad_seq(rows: list[tuple[int, bytes]]) -> int | None:
    """The seq of the first row that does not decode to one event."""
    for seq, data in rows:
        try:
            decode_event(data)
        except EventDecodeError:
            return seq
    return None


class SqliteEventStore:
    """A durable :class:`~helix_agents.EventStore` in one SQLite file.

    Args:
        path: the database file (created if missing). ``":memory:"`` is not
            supported: use ``MemoryEventStore``.
        synchronous: ``"FULL"`` (default) fsyncs every commit, so an acknowledged
            append survives power loss; ``"NORMAL"`` survives a process crash only.
        poll_interval: how often an idle ``tail`` re-reads, to see appends made
            by other processes (appends in this process wake it at once);
            ``None`` disables polling.
        busy_timeout: seconds to wait for another process's write lock.
    """

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
        self._poll_interval = poll_interval
        try:
            self._writer = self._connect()
            self._writer.executescript(_SCHEMA)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open sqlite store {self.path!r}: {exc}") from exc
        self._queue: list[_Op] = []
        self._cache = _LastSeqCache()
        self._leading = False
        self._leading_task_active = False
        self._idle: anyio.Event | None = None
        self._closed = False
        self._notifier = AppendNotifier()
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._active_reads = 0
        self._reads_idle: anyio.Event | None = None

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
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
                    await anyio.to_thread.run_sync(self._commit, batch)
                for op in batch:
                    op.done = True
                    op.wake.set()
                    if op.error is None:
                        published = op.events if isinstance(op, _Append) else []
                        self._notifier.publish(op.session_id, published)
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
                _apply_batch(conn, self._cache, batch)
                conn.execute("COMMIT")
            except BaseException:
                self._cache = _LastSeqCache()
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
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

    def _read_sync(self, session_id: str, from_seq: int) -> list[Event]:
        if self._closed:
            raise StoreClosedError()
        if from_seq >= _SQLITE_MAX_INT:
            return []  # nothing can come after the largest seq SQLite holds
        try:
            rows = (
                self._reader()
                .execute(
                    "SELECT seq, data FROM helix_events WHERE session_id = ? AND seq > ? "
                    "ORDER BY seq",
                    (session_id, from_seq),
                )
                .fetchall()
            )
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite store {self.path!r}: {exc}") from exc
        try:
            return decode_events([row[1] for row in rows])
        except EventDecodeError as exc:
            seq = _bad_seq(rows)
            raise EventDecodeError(
                f"session {session_id!r} seq {seq} in {self.path!r}: {exc.message}"
            ) from exc

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
        return await self._in_thread(self._read_sync, session_id, from_seq)

    async def _in_thread(self, fn: Callable[..., T], *args: object) -> T:
        """Run a read on a worker thread; ``close`` waits for reads under way."""
        self._active_reads += 1
        try:
            # Not abandoned on cancellation: the count must stay true while
            # the thread still uses its connection.
            return await anyio.to_thread.run_sync(fn, *args)
        finally:
            self._active_reads -= 1
            if self._active_reads == 0 and self._reads_idle is not None:
                self._reads_idle.set()

    def tail(self, session_id: str, from_seq: int = 0) -> AsyncIterator[Event]:
        """Yield the events after ``from_seq``, then new ones as they are appended."""
        return tail_events(
            self.read,
            self._notifier,
            session_id,
            from_seq,
            poll_interval=self._poll_interval,
            is_closed=lambda: self._closed,
            closed_error=StoreClosedError,
        )

    async def list_sessions(self) -> list[str]:
        """Return every session id, sorted."""
        self._ensure_open()
        rows = await self._in_thread(
            self._scalar_sync, "SELECT session_id FROM helix_sessions ORDER BY session_id", ()
        )
        return [str(row[0]) for row in rows]

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
        with self._readers_lock:
            readers, self._readers = self._readers, []
        for conn in readers:
            conn.close()

    async def __aenter__(self) -> SqliteEventStore:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()
