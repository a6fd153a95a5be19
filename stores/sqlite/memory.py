"""``SqliteMemoryStore``: memory items in a table of the event store's own SQLite file.

Table ``helix_memory`` holds one row per item (tombstones included): the
namespace joined with ``\\x1f`` and ended by it (so a prefix is a string
prefix), the key, the stored item as JSON, and its update time. It has its own
connection, used on a worker thread under a lock; writes are ``BEGIN
IMMEDIATE`` transactions, so processes sharing the file serialise on SQLite's
write lock (``busy_timeout``) and each read-modify-write is atomic.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import anyio.to_thread
import msgspec

from helix_agents.errors import StoreClosedError, StoreError, UsageError
from helix_agents.memory.base import (
    MemoryItem,
    StoredItem,
    check_key,
    check_namespace,
    check_page,
    check_value,
    matches,
    plan_delete,
    plan_put,
    query_terms,
    ranked,
)

from .schema import connect

__all__ = ["MEMORY_SCHEMA", "SqliteMemoryStore"]

T = TypeVar("T")

MEMORY_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_memory (
    ns TEXT NOT NULL,
    key TEXT NOT NULL,
    updated REAL NOT NULL,
    deleted INTEGER NOT NULL,
    data BLOB NOT NULL,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
"""

_SEP = "\x1f"
_decoder = msgspec.json.Decoder(StoredItem)


def _ns(namespace: tuple[str, ...]) -> str:
    return "".join(part + _SEP for part in namespace)


class SqliteMemoryStore:
    """A durable :class:`~helix_agents.memory.MemoryStore` in a SQLite file (see the module).

    Args:
        path: the database file; the event store's (``SqliteEventStore.memory_store()``)
            or any other.
        busy_timeout: seconds a write waits for another process's write lock.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 10.0) -> None:
        self.path = os.fspath(path)
        if self.path == ":memory:":
            raise UsageError("SqliteMemoryStore needs a file; use InMemoryMemoryStore for memory")
        self._busy_ms = int(busy_timeout * 1000)
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"<SqliteMemoryStore path={self.path!r}>"

    def _run(self, work: Callable[[sqlite3.Connection], T]) -> T:
        with self._lock:
            if self._closed:
                raise StoreClosedError()
            try:
                if self._conn is None:
                    conn = connect(self.path, busy_ms=self._busy_ms, synchronous="FULL")
                    conn.executescript(MEMORY_SCHEMA)
                    self._conn = conn
                return work(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite memory store {self.path!r}: {exc}") from exc

    async def _call(self, work: Callable[[sqlite3.Connection], T]) -> T:
        return await anyio.to_thread.run_sync(self._run, work)

    @staticmethod
    def _current(conn: sqlite3.Connection, ns: str, key: str) -> StoredItem | None:
        row = conn.execute(
            "SELECT data FROM helix_memory WHERE ns = ? AND key = ?", (ns, key)
        ).fetchone()
        return None if row is None else _decoder.decode(row[0])

    @staticmethod
    def _write(conn: sqlite3.Connection, new: StoredItem) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO helix_memory (ns, key, updated, deleted, data) "
            "VALUES (?, ?, ?, ?, ?)",
            (_ns(new.namespace), new.key, new.updated, int(new.deleted), msgspec.json.encode(new)),
        )

    def _transaction(self, conn: sqlite3.Connection, body: Callable[[], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            result = body()
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return result

    async def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item, or None."""
        ns, key = _ns(check_namespace(namespace)), check_key(key)
        stored = await self._call(lambda conn: self._current(conn, ns, key))
        return None if stored is None else stored.item

    async def put(
        self, namespace: Sequence[str], key: str, value: dict[str, Any], *, token: str | None = None
    ) -> MemoryItem:
        """Write the item in one transaction (see ``MemoryStore.put``)."""
        parts, key = check_namespace(namespace), check_key(key)
        plain = check_value(value)

        def work(conn: sqlite3.Connection) -> MemoryItem:
            def body() -> MemoryItem:
                current = self._current(conn, _ns(parts), key)
                new, item = plan_put(current, parts, key, plain, token, time.time())
                if new is not None:
                    self._write(conn, new)
                return item

            return self._transaction(conn, body)

        return await self._call(work)

    async def delete(
        self, namespace: Sequence[str], key: str, *, token: str | None = None
    ) -> MemoryItem | None:
        """Delete the item in one transaction (see ``MemoryStore.delete``)."""
        parts, key = check_namespace(namespace), check_key(key)

        def work(conn: sqlite3.Connection) -> MemoryItem | None:
            def body() -> MemoryItem | None:
                current = self._current(conn, _ns(parts), key)
                new, was = plan_delete(current, token, time.time())
                if new is not None:
                    self._write(conn, new)
                return was

            return self._transaction(conn, body)

        return await self._call(work)

    async def search(
        self,
        prefix: Sequence[str],
        *,
        query: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """The items under ``prefix`` matching ``query`` (see ``MemoryStore.search``).

        Without a query the page is cut in SQL; with one, the prefix's items are
        matched here.
        """
        head = _ns(check_namespace(prefix, allow_empty=True))
        limit, offset = check_page(limit, offset)
        terms = query_terms(query)
        sql = (
            "SELECT data FROM helix_memory WHERE substr(ns, 1, ?) = ? AND deleted = 0 "
            "ORDER BY updated DESC, ns, key"
        )
        params: tuple[Any, ...] = (len(head), head)
        if not terms:
            sql += " LIMIT ? OFFSET ?"
            params += (limit, offset)
        rows = await self._call(lambda conn: conn.execute(sql, params).fetchall())
        items = [item for (data,) in rows if (item := _decoder.decode(data).item) is not None]
        if not terms:
            return ranked(items)
        return ranked(item for item in items if matches(item, terms))[offset : offset + limit]

    async def close(self) -> None:
        """Close the connection. Idempotent."""

        def shut() -> None:
            with self._lock:
                self._closed = True
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None

        await anyio.to_thread.run_sync(shut)
