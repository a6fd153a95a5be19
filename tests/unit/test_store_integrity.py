"""Damage to a stored log is detected, by ``read`` and by ``helix-agents check``, never accepted.

SQLite: a flipped byte in a row (the chained checksum), a missing row (a
gap), an undecodable row, a truncated file, a zero-length file and dropped
WAL frames (the high-water mark); JetStream's are in
``integration/test_jetstream_integrity.py``. Each damaged session raises
:class:`DamagedLogError` naming the session and the seq, never a path; the
other sessions read as before.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import textwrap
from pathlib import Path

import anyio
import pytest

from helix_agents.errors import DamagedLogError, DamagedStoreError
from helix_agents.events import Event, SessionCreated, TextDelta
from helix_agents.log import encode_event
from helix_agents.server.cli import main as cli
from helix_agents.stores import SqliteEventStore

SESSIONS = 4
EVENTS = 8  # per session
TIMEOUT = 30


def log_of(session_id: str, count: int = EVENTS) -> list[Event]:
    """A session's log: ``session_created``, then text deltas each carrying a unique marker."""
    events: list[Event] = [
        SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r")
    ]
    for seq in range(2, count + 1):
        events.append(
            TextDelta(
                session_id=session_id,
                seq=seq,
                ts=1.0,
                agent_id=session_id,
                agent_type="a",
                delta=f"marker<{session_id}#{seq}>",
            )
        )
    return events


def session(index: int) -> str:
    return f"s{index}"


async def fill(path: Path) -> None:
    """SESSIONS sessions of EVENTS events, two appends each (so two commits per session)."""
    async with SqliteEventStore(path) as store:
        for index in range(SESSIONS):
            events = log_of(session(index))
            await store.append(session(index), events[:3], 0)
            await store.append(session(index), events[3:], 3)


def flip_byte(path: Path, marker: bytes, *, unique: bool = True) -> None:
    """Flip one byte inside ``marker`` where the file first holds it (the row's stored bytes).

    A database file holds each row once; a WAL may hold several versions of
    its page (one frame per commit that touched it): ``unique=False``.
    """
    data = bytearray(path.read_bytes())
    at = data.find(marker)
    assert at >= 0, f"{marker!r} not in {path.name}"
    assert not unique or data.find(marker, at + 1) < 0, "the marker must be unique"
    data[at + len(marker) // 2] ^= 0x01
    path.write_bytes(bytes(data))


async def read_all(path: Path) -> dict[str, list[Event] | DamagedLogError]:
    """Each session's whole log, or the DamagedLogError reading it raised."""
    found: dict[str, list[Event] | DamagedLogError] = {}
    async with SqliteEventStore(path) as store:
        for index in range(SESSIONS):
            try:
                found[session(index)] = await store.read(session(index))
            except DamagedLogError as exc:
                found[session(index)] = exc
    return found


async def run_check(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``helix-agents check --store sqlite:///PATH``: its exit status and stdout lines.

    The command runs its own event loop, so it runs on a worker thread.
    """
    code = await anyio.to_thread.run_sync(cli.main, ["check", "--store", f"sqlite:///{path}"])
    return code, capsys.readouterr().out.splitlines()


def assert_only_damaged(
    found: dict[str, list[Event] | DamagedLogError], damaged: str, seq: int, reason: str
) -> DamagedLogError:
    error = found[damaged]
    assert isinstance(error, DamagedLogError)
    assert (error.session_id, error.seq) == (damaged, seq)
    assert reason in error.reason
    assert str(error) == f"session {damaged!r} is damaged at seq {seq}: {error.reason}"
    for index in range(SESSIONS):
        if session(index) != damaged:
            assert found[session(index)] == log_of(session(index))
    return error


# --- SQLite ---------------------------------------------------------------------


async def test_an_intact_store_checks_clean(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    found = await read_all(path)
    assert found == {session(index): log_of(session(index)) for index in range(SESSIONS)}
    code, lines = await run_check(path, capsys)
    assert code == 0
    assert lines == [f"checked {SESSIONS} session(s) in sqlite:///{path}: 0 damaged"]


async def test_a_flipped_byte_in_a_row_breaks_the_chain(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    flip_byte(path, b"marker<s2#5>")  # still valid JSON: only the checksum can tell
    error = assert_only_damaged(await read_all(path), "s2", 5, "checksum mismatch")
    assert str(tmp_path) not in str(error)
    # A read from the middle checks the first event against its predecessor too.
    async with SqliteEventStore(path) as store:
        with pytest.raises(DamagedLogError) as caught:
            await store.read("s2", 4)
        assert caught.value.seq == 5
        assert await store.read("s2", 5) == log_of("s2")[5:]
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines == [
        "session 's2' is damaged at seq 5: checksum mismatch",
        f"checked {SESSIONS} session(s) in sqlite:///{path}: 1 damaged",
    ]


async def test_a_missing_row_is_a_gap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM helix_events WHERE session_id = 's1' AND seq = 4")
    conn.close()
    assert_only_damaged(await read_all(path), "s1", 4, "gap")
    async with SqliteEventStore(path) as store:
        with pytest.raises(DamagedLogError) as caught:
            await store.read("s1", 4)  # the cursor's own event is gone
        assert caught.value.seq == 4
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines[0] == "session 's1' is damaged at seq 4: gap: the event is missing"


async def test_an_undecodable_row_is_damage(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    with sqlite3.connect(path) as conn:  # an unchained row, as an older version wrote
        conn.execute(
            "UPDATE helix_events SET data = ?, chain = NULL WHERE session_id = 's3' AND seq = 8",
            (b'{"type": "text_delta", "seq": "eight"}',),
        )
    conn.close()
    assert_only_damaged(await read_all(path), "s3", 8, "undecodable event")
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines[0].startswith("session 's3' is damaged at seq 8: undecodable event")


async def test_a_truncated_file_is_a_damaged_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DamagedStoreError):
        SqliteEventStore(path)
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines[0].startswith("store: ")
    assert "is damaged" in lines[0]


async def test_a_zero_length_file_is_reported_at_open_and_by_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    commits = 2 * SESSIONS
    path.write_bytes(b"")
    with caplog.at_level(logging.ERROR, logger="helix_agents.stores"):
        async with SqliteEventStore(path) as store:
            assert store.lost_commits == commits
            assert await store.list_sessions() == []
    assert [record.levelno for record in caplog.records] == [logging.ERROR]
    assert f"{commits} lost" in caplog.records[0].getMessage()
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines[0] == (
        f"store: the file holds 0 commit(s) but its high-water mark says {commits}: "
        f"{commits} lost (the file was truncated, emptied or replaced, "
        "or WAL frames were dropped as damaged)"
    )


_WRITE_AND_DIE = """
import os, sys, anyio
sys.path[:0] = [{tests!r}, {helpers!r}]
from test_store_integrity import log_of, session, SESSIONS
from helix_agents.stores import SqliteEventStore

async def main():
    store = SqliteEventStore({path!r})
    for index in range(SESSIONS):
        events = log_of(session(index))
        await store.append(session(index), events[:3], 0)
        await store.append(session(index), events[3:], 3)
    os._exit(0)  # as if killed: the WAL is left behind, not checkpointed

anyio.run(main)
"""


async def test_wal_frames_dropped_as_damaged_are_lost_commits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events.db"
    here = Path(__file__).parent
    script = _WRITE_AND_DIE.format(tests=str(here), helpers=str(here.parent), path=str(path))
    with anyio.fail_after(TIMEOUT):
        await anyio.run_process([sys.executable, "-c", textwrap.dedent(script)])
    wal = Path(f"{path}-wal")
    # Damage a frame of the second half: SQLite drops it and every frame after it.
    flip_byte(wal, b"marker<s2#6>", unique=False)
    async with SqliteEventStore(path) as store:
        assert store.lost_commits > 0
        # What is left are consistent prefixes: every log still verifies.
        assert await store.read("s0") == log_of("s0")
        assert await store.read("s3") == []
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines[0].startswith("store: the file holds ")


async def test_an_older_file_without_chains_opens_and_new_rows_are_chained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:  # the schema before chains existed
        conn.executescript(
            "CREATE TABLE helix_events (session_id TEXT NOT NULL, seq INTEGER NOT NULL, "
            "type TEXT NOT NULL, ts REAL NOT NULL, data BLOB NOT NULL, "
            "PRIMARY KEY (session_id, seq)) WITHOUT ROWID;"
            "CREATE TABLE helix_sessions (session_id TEXT PRIMARY KEY) WITHOUT ROWID;"
            "INSERT INTO helix_sessions VALUES ('old');"
        )
        conn.executemany(
            "INSERT INTO helix_events VALUES ('old', ?, ?, 1.0, ?)",
            [(event.seq, "x", encode_event(event)) for event in log_of("old")[:4]],
        )
    conn.close()
    async with SqliteEventStore(path) as store:
        assert await store.read("old") == log_of("old")[:4]
        await store.append("old", log_of("old")[4:], 4)
        assert await store.read("old") == log_of("old")
    assert (await run_check(path, capsys))[0] == 0
    flip_byte(path, b"marker<old#7>")  # a row written after the upgrade: chained
    async with SqliteEventStore(path) as store:
        with pytest.raises(DamagedLogError) as caught:
            await store.read("old")
    assert (caught.value.seq, caught.value.reason) == (7, "checksum mismatch")


async def test_events_of_an_unlisted_session_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "events.db"
    await fill(path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM helix_sessions WHERE session_id = 's0'")
    conn.close()
    code, lines = await run_check(path, capsys)
    assert code == cli.DAMAGE_FOUND
    assert lines[0] == "session 's0' has events but is not in the list"


def test_the_high_water_mark_sits_beside_the_file(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    anyio.run(fill, path)
    mark = Path(f"{path}-hwm")
    assert mark.read_text() == f"{2 * SESSIONS:020d}\n"
    assert os.path.getsize(mark) == 21
