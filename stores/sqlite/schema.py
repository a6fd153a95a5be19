"""The SQLite file: its schema, how a connection to it is opened, and what a failure means."""

from __future__ import annotations

import os
import sqlite3
import urllib.parse

__all__ = [
    "SCHEMA",
    "add_chain_column",
    "add_last_seq_column",
    "connect",
    "connect_read_only",
    "is_corruption",
]

SCHEMA = """
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
    session_id TEXT PRIMARY KEY,
    last_seq INTEGER
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS helix_meta (
    key TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
"""


def connect(path: str, *, busy_ms: int, synchronous: str) -> sqlite3.Connection:
    """A connection in autocommit mode (transactions are explicit), WAL, usable from any thread."""
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    return conn


def connect_read_only(path: str, *, busy_ms: int) -> sqlite3.Connection:
    """A ``mode=ro`` connection, or ``immutable``: nothing is written, nothing created beside it.

    Nothing is set that writes (no journal mode). A file with no ``-wal``
    beside it (closed cleanly: no writer has it open, nothing waits in a WAL)
    is read as it stands (``immutable=1``): a ``mode=ro`` connection to a
    WAL database would create the ``-wal`` and ``-shm`` files wherever it
    may, and root may anywhere, whatever the permissions say. A file with
    a ``-wal`` (a writer has it, or crashed) is read through it
    (``mode=ro``, sharing its ``-shm``); if that cannot be (a folder this
    process may not write, where the ``-shm`` is missing), as it stands.
    """
    if not os.path.exists(path):
        raise sqlite3.OperationalError(f"no such file: {path}")
    base = f"file:{urllib.parse.quote(os.path.abspath(path))}?mode=ro"
    immutable = f"{base}&immutable=1"
    uris = (base, immutable) if os.path.exists(f"{path}-wal") else (immutable,)
    for uri in uris:
        conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
        try:
            conn.execute(f"PRAGMA busy_timeout = {busy_ms}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.OperationalError:
            conn.close()
            if uri == immutable:
                raise
            continue
        return conn
    raise AssertionError("unreachable")  # pragma: no cover


def add_last_seq_column(conn: sqlite3.Connection) -> None:
    """Files written before ``helix_sessions.last_seq`` get it (``NULL``: unknown till appended)."""

    def has() -> bool:
        columns = conn.execute("PRAGMA table_info(helix_sessions)")
        return any(row[1] == "last_seq" for row in columns)

    if has():
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not has():  # another process may have added it meanwhile
            conn.execute("ALTER TABLE helix_sessions ADD COLUMN last_seq INTEGER")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def add_chain_column(conn: sqlite3.Connection) -> None:
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


def is_corruption(exc: sqlite3.Error) -> bool:
    """Whether SQLite found the file itself damaged (not busy, not a misuse)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)
