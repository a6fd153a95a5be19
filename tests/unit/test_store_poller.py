"""Idle tails cost nothing: one poller per store wakes only the sessions another process changed.

SQLite: the poller reads ``PRAGMA data_version`` and, only when it changed,
each watched session's end; a tail re-reads only when its session changed.
The poller is run by one waiting tail and handed on when that tail has
events (or is cancelled). JetStream's one consumer per store is tested in
``integration/test_jetstream_integrity.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.abc import TaskGroup
from followed import Followed, follow

from helix_agents import EventStore
from helix_agents.events import Event, SessionCreated, TextDelta
from helix_agents.stores import SqliteEventStore

TIMEOUT = 30
IDLE_TAILS = 300


def created(session_id: str) -> SessionCreated:
    return SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r")


def delta(session_id: str, seq: int) -> TextDelta:
    return TextDelta(
        session_id=session_id, seq=seq, ts=1.0, agent_id=session_id, agent_type="a", delta="x"
    )


class CountingReads:
    """Wraps a store's ``read_page`` (before its tails are made) and counts calls per session.

    A tail's catch-up reads the log a page at a time (``read_page``); a log
    that fits in one page is one call, as a whole read was.
    """

    def __init__(self, store: Any) -> None:
        self.calls: dict[str, int] = {}
        self._read = store.read_page
        self._waiters: list[tuple[int, anyio.Event]] = []
        store.read_page = self

    @property
    def total(self) -> int:
        return sum(self.calls.values())

    async def __call__(
        self, session_id: str, from_seq: int, max_bytes: int
    ) -> tuple[list[Event], bool]:
        self.calls[session_id] = self.calls.get(session_id, 0) + 1
        for count, reached in self._waiters:
            if self.total >= count:
                reached.set()
        result: tuple[list[Event], bool] = await self._read(session_id, from_seq, max_bytes)
        return result

    async def wait_for(self, count: int) -> None:
        reached = anyio.Event()
        self._waiters.append((count, reached))
        if self.total >= count:
            reached.set()
        await reached.wait()


class CountingProbes:
    """Wraps a SQLite store's poller probe; tells when a probe has looked at a session."""

    def __init__(self, store: Any) -> None:
        self._probe = store._notifier._probe
        self._seen: set[str] = set()
        self._changed = anyio.Event()
        store._notifier._probe = self

    async def __call__(self, sessions: list[str]) -> Any:
        changed = await self._probe(sessions)
        self._seen.update(sessions)
        self._changed.set()
        self._changed = anyio.Event()
        return changed

    async def looked_at(self, session_id: str) -> None:
        while session_id not in self._seen:
            await self._changed.wait()


async def start_tails(tg: TaskGroup, store: EventStore, sessions: list[str]) -> dict[str, Followed]:
    seen: dict[str, Followed] = {}
    for session_id in sessions:
        seen[session_id] = Followed()
        tg.start_soon(follow, store, session_id, seen[session_id])
        await seen[session_id].reach(1)
    return seen


async def test_idle_sqlite_tails_do_not_read_and_only_the_changed_session_wakes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.db"
    sessions = [f"idle-{index}" for index in range(IDLE_TAILS)]
    async with (
        SqliteEventStore(path, poll_interval=0.02) as store,
        SqliteEventStore(path) as other,
    ):
        for session_id in sessions:
            await store.append(session_id, [created(session_id)], 0)
        reads = CountingReads(store)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                seen = await start_tails(tg, store, sessions)
                # Each tail: its catch-up read. The poller's first look at each
                # session finds it where this store's own last append left it:
                # no re-read.
                await reads.wait_for(IDLE_TAILS)
                assert all(count == 1 for count in reads.calls.values())
                # Idle: about 15 poll intervals and not one read more (the old
                # tails re-read every interval: 300 x 15 reads).
                await anyio.sleep(0.3)
                assert reads.total == IDLE_TAILS
                # Another process appends to one session: only its tail re-reads.
                await other.append(sessions[7], [delta(sessions[7], 2)], 1)
                await reads.wait_for(IDLE_TAILS + 1)
                await seen[sessions[7]].reach(2)
                assert seen[sessions[7]][-1] == delta(sessions[7], 2)
                assert reads.calls[sessions[7]] == 2
                assert reads.total == IDLE_TAILS + 1
                tg.cancel_scope.cancel()


@pytest.mark.parametrize("cancelled", [0, 1])
async def test_the_poller_is_handed_on_when_its_tail_leaves(tmp_path: Path, cancelled: int) -> None:
    """Whichever tail runs the poller, the other one is still woken once it is cancelled."""
    path = tmp_path / "events.db"
    sessions = ["first", "second"]
    async with (
        SqliteEventStore(path, poll_interval=0.01) as store,
        SqliteEventStore(path) as other,
    ):
        for session_id in sessions:
            await store.append(session_id, [created(session_id)], 0)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                seen: dict[str, Followed] = {}
                scopes: list[anyio.CancelScope] = []
                for session_id in sessions:
                    seen[session_id] = Followed()
                    scope = anyio.CancelScope()
                    scopes.append(scope)

                    async def run(
                        session_id: str = session_id, scope: anyio.CancelScope = scope
                    ) -> None:
                        with scope:
                            await follow(store, session_id, seen[session_id])

                    tg.start_soon(run)
                    await seen[session_id].reach(1)
                scopes[cancelled].cancel()
                kept = sessions[1 - cancelled]
                await other.append(kept, [delta(kept, 2)], 1)
                await seen[kept].reach(2)
                # And the poller goes on after its tail yielded and waits again.
                await other.append(kept, [delta(kept, 3)], 2)
                await seen[kept].reach(3)
                assert seen[kept] == [created(kept), delta(kept, 2), delta(kept, 3)]
                tg.cancel_scope.cancel()


async def test_a_poller_tail_woken_by_its_own_session_passes_the_poller_on(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    sessions = [f"s{index}" for index in range(5)]
    async with (
        SqliteEventStore(path, poll_interval=0.01) as store,
        SqliteEventStore(path) as other,
    ):
        for session_id in sessions:
            await store.append(session_id, [created(session_id)], 0)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                seen = await start_tails(tg, store, sessions)
                # Appends by another process to each session in turn: every tail
                # (the poller's own included) is woken, whoever polls meanwhile.
                for round_ in range(2, 5):
                    for session_id in sessions:
                        await other.append(session_id, [delta(session_id, round_)], round_ - 1)
                        await seen[session_id].reach(round_)
                for session_id in sessions:
                    assert seen[session_id] == [
                        created(session_id),
                        *(delta(session_id, seq) for seq in range(2, 5)),
                    ]
                tg.cancel_scope.cancel()


async def follow_from(store: EventStore, session_id: str, from_seq: int, into: Followed) -> None:
    """Tail the session from ``from_seq`` into ``into``."""
    tail = store.tail(session_id, from_seq)
    try:
        async for event in tail:
            into.add(event)
    finally:
        await tail.aclose()  # type: ignore[attr-defined]


async def test_a_tail_starting_where_this_store_left_the_log_does_not_read(
    tmp_path: Path,
) -> None:
    async with SqliteEventStore(tmp_path / "events.db", poll_interval=0.02) as store:
        await store.append("s", [created("s")], 0)
        reads = CountingReads(store)
        seen = Followed()
        probes = CountingProbes(store)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow_from, store, "s", 1, seen)
                await probes.looked_at("s")  # the poller's first look: s ends where we left it
                await store.append("s", [delta("s", 2)], 1)
                await seen.reach(1)
                assert seen == [delta("s", 2)]
                # No catch-up read (this store wrote seq 1 last) and no re-read.
                assert reads.total == 0
                tg.cancel_scope.cancel()


async def test_an_append_made_elsewhere_before_ours_reaches_a_tail_that_did_not_read(
    tmp_path: Path,
) -> None:
    """The poller skips a session ending at our own write; the gap our write shows is enough."""
    path = tmp_path / "events.db"
    async with (
        SqliteEventStore(path, poll_interval=60) as store,  # the poller never gets to look
        SqliteEventStore(path, poll_interval=None) as other,
    ):
        await store.append("s", [created("s")], 0)
        seen = Followed()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow_from, store, "s", 1, seen)  # no catch-up read
                await other.append("s", [delta("s", 2)], 1)  # unseen by this store's tails
                await store.append("s", [delta("s", 3)], 2)  # ours: its seq shows a gap
                await seen.reach(2)
                assert seen == [delta("s", 2), delta("s", 3)]
                tg.cancel_scope.cancel()


async def test_a_tail_starting_at_an_end_written_elsewhere_still_gets_what_follows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "events.db"
    async with (
        SqliteEventStore(path, poll_interval=0.02) as store,
        SqliteEventStore(path, poll_interval=None) as other,
    ):
        await store.append("s", [created("s")], 0)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                # A first tail watches the session; the poller sees the other
                # process's append and that tail gets it.
                first = Followed()
                tg.start_soon(follow_from, store, "s", 1, first)
                await other.append("s", [delta("s", 2)], 1)
                await first.reach(1)
                # A tail starting where this store last wrote (seq 1) must read:
                # the log goes on past it, written elsewhere.
                second = Followed()
                tg.start_soon(follow_from, store, "s", 1, second)
                await second.reach(1)
                assert second == [delta("s", 2)]
                # Unwatched, then written elsewhere: the poller's first look tells.
                tg.cancel_scope.cancel()
        await other.append("s", [delta("s", 3)], 2)
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                third = Followed()
                tg.start_soon(follow_from, store, "s", 2, third)
                await third.reach(1)
                assert third == [delta("s", 3)]
                tg.cancel_scope.cancel()
