"""What lets a SQLite store notice lost commits and a damaged file.

The file counts its own commits (``helix_meta.commits``, inside each
transaction that changes it); a high-water mark beside it (``<file>-hwm``)
remembers the count a writer last saw. A file holding fewer commits than its
mark lost some. ``PRAGMA quick_check`` and a look for unlisted sessions find
the rest (see ``SqliteEventStore.check_storage``).
"""

from __future__ import annotations

import logging
import os
import sqlite3

__all__ = ["HighWaterMark", "count_commit", "held_commits", "storage_problems"]

log = logging.getLogger("helix_agents.stores")

_RETURNING = sqlite3.sqlite_version_info >= (3, 35)  # UPSERT ... RETURNING


def count_commit(conn: sqlite3.Connection) -> int:
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


def held_commits(conn: sqlite3.Connection) -> int:
    """The file's commit counter (0 for a file that never counted)."""
    row = conn.execute("SELECT value FROM helix_meta WHERE key = 'commits'").fetchone()
    return int(row[0]) if row else 0


class HighWaterMark:
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


def storage_problems(conn: sqlite3.Connection) -> list[tuple[str | None, str]]:
    """SQLite's ``PRAGMA quick_check`` of the file, sessions with events but not listed, and
    sessions whose log ends before the last seq committed to them (their last events deleted).
    """
    found: list[tuple[str | None, str]] = []
    try:
        for (line,) in conn.execute("PRAGMA quick_check(10)").fetchall():
            if line != "ok":
                found.append((None, f"the database file is damaged: {line}"))
        unlisted = conn.execute(
            "SELECT DISTINCT session_id FROM helix_events WHERE session_id NOT IN "
            "(SELECT session_id FROM helix_sessions) ORDER BY session_id"
        ).fetchall()
        columns = [row[1] for row in conn.execute("PRAGMA table_info(helix_sessions)")]
        cut = (
            conn.execute(
                "SELECT s.session_id, s.last_seq, (SELECT max(e.seq) FROM helix_events e "
                "WHERE e.session_id = s.session_id) AS ends FROM helix_sessions s "
                "WHERE s.last_seq IS NOT NULL AND s.last_seq > coalesce(ends, 0) "
                "ORDER BY s.session_id"
            ).fetchall()
            if "last_seq" in columns
            else []
        )
    except sqlite3.DatabaseError as exc:
        found.append((None, f"the database file is damaged: {exc}"))
        return found
    for (session_id,) in unlisted:
        found.append((str(session_id), f"session {session_id!r} has events but is not in the list"))
    for session_id, committed, ends in cut:
        found.append(
            (
                str(session_id),
                f"session {session_id!r} ends at seq {ends or 0} but seq {committed} was "
                "committed: its last events were deleted",
            )
        )
    return found
