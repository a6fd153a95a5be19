"""Group commit: the SQLite store's one writer.

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

import sqlite3
from collections.abc import Callable, Sequence

import anyio
import anyio.lowlevel

from helix_agents.errors import ConcurrencyConflict, StoreError
from helix_agents.events import EVENT_TYPES, Event
from helix_agents.stores.chain import chain_of

from .index import drop_session, index_batch
from .integrity import HighWaterMark, count_commit

__all__ = ["Append", "Delete", "GroupCommit", "LastSeqCache", "Op"]

_MAX_BATCH = 1000  # bounds one transaction; the rest waits for the next leader
_MAX_CACHED_SESSIONS = 100_000

_TAGS: dict[type, str] = {cls: str(cls.__struct_config__.tag) for cls in EVENT_TYPES}

_COLUMNS = 6  # a stored row: session_id, seq, type, ts, data, chain


class Op:
    """A queued write; ``wake`` is set when it is done or when it is promoted to leader."""

    __slots__ = ("done", "error", "promoted", "result", "session_id", "wake")

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.wake = anyio.Event()
        self.promoted = False
        self.done = False
        self.result = 0
        self.error: BaseException | None = None


class Append(Op):
    """An append: its events (as decoded back, to publish once committed) and their encodings.

    The rows are built on the writer's thread, from these two.
    """

    __slots__ = ("encoded", "events", "expected_seq")

    def __init__(
        self, session_id: str, expected_seq: int, encoded: list[bytes], events: Sequence[Event]
    ) -> None:
        # Op's fields set here, not through super().__init__: one call less per append.
        self.session_id = session_id
        self.wake = anyio.Event()
        self.promoted = False
        self.done = False
        self.result = 0
        self.error = None
        self.expected_seq = expected_seq
        self.encoded = encoded
        self.events = events


class Delete(Op):
    __slots__ = ()


class LastSeqCache:
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


def apply_batch(
    conn: sqlite3.Connection, cache: LastSeqCache, batch: list[Op], *, indexed: bool = True
) -> bool:
    """Apply a batch inside an open write transaction; whether it changed anything.

    Compare-and-append is decided in order against the last-seq cache (so two
    appends to one session in one batch see each other), each accepted row is
    chained to its predecessor, and the rows go in a few multi-row INSERTs.
    ``helix_sessions`` lists sessions with the last seq committed to each
    (its high-water mark: a log found ending before it lost its tail), set
    once per session per batch. The session index (``index.py``) is
    written alongside, in the same transaction. A delete first flushes the
    rows accepted before it. The caller drops the cache if the transaction
    does not commit.
    """
    cache.validate(conn)
    ends = cache.ends
    rows: list[object] = []  # the accepted rows' values, one row after another
    created: list[tuple[str]] = []
    last: dict[str, int] = {}  # session -> the seq this batch leaves its log at
    changed = False
    for op in batch:
        if isinstance(op, Append):
            actual, chain = cache.get(conn, op.session_id)
            if actual != op.expected_seq:
                op.error = ConcurrencyConflict(op.session_id, op.expected_seq, actual)
                continue
            session_id = op.session_id
            for event, data in zip(op.events, op.encoded, strict=True):
                chain = chain_of(chain, data)
                rows += (session_id, event.seq, _TAGS[type(event)], event.ts, data, chain)
            if actual == 0:
                created.append((session_id,))
            if indexed:
                index_batch(conn, session_id, op.events, created=actual == 0)
            op.result = op.expected_seq + len(op.encoded)
            ends[op.session_id] = (op.result, chain)
            last[session_id] = op.result
            changed = True
        else:
            _flush(conn, rows, created, last)
            rows, created, last = [], [], {}
            op.result = conn.execute(
                "DELETE FROM helix_sessions WHERE session_id = ?", (op.session_id,)
            ).rowcount
            conn.execute("DELETE FROM helix_events WHERE session_id = ?", (op.session_id,))
            if indexed:
                drop_session(conn, op.session_id)
            ends[op.session_id] = (0, None)
            changed = changed or op.result > 0
    _flush(conn, rows, created, last)
    return changed


def _insert_sql(count: int) -> str:
    """One INSERT of ``count`` rows, ``OR FAIL``: no statement journal (see below).

    A plain (``ABORT``) statement that writes several rows must be able to
    undo just itself, so SQLite copies every page it touches into a statement
    journal first: a temporary file past 64 KiB, which doubled the writes of a
    commit. ``OR FAIL`` keeps the rows a failing statement already wrote; that
    is safe here because no transaction goes on after a failed statement: the
    writer rolls the whole transaction back (``GroupCommit._commit``).
    """
    return "INSERT OR FAIL INTO helix_events (session_id, seq, type, ts, data, chain) VALUES " + (
        ",".join(["(?, ?, ?, ?, ?, ?)"] * count)
    )


_INSERT_ROWS = [_insert_sql(1 << power) for power in range(9)]  # 1, 2, 4 ... 256 rows


def _flush(
    conn: sqlite3.Connection,
    rows: list[object],
    created: list[tuple[str]],
    last: dict[str, int],
) -> None:
    """Insert ``rows`` (``_COLUMNS`` values a row) a few statements at a time, not one per row.

    ``executemany`` steps once per row, and each step hands the GIL over and
    back: on a busy event loop that is a wait per row. One statement of
    many rows steps once; the counts are powers of two (at most 256 rows, 1,536
    parameters), so a handful of statements serve every batch from the cache.
    """
    start, total = 0, len(rows) // _COLUMNS
    while start < total:
        power = min((total - start).bit_length() - 1, len(_INSERT_ROWS) - 1)
        count = 1 << power
        conn.execute(_INSERT_ROWS[power], rows[start * _COLUMNS : (start + count) * _COLUMNS])
        start += count
    if created:
        conn.executemany("INSERT OR IGNORE INTO helix_sessions (session_id) VALUES (?)", created)
    if last:
        conn.executemany(
            "UPDATE helix_sessions SET last_seq = ? WHERE session_id = ?",
            [(seq, session_id) for session_id, seq in last.items()],
        )


class GroupCommit:
    """The store's writer: queued appends and deletes, committed a batch per transaction.

    ``committed`` is called on the event loop's thread for each op of a
    batch that committed without error, right after its caller is woken.
    """

    def __init__(
        self,
        writer: sqlite3.Connection,
        path: str,
        high_water: HighWaterMark,
        committed: Callable[[Op], None],
    ) -> None:
        self._writer = writer
        self.path = path
        self._high_water = high_water
        self._committed = committed
        self._queue: list[Op] = []
        self._limiter: anyio.CapacityLimiter | None = None
        self._cache = LastSeqCache()
        self.indexed = True  # whether batches write the session index too (index.py)
        self.leading = False
        self._leading_task_active = False
        self._idle: anyio.Event | None = None

    def thread_limiter(self) -> anyio.CapacityLimiter:
        """The one worker thread commits run on, a limit of its own (made on first use).

        Not anyio's shared limit: a commit never queues behind a burst of
        reads (hundreds of streams opening at once), so the chunks of running
        sessions keep flowing meanwhile.
        """
        if self._limiter is None:
            self._limiter = anyio.CapacityLimiter(1)
        return self._limiter

    async def submit(self, op: Op) -> None:
        """Queue ``op`` and return once it committed; raise its error if it failed."""
        self._queue.append(op)
        if self.leading:
            try:
                await op.wake.wait()
            except BaseException:
                self._withdraw(op)
                raise
            if not op.promoted:
                if op.error is not None:
                    raise op.error
                return
        try:
            await self._lead()
        except BaseException:
            self._withdraw(op)
            raise
        if op.error is not None:
            raise op.error

    def _withdraw(self, op: Op) -> None:
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
        self.leading = True
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
                    await anyio.to_thread.run_sync(
                        self._commit, batch, limiter=self.thread_limiter()
                    )
                for op in batch:
                    op.done = True
                    op.wake.set()
                    if op.error is None:
                        self._committed(op)
        finally:
            self._leading_task_active = False
            self._hand_over()

    def _hand_over(self) -> None:
        if self._queue:
            successor = self._queue[0]
            successor.promoted = True
            successor.wake.set()
            return
        self.leading = False
        if self._idle is not None:
            self._idle.set()

    def _commit(self, batch: list[Op]) -> None:
        """Run on a worker thread: apply every op of the batch in one transaction."""
        conn = self._writer
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                commits = (
                    count_commit(conn)
                    if apply_batch(conn, self._cache, batch, indexed=self.indexed)
                    else 0
                )
                conn.execute("COMMIT")
            except BaseException:
                self._cache = LastSeqCache()
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

    async def wait_idle(self) -> None:
        """Return once no commit is under way (``close`` calls it after refusing new ops)."""
        while self.leading:
            self._idle = anyio.Event()
            await self._idle.wait()

    def close(self) -> None:
        """Close the writer's connection and the high-water mark."""
        self._writer.close()
        self._high_water.close()
