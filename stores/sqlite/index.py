"""The SQLite store's session index: a row per session, its metadata, an FTS5 table of its text.

Written by the group-commit writer in the same transaction as the events it
indexes (``_sqlite_commit.apply_batch``), so the index never disagrees with
the log, even after a crash. Tables:

- ``helix_session_index``: ``num`` (an integer key), ``session_id``,
  ``created_ts``, ``agent_type``, ``parent_session_id``; indexed by
  ``(created_ts, session_id)``, the list's order.
- ``helix_session_metadata``: ``(key, value, num)``, the primary key.
- ``helix_session_text``: FTS5 (``unicode61``, diacritics kept), a row per
  batch that carries text, whose rowid is ``num << 32 | seq`` (the batch's
  first text event): a session's rows are one rowid range, deleted in one
  statement.

"Updated" and the last seq are not stored: the events' primary key answers
them per session. A file written before the index existed is indexed when a
store first opens it (``ensure_index``, once, marked in ``helix_meta``). A
store opened read-only on a file never indexed, or on an SQLite built
without FTS5, has no index: its ``search_sessions`` answers None and the
session list folds the logs instead.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence

import msgspec

from helix_agents.errors import HelixError
from helix_agents.events import (
    Completed,
    Event,
    MessageAppended,
    MessageQueued,
    RunStarted,
    SessionCreated,
)
from helix_agents.log.codec import decode_event
from helix_agents.log.search import SessionQuery, event_text

__all__ = [
    "INDEX_SCHEMA",
    "drop_session",
    "ensure_index",
    "index_batch",
    "index_ready",
    "search_sql",
]

log = logging.getLogger("helix_agents.stores")

INDEX_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_session_index (
    num INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL UNIQUE,
    created_ts REAL NOT NULL,
    agent_type TEXT NOT NULL,
    parent_session_id TEXT
);
CREATE INDEX IF NOT EXISTS helix_session_index_created
    ON helix_session_index (created_ts, session_id);
CREATE TABLE IF NOT EXISTS helix_session_metadata (
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    num INTEGER NOT NULL,
    PRIMARY KEY (key, value, num)
) WITHOUT ROWID;
CREATE VIRTUAL TABLE IF NOT EXISTS helix_session_text
    USING fts5(body, tokenize = 'unicode61 remove_diacritics 0');
"""

_INDEXED_MARK = "session_index"  # helix_meta key: 1 once every session of the file is indexed
_TEXT_TYPES = frozenset({SessionCreated, RunStarted, MessageQueued, MessageAppended, Completed})
_SEQ_BITS = 32


def drop_session(conn: sqlite3.Connection, session_id: str) -> None:
    """Remove a session from the index (its log is deleted, or about to be created anew)."""
    found = conn.execute(
        "SELECT num FROM helix_session_index WHERE session_id = ?", (session_id,)
    ).fetchone()
    if found is None:
        return
    num = found[0]
    conn.execute("DELETE FROM helix_session_index WHERE num = ?", (num,))
    conn.execute("DELETE FROM helix_session_metadata WHERE num = ?", (num,))
    conn.execute(
        "DELETE FROM helix_session_text WHERE rowid BETWEEN ? AND ?",
        (num << _SEQ_BITS, (num << _SEQ_BITS) | ((1 << _SEQ_BITS) - 1)),
    )


def index_batch(
    conn: sqlite3.Connection, session_id: str, events: Sequence[Event], created: bool
) -> None:
    """Index an accepted batch of ``session_id`` (``created``: it starts the log)."""
    num: int | None = None
    if created:
        drop_session(conn, session_id)  # a row left by a writer that did not index deletes
        first = events[0]
        agent_type, parent, metadata = "", None, {}
        if isinstance(first, SessionCreated):
            agent_type, parent = first.agent_type, first.parent_session_id
            metadata = first.metadata
        num = conn.execute(
            "INSERT INTO helix_session_index (session_id, created_ts, agent_type, "
            "parent_session_id) VALUES (?, ?, ?, ?) RETURNING num",
            (session_id, first.ts, agent_type, parent),
        ).fetchone()[0]
        if metadata:
            conn.executemany(
                "INSERT OR IGNORE INTO helix_session_metadata VALUES (?, ?, ?)",
                [(key, value, num) for key, value in metadata.items()],
            )
    texts: list[str] = []
    first_seq = 0
    for event in events:
        if type(event) in _TEXT_TYPES:
            found = [text for text in event_text(event) if text]
            if found and not texts:
                first_seq = event.seq
            texts += found
    if not texts or first_seq >= 1 << _SEQ_BITS:
        return
    if num is None:
        row = conn.execute(
            "SELECT num FROM helix_session_index WHERE session_id = ?", (session_id,)
        ).fetchone()
        if row is None:
            return  # not indexed (written by an older version): ensure_index never ran here
        num = int(row[0])
    conn.execute(
        "INSERT INTO helix_session_text (rowid, body) VALUES (?, ?)",
        ((num << _SEQ_BITS) | first_seq, "\n".join(texts)),
    )


def ensure_index(conn: sqlite3.Connection) -> bool:
    """Create the index tables and index every session of a file written before them (once).

    Returns whether the file has the index: False only when this SQLite has no FTS5.
    """
    try:
        conn.executescript(INDEX_SCHEMA)
    except sqlite3.OperationalError as exc:
        if "fts5" not in str(exc):
            raise
        log.warning("sqlite store: this SQLite has no FTS5: session search folds every log")
        return False
    if _indexed(conn):
        return True
    conn.execute("BEGIN IMMEDIATE")
    try:
        if not _indexed(conn):  # another process may have done it meanwhile
            sessions = [row[0] for row in conn.execute("SELECT session_id FROM helix_sessions")]
            for session_id in sessions:
                _index_stored(conn, session_id)
            conn.execute(
                "INSERT OR REPLACE INTO helix_meta (key, value) VALUES (?, 1)", (_INDEXED_MARK,)
            )
            if sessions:
                log.info("sqlite store: indexed %d existing session(s) for search", len(sessions))
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return True


def index_ready(conn: sqlite3.Connection) -> bool:
    """Whether the file holds a complete index (for a store that may not write to it)."""
    try:
        return _indexed(conn)
    except sqlite3.Error:
        return False  # a file without helix_meta: nothing a store wrote


def _indexed(conn: sqlite3.Connection) -> bool:
    row = conn.execute("SELECT value FROM helix_meta WHERE key = ?", (_INDEXED_MARK,)).fetchone()
    return row is not None and row[0] == 1


def _index_stored(conn: sqlite3.Connection, session_id: str) -> None:
    """Index one stored log; a log that does not decode is indexed as far as it does."""
    events: list[Event] = []
    for (data,) in conn.execute(
        "SELECT data FROM helix_events WHERE session_id = ? ORDER BY seq", (session_id,)
    ):
        try:
            events.append(decode_event(data))
        except (HelixError, msgspec.DecodeError, ValueError):
            log.warning("sqlite store: %s indexed up to a damaged event", session_id)
            break
    if events:
        index_batch(conn, session_id, events, created=True)


def _fts_term(term: str) -> str:
    """An FTS5 prefix query for one word (letters and digits only: quoting is enough)."""
    return '"' + term.replace('"', "") + '"*'


def search_sql(
    query: SessionQuery, before: tuple[float, str] | None, limit: int
) -> tuple[str, list[object]]:
    """The statement (and its parameters) answering ``query``: id, created_ts, last seq."""
    where: list[str] = []
    params: list[object] = []
    if before is not None:
        where.append("(i.created_ts, i.session_id) < (?, ?)")
        params += before
    if query.created_after is not None:
        where.append("i.created_ts >= ?")
        params.append(query.created_after)
    if query.created_before is not None:
        where.append("i.created_ts < ?")
        params.append(query.created_before)
    if query.agent_type is not None:
        where.append("i.agent_type = ?")
        params.append(query.agent_type)
    if query.top_level:
        where.append("i.parent_session_id IS NULL")
    if query.terms:
        matches = " INTERSECT ".join(
            ["SELECT rowid >> 32 FROM helix_session_text WHERE helix_session_text MATCH ?"]
            * len(query.terms)
        )
        where.append(f"i.num IN ({matches})")
        params += [_fts_term(term) for term in query.terms]
    for key, value in query.metadata:
        where.append(
            "i.num IN (SELECT num FROM helix_session_metadata WHERE key = ? AND value = ?)"
        )
        params += (key, value)
    last_ts = (
        "(SELECT e.ts FROM helix_events e WHERE e.session_id = i.session_id "
        "ORDER BY e.seq DESC LIMIT 1)"
    )
    if query.updated_after is not None:
        where.append(f"{last_ts} >= ?")
        params.append(query.updated_after)
    if query.updated_before is not None:
        where.append(f"{last_ts} < ?")
        params.append(query.updated_before)
    sql = (
        "SELECT i.session_id, i.created_ts, (SELECT MAX(e.seq) FROM helix_events e "
        "WHERE e.session_id = i.session_id) FROM helix_session_index i"
        + (" WHERE " + " AND ".join(where) if where else "")
        + " ORDER BY i.created_ts DESC, i.session_id DESC LIMIT ?"
    )
    params.append(limit)
    return sql, params
