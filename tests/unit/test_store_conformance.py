"""The EventStore conformance suite on the stores that need no server: memory and SQLite.

The suite itself is ``tests/store_conformance.py`` (JetStream runs it in
``tests/integration/test_store_conformance_nats.py``). The tests at the end are
specific to ``open_store`` URLs and the SQLite store (several store objects on one file).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import anyio
import pytest
from store_conformance import *  # noqa: F403 - the suite's tests, collected here
from store_conformance import (
    SID,
    TIMEOUT,
    assert_gap_free,
    collect_tail,
    create,
    delta,
    make_events,
    race_round,
    tailing,
)

from helix_agents import EventStore
from helix_agents.errors import ConcurrencyConflict, UsageError
from helix_agents.events import Event, StepStarted
from helix_agents.stores import MemoryEventStore, SqliteEventStore, open_store


@pytest.fixture(params=["memory", "sqlite"])
def store_backend(request: pytest.FixtureRequest) -> str:
    """The suite's backends here: the in-process stores."""
    return str(request.param)


# --- SQLite specifics -------------------------------------------------------------------


async def test_open_store_memory_url() -> None:
    store = await open_store("memory://")
    try:
        assert isinstance(store, MemoryEventStore)
        assert await store.append(SID, make_events(SID, 1), 0) == 1
    finally:
        await store.close()


async def test_open_store_relative_sqlite_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    store = await open_store("sqlite:///relative.db")
    try:
        assert isinstance(store, SqliteEventStore)
        await create(store, SID, 2)
    finally:
        await store.close()
    assert (tmp_path / "relative.db").is_file()
    async with SqliteEventStore(tmp_path / "relative.db") as again:
        assert await again.read(SID) == make_events(SID, 1, 2)


@pytest.mark.parametrize("query", ["", "?synchronous=NORMAL", "?synchronous=full"])
async def test_open_store_absolute_sqlite_url(tmp_path: Path, query: str) -> None:
    path = tmp_path / "absolute.db"
    url = f"sqlite:///{path}{query}"
    assert url.startswith("sqlite:////")
    store = await open_store(url)
    try:
        assert isinstance(store, SqliteEventStore)
        assert Path(store.path) == path
        await create(store, SID, 3)
    finally:
        await store.close()
    async with SqliteEventStore(path) as again:
        assert await again.read(SID) == make_events(SID, 1, 3)


@pytest.mark.parametrize(
    "url",
    [
        "",
        "memory",
        "postgres://localhost/db",
        "sqlite:",
        "sqlite://",
        "sqlite:///",
        "sqlite://host/events.db",
        "sqlite:relative.db",
        "sqlite:///events.db?synchronous=OFF",
        "file:///tmp/events.db",
    ],
)
async def test_open_store_rejects_bad_urls(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError):
        await open_store(url)
    assert [path async for path in anyio.Path(tmp_path).iterdir()] == []


async def test_two_sqlite_stores_on_one_file_enforce_compare_and_append(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with SqliteEventStore(path) as a, SqliteEventStore(path) as b:
        # b caches where the log ends by appending itself, then a moves the log on.
        await b.append(SID, make_events(SID, 1), 0)
        await a.append(SID, make_events(SID, 2, label="a"), 1)
        with pytest.raises(ConcurrencyConflict) as caught:
            await b.append(SID, make_events(SID, 2, label="b"), 1)
        assert (caught.value.expected_seq, caught.value.actual_seq) == (1, 2)
        with pytest.raises(ConcurrencyConflict):
            await a.append(SID, make_events(SID, 1), 0)

        # Both race for each next seq: exactly one wins each time.
        racers = [(a, "a"), (b, "b")]
        winners = [await race_round(racers, expected) for expected in range(2, 12)]

        log_a, log_b = await a.read(SID), await b.read(SID)
        assert log_a == log_b
        assert_gap_free(log_a, SID)
        assert log_a[1] == make_events(SID, 2, label="a")[0]  # b's refused event is not there
        assert log_a[2:] == [delta(SID, seq, name) for seq, name in enumerate(winners, start=3)]


async def test_a_tail_on_one_sqlite_store_sees_appends_through_another(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    async with SqliteEventStore(path) as a, SqliteEventStore(path, poll_interval=0.02) as b:
        await create(a, SID, 2)
        seen: list[Event] = []
        caught_up = anyio.Event()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: collect_tail(
                        b, SID, 0, until=6, caught_up_at=2, caught_up=caught_up, into=seen
                    )
                )
                await caught_up.wait()
                await a.append(SID, make_events(SID, 3, 3), 2)
                await a.append(SID, make_events(SID, 6), 5)
        assert seen == make_events(SID, 1, 6)


async def test_a_sqlite_tail_sees_appends_through_its_store_and_another_in_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shared.db"
    async with SqliteEventStore(path, poll_interval=0.01) as a, SqliteEventStore(path) as b:
        await create(a, SID)
        total = 41
        seen: list[Event] = []
        caught_up = anyio.Event()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect_tail, a, SID, 0, total, 1, caught_up, seen)
                await caught_up.wait()
                last = 1
                for index in range(total - 1):
                    writer = b if index % 3 == 0 else a  # b's appends leave gaps in a's feed
                    last = await writer.append(SID, make_events(SID, last + 1), last)
                    if index % 5 == 0:
                        await anyio.wait_all_tasks_blocked()
        assert seen == make_events(SID, 1, total)


async def test_a_sqlite_tail_of_kinds_sees_them_through_its_store_and_another(
    tmp_path: Path,
) -> None:
    """As a run's watcher: its own store's appends of other kinds, a stop request from another."""
    path = tmp_path / "shared.db"
    async with SqliteEventStore(path, poll_interval=0.01) as a, SqliteEventStore(path) as b:
        await create(a, SID)
        with anyio.fail_after(TIMEOUT):
            async with tailing(a, SID, 1, (StepStarted,)) as tail:
                last = 1
                seen: list[Event] = []
                for index in range(12):
                    writer = b if index % 4 == 3 else a  # b's appends reach a by its poller
                    last = await writer.append(SID, [delta(SID, last + 1, "x")], last)
                    step = StepStarted(session_id=SID, seq=last + 1, ts=1.0, step=index)
                    last = await writer.append(SID, [step], last)
                    seen.append(await anext(tail))
        steps = [event for event in await a.read(SID) if isinstance(event, StepStarted)]
        assert seen == steps
        assert [event.step for event in seen] == list(range(12))


async def test_a_sqlite_tail_is_woken_by_appends_without_polling(tmp_path: Path) -> None:
    async with SqliteEventStore(tmp_path / "events.db", poll_interval=None) as store:
        await create(store, SID)
        seen: list[Event] = []
        caught_up = anyio.Event()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    lambda: collect_tail(
                        store, SID, 0, until=4, caught_up_at=1, caught_up=caught_up, into=seen
                    )
                )
                await caught_up.wait()
                await anyio.wait_all_tasks_blocked()
                await store.append(SID, make_events(SID, 2, 3), 1)
        assert seen == make_events(SID, 1, 4)


def test_sqlite_store_refuses_an_in_memory_database() -> None:
    with pytest.raises(UsageError):
        SqliteEventStore(":memory:")


_CLOSE_DURING_READS = textwrap.dedent(
    """
    import sys
    import anyio
    from helix_agents.errors import StoreClosedError
    from helix_agents.events import SessionCreated
    from helix_agents.stores import SqliteEventStore

    async def main(path):
        for attempt in range(100):
            store = SqliteEventStore(path)
            if attempt == 0:
                event = SessionCreated(session_id="s", seq=1, ts=1.0, agent_type="a", run_id="r")
                await store.append("s", [event], 0)
            errors = []

            async def reader():
                try:
                    while True:
                        await store.read("s")
                except StoreClosedError:
                    pass
                except Exception as exc:
                    errors.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(4):
                    tg.start_soon(reader)
                await anyio.sleep(0.005)
                await store.close()
            if errors:
                sys.exit(f"attempt {attempt}: {errors[0]!r}")

    anyio.run(main, sys.argv[1])
    """
)


@pytest.mark.slow
def test_sqlite_close_while_reads_run_raises_only_store_closed(tmp_path: Path) -> None:
    # Regression: close() used to close the read connections under running
    # reads (StoreError, or a segfault), so this runs in a subprocess.
    result = subprocess.run(
        [sys.executable, "-c", _CLOSE_DURING_READS, str(tmp_path / "events.db")],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONFAULTHANDLER": "1"},
        check=False,
    )
    assert result.returncode == 0, f"rc={result.returncode}\n{result.stderr[-2000:]}"


async def test_a_page_ends_with_the_event_that_reaches_its_bound(store: EventStore) -> None:
    """SQLite and memory page by event (JetStream by the batch a direct get returns)."""
    await store.append(SID, make_events(SID, 1, 20, label="y" * 100), 0)
    read_page = store.read_page  # type: ignore[attr-defined]
    page, more = await read_page(SID, 0, 1)
    assert ([event.seq for event in page], more) == ([1], True)
    page, more = await read_page(SID, 3, 250)  # each event is over 100 bytes stored
    assert ([event.seq for event in page], more) == ([4, 5], True)
    page, more = await read_page(SID, 19, 1)
    assert ([event.seq for event in page], more) == ([20], False)
