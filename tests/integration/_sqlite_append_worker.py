"""A process that appends to a SQLite store until it is killed (for ``test_sqlite_kill.py``).

Usage: ``python _sqlite_append_worker.py DB_PATH [MAX_SECONDS]``, or with a store
URL (``nats://127.0.0.1:PORT?stream=NAME``) in place of ``DB_PATH`` to append
to that store instead (``test_jetstream_kill.py``).

It appends to :data:`SESSIONS` sessions concurrently (one task each, so
appends share group commits), and after each append *returns* it prints
``"<session_id> <last_seq>"`` on stdout and flushes: that line is the
acknowledgement the test holds the store to. Batches are 1 to 3 events; the
size and content of every batch are a pure function of (session, batch
number), so a reader can rebuild the exact log the worker meant to write and
tell a whole batch from a torn one. It stops by itself after MAX_SECONDS, in
case its parent died without killing it.
"""

from __future__ import annotations

import sys

import anyio

from helix_agents import EventStore
from helix_agents.events import Event, SessionCreated, TextDelta
from helix_agents.stores import SqliteEventStore, open_store

SESSIONS = 6
"""How many sessions the worker appends to, concurrently."""


def session_id(index: int) -> str:
    """The id of session number ``index``."""
    return f"kill-{index}"


def batch_size(index: int, batch_no: int) -> int:
    """How many events batch ``batch_no`` of session ``index`` holds (1 to 3)."""
    return 1 + (index + 2 * batch_no) % 3


def build_batch(index: int, batch_no: int, first_seq: int) -> list[Event]:
    """Batch ``batch_no`` of session ``index``, starting at ``first_seq``.

    Each event's text says ``"<batch_no>:<position>:<size>"`` and is padded,
    so a batch spans several pages of the database.
    """
    sid = session_id(index)
    size = batch_size(index, batch_no)
    events: list[Event] = []
    for position, seq in enumerate(range(first_seq, first_seq + size)):
        tag = f"{batch_no}:{position}:{size}:" + "x" * (300 * position)
        ts = 1_700_000_000 + seq / 8
        if seq == 1:
            events.append(SessionCreated(session_id=sid, seq=1, ts=ts, agent_type="k", run_id=tag))
        else:
            events.append(
                TextDelta(session_id=sid, seq=seq, ts=ts, agent_id=sid, agent_type="k", delta=tag)
            )
    return events


def expected_log(index: int, batches: int) -> list[Event]:
    """The first ``batches`` whole batches of session ``index``, as the worker writes them."""
    events: list[Event] = []
    for batch_no in range(batches):
        events.extend(build_batch(index, batch_no, len(events) + 1))
    return events


async def _append_forever(store: EventStore, index: int) -> None:
    sid = session_id(index)
    last = 0
    batch_no = 0
    while True:
        last = await store.append(sid, build_batch(index, batch_no, last + 1), last)
        # No await between the return and the acknowledgement.
        sys.stdout.write(f"{sid} {last}\n")
        sys.stdout.flush()
        batch_no += 1


async def _main(path: str, max_seconds: float) -> None:
    store = await open_store(path) if "://" in path else SqliteEventStore(path)
    try:
        with anyio.move_on_after(max_seconds):
            async with anyio.create_task_group() as tg:
                for index in range(SESSIONS):
                    tg.start_soon(_append_forever, store, index)
    finally:
        await store.close()


if __name__ == "__main__":
    anyio.run(_main, sys.argv[1], float(sys.argv[2]) if len(sys.argv) > 2 else 120.0)
