"""SQLite reads made at once share worker-thread hops; each reader gets its own log or error."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from helix_agents.errors import DamagedLogError
from helix_agents.events import Event, SessionCreated, TextDelta
from helix_agents.stores import SqliteEventStore

SESSIONS = 300
TIMEOUT = 30


def _log(session_id: str) -> list[Event]:
    return [
        SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r"),
        TextDelta(
            session_id=session_id, seq=2, ts=1.0, agent_id=session_id, agent_type="a", delta="x"
        ),
    ]


async def _read_all(store: SqliteEventStore, sessions: list[str]) -> dict[str, Any]:
    found: dict[str, Any] = {}

    async def one(session_id: str) -> None:
        try:
            found[session_id] = await store.read(session_id)
        except DamagedLogError as exc:
            found[session_id] = exc

    async with anyio.create_task_group() as tg:
        for session_id in sessions:
            tg.start_soon(one, session_id)
    return found


async def test_a_burst_of_reads_shares_thread_hops_and_each_gets_its_own_log(
    tmp_path: Path,
) -> None:
    sessions = [f"s{index}" for index in range(SESSIONS)]
    async with SqliteEventStore(tmp_path / "reads.db") as store:
        for session_id in sessions:
            await store.append(session_id, _log(session_id), 0)
        hops = 0
        in_thread = store._in_thread

        async def counted(fn: Any, *args: Any) -> Any:
            nonlocal hops
            hops += 1
            return await in_thread(fn, *args)

        store._in_thread = counted  # type: ignore[method-assign]
        with anyio.fail_after(TIMEOUT):
            found = await _read_all(store, [*sessions, "never-written"])
    assert found == {**{s: _log(s) for s in sessions}, "never-written": []}
    assert hops <= SESSIONS // 10  # batches of up to 64, not a hop per read


async def test_a_damaged_log_fails_only_its_own_reader_in_a_shared_batch(tmp_path: Path) -> None:
    path = tmp_path / "reads.db"
    sessions = [f"s{index}" for index in range(50)]
    async with SqliteEventStore(path) as store:
        for session_id in sessions:
            await store.append(session_id, _log(session_id), 0)
    with sqlite3.connect(path) as conn:  # a gap in one log: its seq 1 is gone
        conn.execute("DELETE FROM helix_events WHERE session_id = 's7' AND seq = 1")
    async with SqliteEventStore(path) as store:
        with anyio.fail_after(TIMEOUT):
            found = await _read_all(store, sessions)
    error = found.pop("s7")
    assert isinstance(error, DamagedLogError)
    assert error.session_id == "s7"
    assert found == {s: _log(s) for s in sessions if s != "s7"}


async def test_reads_queued_behind_a_closing_store_fail_as_closed(tmp_path: Path) -> None:
    store = SqliteEventStore(tmp_path / "reads.db")
    await store.append("s", _log("s"), 0)
    errors: list[BaseException] = []

    async def one() -> None:
        try:
            await store.read("s")
        except Exception as exc:
            errors.append(exc)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for _ in range(200):
                tg.start_soon(one)
            await anyio.lowlevel.checkpoint()
            await store.close()
    # Each read either finished before the close or failed as closed: none hangs.
    assert errors
    assert all(type(exc).__name__ == "StoreClosedError" for exc in errors)
    with pytest.raises(Exception, match="closed"):
        await store.read("s")
