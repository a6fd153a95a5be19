"""``SqliteEventStore.read`` serves small reads on the event loop's thread, big ones on workers.

Both give the same events; a file found busy sends the read to a worker,
which waits for the lock (``busy_timeout``) instead of the event loop.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from helix_agents.events import RunStarted, SessionCreated, TextDelta
from helix_agents.stores import SqliteEventStore
from helix_agents.stores.sqlite import store as sqlite_store


def _log(session_id: str, deltas: int) -> list:
    events: list = [
        SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r"),
        RunStarted(session_id=session_id, seq=2, ts=1.0, run_id="r"),
    ]
    for seq in range(3, deltas + 3):
        events.append(
            TextDelta(
                session_id=session_id,
                seq=seq,
                ts=1.0,
                agent_id="a",
                agent_type="a",
                delta=f"d{seq}",
            )
        )
    return events


async def test_small_and_big_reads_agree(tmp_path: Path) -> None:
    big = sqlite_store._INLINE_READ + 50
    async with SqliteEventStore(tmp_path / "e.db") as store:
        await store.append("small", _log("small", 5), 0)
        await store.append("big", _log("big", big), 0)
        workers: list[object] = []
        in_thread = store._in_thread

        async def counted(fn, *args):  # type: ignore[no-untyped-def]
            workers.append(fn)
            return await in_thread(fn, *args)

        store._in_thread = counted  # type: ignore[method-assign]
        small = await store.read("small")
        assert await store.read("nobody") == []
        assert workers == []  # both read on the event loop's thread
        whole = await store.read("big")  # too many events: a worker reads them
        assert len(workers) == 1
        tail = await store.read("big", len(whole) - 3)  # three of them: read here
        assert len(workers) == 1
    assert [event.seq for event in small] == list(range(1, 8))
    assert [event.seq for event in whole] == list(range(1, big + 3))
    assert tail == whole[-3:]


class _Busy:
    """Stands in for the loop thread's connection: every statement finds the file locked."""

    def __init__(self) -> None:
        self.tried = 0

    def execute(self, *args: object) -> object:
        self.tried += 1
        raise sqlite3.OperationalError("database is locked")

    def close(self) -> None:
        pass


async def test_a_busy_file_sends_the_read_to_a_worker(tmp_path: Path) -> None:
    async with SqliteEventStore(tmp_path / "e.db") as store:
        await store.append("s", _log("s", 3), 0)
        busy = _Busy()
        store._loop_conn = busy  # type: ignore[assignment]
        events = await store.read("s")
        assert busy.tried == 1
        assert store._read_limiter is not None  # a worker thread read it
    assert [event.seq for event in events] == [1, 2, 3, 4, 5]
