"""Reading a SQLite store: a session's verified events, and which sessions another writer moved."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

from helix_agents.errors import DamagedLogError, StoreError
from helix_agents.events import Event
from helix_agents.stores.chain import verified_events

from .schema import is_corruption

__all__ = ["ChangeProbe", "read_events"]

_SQLITE_MAX_INT = 2**63 - 1
_PROBE_CHUNK = 500  # session ids per poller query (SQLite's bound on parameters is 32,766)


def read_events(
    connection: Callable[[], sqlite3.Connection],
    path: str,
    session_id: str,
    from_seq: int,
    max_bytes: int | None = None,
) -> tuple[list[Event], bool]:
    """The events of ``session_id`` after ``from_seq``, checked (see ``_chain.verified_events``).

    And whether more follow them. ``connection`` is called only when the
    file must be read. With ``max_bytes``, a page: the rows are fetched one
    by one and the read stops after the event whose stored bytes bring the
    page to ``max_bytes`` (at least one event, however large; of the rest of
    the log, one more row is looked at, to say whether it follows).
    """
    if from_seq >= _SQLITE_MAX_INT:
        return [], False  # nothing can come after the largest seq SQLite holds
    from_seq = max(from_seq, 0)
    try:
        # From from_seq itself, so the first event's chain can be checked
        # against its predecessor's.
        cursor = connection().execute(
            "SELECT seq, data, chain FROM helix_events WHERE session_id = ? AND seq >= ? "
            "ORDER BY seq",
            (session_id, from_seq),
        )
        more = False
        if max_bytes is None:
            records: list[tuple[int, bytes, int | None]] = cursor.fetchall()
        else:
            records, more = _page(cursor, from_seq, max_bytes)
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            raise DamagedLogError(
                session_id, from_seq + 1, "the database file is damaged (SQLITE_CORRUPT)"
            ) from exc
        raise StoreError(f"sqlite store {path!r}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"sqlite store {path!r}: {exc}") from exc
    previous: int | None = None
    if from_seq > 0 and records:
        if records[0][0] != from_seq:
            # Events follow from_seq but from_seq itself is gone.
            raise DamagedLogError(session_id, from_seq, "gap: the event is missing")
        previous = records[0][2]
        records = records[1:]
    return verified_events(session_id, from_seq + 1, previous, records), more


def _page(
    cursor: sqlite3.Cursor, from_seq: int, max_bytes: int
) -> tuple[list[tuple[int, bytes, int | None]], bool]:
    """Rows of ``cursor`` until their data reach ``max_bytes``, and whether another follows.

    ``from_seq``'s own row (read for its chain) is not counted.
    """
    records: list[tuple[int, bytes, int | None]] = []
    size = 0
    try:
        while size < max_bytes:
            row = cursor.fetchone()
            if row is None:
                return records, False
            records.append(row)
            if row[0] != from_seq:
                size += len(row[1])
        return records, cursor.fetchone() is not None
    finally:
        cursor.close()


class ChangeProbe:
    """The poller's view of the file: each watched session's end as last seen.

    It has its own connection (``PRAGMA data_version`` is per connection),
    opened on first use by ``connect``.
    """

    def __init__(self, connect: Callable[[], sqlite3.Connection], path: str) -> None:
        self._connect = connect
        self._path = path
        self._conn: sqlite3.Connection | None = None
        self._version: int | None = None
        self._seen: dict[str, int] = {}  # watched session -> last seq the poller saw

    def changed(self, sessions: list[str], own_ends: dict[str, int]) -> list[str]:
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
        try:
            if self._conn is None:
                self._conn = self._connect()
            conn = self._conn
            # Read the version before the ends: a commit after this read shows
            # up as a new version at the next probe.
            version = conn.execute("PRAGMA data_version").fetchone()[0]
            seen = self._seen
            watched = set(sessions)
            for gone in [session for session in seen if session not in watched]:
                del seen[gone]
            if version == self._version:
                asked = [session for session in sessions if session not in seen]
            else:
                asked = sessions
            self._version = version
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
            raise StoreError(f"sqlite store {self._path!r}: {exc}") from exc
        changed: list[str] = []
        for session in asked:
            end = ends.get(session, 0)
            if (session not in seen or seen[session] != end) and own_ends.get(session) != end:
                changed.append(session)
            seen[session] = end
        return changed

    def close(self) -> None:
        """Close the probe's connection if it was opened."""
        if self._conn is not None:
            self._conn.close()
