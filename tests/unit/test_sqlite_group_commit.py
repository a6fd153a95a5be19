"""The SQLite group commit never tells an appender "done" for a batch it did not write.

Deterministic reproduction of a race: the leader has taken a batch (its own
append and a follower's) and waits for a worker thread; it is cancelled right
there, before the commit ran. The follower must then either see its events
in the log after its append returned, or not return at all.
"""

from __future__ import annotations

import sqlite3
import threading
from functools import partial
from pathlib import Path

import anyio
import anyio.to_thread

from helix_agents.errors import StoreError
from helix_agents.events import SessionCreated, TextDelta
from helix_agents.stores import SqliteEventStore, check_store


def _created(session_id: str) -> SessionCreated:
    return SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r")


def _delta(session_id: str) -> TextDelta:
    return TextDelta(
        session_id=session_id, seq=2, ts=2.0, agent_id=session_id, agent_type="a", delta="x"
    )


async def test_a_leader_cancelled_before_its_commit_still_commits_the_batch(
    tmp_path: Path,
) -> None:
    store = SqliteEventStore(tmp_path / "gc.db")
    await store.append("lead", [_created("lead")], 0)
    await store.append("follow", [_created("follow")], 0)
    release = threading.Event()
    limiter = store._writes.thread_limiter()  # the thread its commits run on
    follower_returned = anyio.Event()
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            # Take the store's commit thread, so the leader's commit has to wait for it.
            for _ in range(int(limiter.total_tokens)):
                tg.start_soon(partial(anyio.to_thread.run_sync, release.wait, limiter=limiter))
            while limiter.borrowed_tokens < limiter.total_tokens:
                await anyio.lowlevel.checkpoint()

            leader = anyio.CancelScope()

            async def lead() -> None:
                with leader:
                    await store.append("lead", [_delta("lead")], 1)

            async def follow() -> None:
                await store.append("follow", [_delta("follow")], 1)
                follower_returned.set()

            tg.start_soon(lead)
            tg.start_soon(follow)
            await anyio.wait_all_tasks_blocked()  # the leader waits for a thread
            leader.cancel()
            await anyio.wait_all_tasks_blocked()
            release.set()  # threads free again
            await follower_returned.wait()
    # The follower was told its append is durable: it must be in the log.
    assert [event.seq for event in await store.read("follow")] == [1, 2]
    # The taken batch was committed whole, the cancelled leader's append included.
    assert [event.seq for event in await store.read("lead")] == [1, 2]
    await store.close()


async def test_batches_of_any_size_go_in_whole_and_in_order(tmp_path: Path) -> None:
    """Rows go in a few multi-row statements (powers of two): every size comes back whole."""
    async with SqliteEventStore(tmp_path / "sizes.db") as store:
        for session_id, size in (("one", 1), ("three", 3), ("odd", 257), ("big", 1000)):
            events: list[SessionCreated | TextDelta] = [_created(session_id)]
            events += [
                TextDelta(
                    session_id=session_id,
                    seq=seq,
                    ts=2.0,
                    agent_id=session_id,
                    agent_type="a",
                    delta=str(seq),
                )
                for seq in range(2, size + 1)
            ]
            await store.append(session_id, events, 0)
            assert await store.read(session_id) == events
        report = await check_store(store)
        assert report.ok, report


async def test_a_statement_failing_midway_leaves_nothing_of_its_batch(tmp_path: Path) -> None:
    """The rows INSERT OR FAIL kept before the failure go with the rolled-back transaction.

    Four appends share one batch and one 4-row INSERT; a trigger fails the
    statement at the last row. Every append of the batch fails, none of their
    rows stays, and the same appends succeed once the trigger is gone.
    """
    path = tmp_path / "fail.db"
    sessions = ["a", "b", "c", "poison"]
    async with SqliteEventStore(path) as store:
        other = sqlite3.connect(path)
        other.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON helix_events WHEN NEW.session_id = 'poison' "
            "BEGIN SELECT RAISE(FAIL, 'poisoned row'); END"
        )
        other.commit()
        failures: dict[str, BaseException] = {}

        async def append(session_id: str) -> None:
            try:
                await store.append(session_id, [_created(session_id)], 0)
            except StoreError as exc:
                failures[session_id] = exc

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for session_id in sessions:  # queued in this order: one batch
                    tg.start_soon(append, session_id)
        assert sorted(failures) == sorted(sessions)
        assert "poisoned row" in str(failures["a"])
        assert other.execute("SELECT COUNT(*) FROM helix_events").fetchone() == (0,)
        assert other.execute("SELECT COUNT(*) FROM helix_sessions").fetchone() == (0,)
        other.execute("DROP TRIGGER poison")
        other.commit()
        other.close()
        for session_id in sessions:
            assert await store.append(session_id, [_created(session_id)], 0) == 1
            assert await store.read(session_id) == [_created(session_id)]
