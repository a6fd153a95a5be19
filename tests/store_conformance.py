"""The EventStore conformance suite: every store passes every test here.

Not collected by itself (no ``test_`` prefix): ``tests/unit/test_store_conformance.py``
runs it against the stores that need no server (memory, SQLite) and
``tests/integration/test_store_conformance_nats.py`` against JetStream on a
real nats-server. Each narrows the ``store_backend`` fixture that ``store`` and
``store_factory`` (``tests/conftest.py``) are parametrised by. The helpers
(event builders, tail collectors, racers) serve the backends' own specific tests too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from helix_agents import EventStore
from helix_agents._aio import closing_iter
from helix_agents.errors import (
    ConcurrencyConflict,
    InvalidSessionIdError,
    StoreClosedError,
    StoreError,
    UsageError,
)
from helix_agents.events import Event, SessionCreated, StepStarted, TextDelta, ToolStart
from helix_agents.messages import UserMessage

SID = "session-1"
AGENT = "tester"
TIMEOUT = 30  # seconds; generous, the machine is shared


def make_events(session_id: str, first_seq: int, count: int = 1, *, label: str = "") -> list[Event]:
    """``count`` valid events with seqs ``first_seq, first_seq + 1, ...``.

    Seq 1 is ``SessionCreated``; later seqs alternate ``TextDelta`` (carrying
    ``label`` and the seq, so events of different writers differ) and ``StepStarted``.
    """
    events: list[Event] = []
    for seq in range(first_seq, first_seq + count):
        ts = 1_700_000_000 + seq / 8
        if seq == 1:
            events.append(
                SessionCreated(session_id=session_id, seq=seq, ts=ts, agent_type=AGENT, run_id="r1")
            )
        elif seq % 2 == 0:
            events.append(
                TextDelta(
                    session_id=session_id,
                    seq=seq,
                    ts=ts,
                    agent_id=session_id,
                    agent_type=AGENT,
                    delta=f"{label}#{seq}",
                )
            )
        else:
            events.append(StepStarted(session_id=session_id, seq=seq, ts=ts, step=seq))
    return events


def delta(session_id: str, seq: int, text: str) -> TextDelta:
    """A ``TextDelta`` at ``seq`` whose text identifies who appended it."""
    return TextDelta(
        session_id=session_id,
        seq=seq,
        ts=1_700_000_000 + seq / 8,
        agent_id=session_id,
        agent_type=AGENT,
        delta=text,
    )


async def create(store: EventStore, session_id: str, count: int = 1) -> list[Event]:
    """Create a session with ``count`` events (seqs 1..count) and return them."""
    events = make_events(session_id, 1, count)
    assert await store.append(session_id, events, 0) == count
    return events


@asynccontextmanager
async def tailing(
    store: EventStore,
    session_id: Any,
    from_seq: int = 0,
    kinds: tuple[type[Event], ...] | None = None,
) -> AsyncIterator[AsyncIterator[Event]]:
    """``store.tail(session_id, from_seq, kinds=kinds)``, closed on exit if it can be."""
    async with closing_iter(store.tail(session_id, from_seq, kinds=kinds)) as tail:
        yield tail


async def append_in_batches(store: EventStore, session_id: str, last: int, total: int) -> None:
    """Append ``make_events`` up to 7 at a time until the log, now at ``last``, holds ``total``."""
    while last < total:
        size = min(7, total - last)
        last = await store.append(session_id, make_events(session_id, last + 1, size), last)


async def first_tail_event(store: EventStore, session_id: Any) -> Event:
    """The first event ``store.tail(session_id)`` yields (the tail is closed after)."""
    async with tailing(store, session_id) as tail:
        return await anext(tail)


async def last_seq(store: EventStore, session_id: str) -> int:
    """The seq of the session's last event, 0 if it has none (read from the log)."""
    events = await store.read(session_id)
    return events[-1].seq if events else 0


def assert_gap_free(events: Sequence[Event], session_id: str, first_seq: int = 1) -> None:
    assert [event.seq for event in events] == list(range(first_seq, first_seq + len(events)))
    assert all(event.session_id == session_id for event in events)


# --- append / read ----------------------------------------------------------------


async def test_append_returns_the_last_seq(store: EventStore) -> None:
    assert await store.append(SID, make_events(SID, 1), 0) == 1
    assert await store.append(SID, make_events(SID, 2, 3), 1) == 4
    assert await store.append(SID, make_events(SID, 5), 4) == 5
    assert await store.read(SID) == make_events(SID, 1, 5)


async def test_read_returns_the_events_after_from_seq_in_order(store: EventStore) -> None:
    log: list[Event] = []
    for size in (1, 3, 2, 4):
        batch = make_events(SID, len(log) + 1, size)
        await store.append(SID, batch, len(log))
        log.extend(batch)

    assert await store.read(SID) == log
    for from_seq in range(len(log) + 3):
        events = await store.read(SID, from_seq)
        assert events == log[from_seq:], f"from_seq={from_seq}"
        assert_gap_free(events, SID, first_seq=from_seq + 1)


async def test_read_page_reads_the_log_in_pages_that_add_up_to_it(store: EventStore) -> None:
    log: list[Event] = []
    for size in (1, 3, 2, 4, 30):
        batch = make_events(SID, len(log) + 1, size, label="x" * 40)
        await store.append(SID, batch, len(log))
        log.extend(batch)
    read_page = store.read_page  # type: ignore[attr-defined]  # ReadsPages
    assert await read_page("nobody-here", 0, 100) == ([], False)
    for max_bytes in (1, 300, 10**9):
        for from_seq in (0, 7, len(log) - 1, len(log), len(log) + 2):
            pages: list[list[Event]] = []
            seq, more = from_seq, True
            while more:
                page, more = await read_page(SID, seq, max_bytes)
                assert page or not more, "an empty page is the log's end"
                if not page:
                    break
                pages.append(page)
                seq = page[-1].seq
            assert [event for page in pages for event in page] == log[from_seq:], (
                max_bytes,
                from_seq,
            )
            if max_bytes == 10**9 and from_seq < len(log):
                assert len(pages) == 1  # the whole rest in one page, and it says so
    for bad in (0, -1, True, "64", 1.5):
        with pytest.raises(UsageError):
            await read_page(SID, 0, bad)


async def test_events_round_trip_with_every_field(store: EventStore) -> None:
    events: list[Event] = [
        SessionCreated(
            session_id=SID,
            seq=1,
            ts=1_700_000_000.125,
            agent_type=AGENT,
            run_id="run-x",
            messages=[UserMessage(content="héllo ✓")],
            input={"question": "why?", "n": [1, 2.5, None, True]},
            initial_state={"count": 0, "tags": ["a", "b"]},
            metadata={"owner": "me"},
            parent_session_id="parent:1",
            root_session_id="root.1",
            parent_tool_call_id="call_1",
        ),
        ToolStart(
            session_id=SID,
            seq=2,
            ts=1_700_000_001.5,
            agent_id=SID,
            agent_type=AGENT,
            tool_call_id="call_2",
            tool_name="search",
            arguments={"query": "x" * 1000, "nested": {"deep": [{"k": "v"}]}},
        ),
    ]
    await store.append(SID, events, 0)
    assert await store.read(SID) == events
    assert [type(event) for event in await store.read(SID)] == [SessionCreated, ToolStart]


async def test_unknown_session_reads_empty_and_is_not_created(store: EventStore) -> None:
    await create(store, "other")
    assert await store.read("nobody") == []
    assert await store.read("nobody", 3) == []
    assert await store.list_sessions() == ["other"]


async def test_list_sessions_is_sorted(store: EventStore) -> None:
    assert await store.list_sessions() == []
    ids = ["b", "A", "a-1", "a.1", "a:1", "a_1", "Z9", "0", "ab", "a"]
    for session_id in ids:
        await create(store, session_id)
    assert await store.list_sessions() == sorted(ids)


async def test_session_heads_are_each_sessions_last_seq(store: EventStore) -> None:
    assert await store.session_heads() == {}
    await create(store, "one", 1)
    await create(store, "many", 7)
    await create(store, "gone", 3)
    assert await store.session_heads() == {"one": 1, "many": 7, "gone": 3}
    await store.append("one", make_events("one", 2, 4), 1)
    await store.delete("gone")
    assert await store.session_heads() == {"one": 5, "many": 7}
    assert sorted(await store.session_heads()) == await store.list_sessions()


# --- delete -------------------------------------------------------------------------


async def test_delete_removes_the_whole_log_and_nothing_else(store: EventStore) -> None:
    await create(store, SID, 3)
    kept = await create(store, "kept", 4)

    assert await store.delete(SID) is True
    assert await store.read(SID) == []
    assert await store.list_sessions() == ["kept"]
    assert await store.read("kept") == kept
    assert await store.delete(SID) is False


async def test_delete_unknown_session_returns_false(store: EventStore) -> None:
    kept = await create(store, "kept", 2)
    assert await store.delete("nobody") is False
    assert await store.list_sessions() == ["kept"]
    assert await store.read("kept") == kept


async def test_a_deleted_session_can_be_created_again(store: EventStore) -> None:
    await create(store, SID, 5)
    await store.delete(SID)
    with pytest.raises(ConcurrencyConflict):
        await store.append(SID, make_events(SID, 6), 5)
    fresh = make_events(SID, 1, 2, label="again")
    assert await store.append(SID, fresh, 0) == 2
    assert await store.read(SID) == fresh
    assert await store.list_sessions() == [SID]


# --- compare-and-append ---------------------------------------------------------------


@pytest.mark.parametrize(
    "expected_seq",
    [
        pytest.param(0, id="create-existing"),
        pytest.param(1, id="stale"),
        pytest.param(2, id="one-behind"),
        pytest.param(4, id="ahead"),
        pytest.param(10, id="far-ahead"),
    ],
)
async def test_wrong_expected_seq_raises_conflict_and_writes_nothing(
    store: EventStore, expected_seq: int
) -> None:
    log = await create(store, SID, 3)

    with pytest.raises(ConcurrencyConflict) as caught:
        await store.append(SID, make_events(SID, expected_seq + 1, 2), expected_seq)

    conflict = caught.value
    assert isinstance(conflict, StoreError)
    assert (conflict.session_id, conflict.expected_seq, conflict.actual_seq) == (
        SID,
        expected_seq,
        3,
    )
    assert "\n" not in str(conflict)
    assert await store.read(SID) == log
    # The store is still usable at the right position.
    assert await store.append(SID, make_events(SID, 4), 3) == 4


async def test_conflict_on_an_unknown_session_creates_nothing(store: EventStore) -> None:
    with pytest.raises(ConcurrencyConflict) as caught:
        await store.append(SID, make_events(SID, 4, 2), 3)
    assert (caught.value.expected_seq, caught.value.actual_seq) == (3, 0)
    assert await store.read(SID) == []
    assert await store.list_sessions() == []


def _bad_batches() -> list[Any]:
    two = make_events(SID, 3, 2)
    return [
        pytest.param([], 2, id="empty"),
        pytest.param(make_events(SID, 4, 2), 2, id="first-seq-too-high"),
        pytest.param(make_events(SID, 2, 2), 2, id="first-seq-too-low"),
        pytest.param([two[0], *make_events(SID, 5)], 2, id="gap"),
        pytest.param([two[0], two[0]], 2, id="duplicate"),
        pytest.param(two[::-1], 2, id="reversed"),
        pytest.param(make_events("other", 3, 2), 2, id="foreign-session"),
        pytest.param([two[0], *make_events("other", 4)], 2, id="foreign-second-event"),
        pytest.param(make_events(SID, 0), -1, id="negative-expected"),
        pytest.param(make_events(SID, 2), True, id="bool-expected"),
        pytest.param(make_events(SID, 3), "2", id="str-expected"),
        pytest.param(make_events(SID, 3), 2.0, id="float-expected"),
    ]


@pytest.mark.parametrize(("batch", "expected_seq"), _bad_batches())
async def test_a_malformed_batch_is_a_usage_error_and_writes_nothing(
    store: EventStore, batch: list[Event], expected_seq: Any
) -> None:
    log = await create(store, SID, 2)

    with pytest.raises(UsageError) as caught:
        await store.append(SID, batch, expected_seq)

    assert not isinstance(caught.value, ConcurrencyConflict)
    assert await store.read(SID) == log
    assert await store.read("other") == []
    assert await store.list_sessions() == [SID]


ILL_TYPED_FIELDS = [
    pytest.param({"seq": 2.0}, id="float-seq"),
    pytest.param({"seq": True}, id="bool-seq"),
    pytest.param({"ts": None}, id="none-ts"),
    pytest.param({"ts": "now"}, id="str-ts"),
    pytest.param({"agent_id": None}, id="none-agent-id"),
    pytest.param({"delta": 5}, id="int-delta"),
]


@pytest.mark.parametrize("override", ILL_TYPED_FIELDS)
async def test_an_event_that_would_not_read_back_is_a_usage_error(
    store: EventStore, override: dict[str, Any]
) -> None:
    # msgspec does not check types when a struct is built, so such events exist.
    log = await create(store, SID)
    fields: dict[str, Any] = {
        "session_id": SID,
        "seq": 2,
        "ts": 1.0,
        "agent_id": SID,
        "agent_type": AGENT,
        "delta": "x",
    }
    bad = TextDelta(**{**fields, **override})

    with pytest.raises(UsageError):
        await store.append(SID, [bad], 1)
    with pytest.raises(UsageError):
        await store.append(SID, [delta(SID, 2, "fine"), bad], 1)

    assert await store.read(SID) == log


async def test_an_ill_typed_event_does_not_disturb_concurrent_appends(store: EventStore) -> None:
    # The SQLite store commits concurrent appends in one transaction: one bad
    # row must not fail the others.
    outcomes: dict[str, object] = {}

    async def append(session_id: str, ts: Any) -> None:
        event = SessionCreated(session_id=session_id, seq=1, ts=ts, agent_type=AGENT, run_id="r")
        try:
            outcomes[session_id] = await store.append(session_id, [event], 0)
        except UsageError as exc:
            outcomes[session_id] = exc

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(append, "innocent-1", 1.0)
            tg.start_soon(append, "ill-typed", None)
            tg.start_soon(append, "innocent-2", 2.0)

    assert outcomes["innocent-1"] == 1
    assert outcomes["innocent-2"] == 1
    assert isinstance(outcomes["ill-typed"], UsageError)
    assert await store.list_sessions() == ["innocent-1", "innocent-2"]


# --- session ids ----------------------------------------------------------------------

INVALID_SESSION_IDS = [
    pytest.param("", id="empty"),
    pytest.param("a" * 257, id="257-chars"),
    pytest.param("a/b", id="slash"),
    pytest.param("a b", id="space"),
    pytest.param("a*", id="star"),
    pytest.param("a>", id="gt"),
    pytest.param("a\nb", id="newline"),
    pytest.param("ab\n", id="trailing-newline"),
    pytest.param("é", id="non-ascii"),
    pytest.param(42, id="int"),
    pytest.param(None, id="none"),
    pytest.param(b"abc", id="bytes"),
]


@pytest.mark.parametrize("bad_id", INVALID_SESSION_IDS)
async def test_invalid_session_ids_are_rejected_and_change_nothing(
    store: EventStore, bad_id: Any
) -> None:
    log = await create(store, SID, 2)

    with pytest.raises(InvalidSessionIdError):
        await store.append(bad_id, make_events(bad_id, 1), 0)
    with pytest.raises(InvalidSessionIdError):
        await store.read(bad_id)
    with pytest.raises(InvalidSessionIdError):
        await store.delete(bad_id)
    with pytest.raises(InvalidSessionIdError):
        await first_tail_event(store, bad_id)

    assert await store.list_sessions() == [SID]
    assert await store.read(SID) == log


async def test_the_longest_valid_session_id_is_accepted(store: EventStore) -> None:
    longest = "a" * 256
    events = await create(store, longest, 2)
    assert await store.read(longest) == events
    assert await store.list_sessions() == [longest]
    assert await store.delete(longest) is True


# --- concurrency ----------------------------------------------------------------------


async def test_concurrent_writers_on_different_sessions_all_land(store: EventStore) -> None:
    sessions, appends = 50, 20

    async def writer(session_id: str) -> None:
        for seq in range(1, appends + 1):
            assert await store.append(session_id, make_events(session_id, seq), seq - 1) == seq

    with anyio.fail_after(TIMEOUT * 2):
        async with anyio.create_task_group() as tg:
            for index in range(sessions):
                tg.start_soon(writer, f"w-{index:02d}")

    ids = [f"w-{index:02d}" for index in range(sessions)]
    assert await store.list_sessions() == ids
    for session_id in ids:
        assert await store.read(session_id) == make_events(session_id, 1, appends)


async def _race_to_append(
    store: EventStore,
    name: str,
    expected: int,
    go: anyio.Event,
    won: list[str],
    lost: list[ConcurrencyConflict],
) -> None:
    """Wait for ``go``, then append one event labelled ``name`` at ``expected``."""
    await go.wait()
    try:
        result = await store.append(SID, [delta(SID, expected + 1, name)], expected)
    except ConcurrencyConflict as conflict:
        lost.append(conflict)
    else:
        assert result == expected + 1
        won.append(name)


async def race_round(racers: Sequence[tuple[EventStore, str]], expected: int) -> str:
    """Let every racer append at ``expected`` at once; check one won; return its name."""
    go = anyio.Event()
    won: list[str] = []
    lost: list[ConcurrencyConflict] = []
    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for store, name in racers:
                tg.start_soon(_race_to_append, store, name, expected, go, won, lost)
            await anyio.wait_all_tasks_blocked()
            go.set()
    assert len(won) == 1, f"seq {expected + 1}: winners {won}"
    assert len(lost) == len(racers) - 1
    for conflict in lost:
        assert (conflict.session_id, conflict.expected_seq, conflict.actual_seq) == (
            SID,
            expected,
            expected + 1,
        )
    return won[0]


@pytest.mark.parametrize("writers", [2, 10])
async def test_racing_writers_on_one_session_exactly_one_wins_each_seq(
    store: EventStore, writers: int
) -> None:
    rounds = 12
    await create(store, SID)
    racers = [(store, f"w{index}") for index in range(writers)]

    winners = [await race_round(racers, expected) for expected in range(1, rounds + 1)]

    log = await store.read(SID)
    assert_gap_free(log, SID)
    assert len(log) == rounds + 1
    # Each seq holds exactly its winner's event, nobody else's.
    assert log[1:] == [delta(SID, seq, name) for seq, name in enumerate(winners, start=2)]


async def test_racing_writers_that_retry_all_land_once(store: EventStore) -> None:
    writers, per_writer = 10, 8
    await create(store, SID)
    conflicts: list[tuple[int, int]] = []

    async def writer(index: int) -> None:
        done = 0
        while done < per_writer:
            last = await last_seq(store, SID)
            await anyio.lowlevel.checkpoint()  # let the others move the log on meanwhile
            try:
                await store.append(SID, [delta(SID, last + 1, f"w{index}-{done}")], last)
            except ConcurrencyConflict as conflict:
                conflicts.append((last, conflict.actual_seq))
            else:
                done += 1

    with anyio.fail_after(TIMEOUT * 2):
        async with anyio.create_task_group() as tg:
            for index in range(writers):
                tg.start_soon(writer, index)

    log = await store.read(SID)
    assert_gap_free(log, SID)
    texts = [event.delta for event in log[1:] if isinstance(event, TextDelta)]
    # Every append landed exactly once: no loss, no duplicate.
    assert sorted(texts) == sorted(
        f"w{index}-{done}" for index in range(writers) for done in range(per_writer)
    )
    assert len(log) == 1 + writers * per_writer
    assert conflicts  # the writers really raced
    assert all(actual > expected for expected, actual in conflicts)


async def test_a_batch_is_seen_whole_by_concurrent_readers(store: EventStore) -> None:
    size, batches = 5, 20
    final = size * batches
    snapshots: list[int] = []

    async def reader() -> None:
        while True:
            events = await store.read(SID)
            assert len(events) % size == 0, f"torn batch: read {len(events)} events"
            assert events == make_events(SID, 1, len(events))
            snapshots.append(len(events))
            if len(events) == final:
                return
            await anyio.lowlevel.checkpoint()  # the memory store's read never yields

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(reader)
            for index in range(batches):
                await store.append(SID, make_events(SID, index * size + 1, size), index * size)
                await anyio.lowlevel.checkpoint()

    assert len(set(snapshots)) > 1  # the readers ran while the batches landed
    assert await last_seq(store, SID) == final


async def test_a_cancelled_append_landed_whole_or_not_at_all(store: EventStore) -> None:
    sessions = [f"c-{index:02d}" for index in range(40)]
    for session_id in sessions:
        await create(store, session_id)
    returned: set[str] = set()
    batch_size = 3

    async def append(session_id: str, scope: anyio.CancelScope) -> None:
        with scope:
            await store.append(session_id, make_events(session_id, 2, batch_size), 1)
            returned.add(session_id)

    async def cancel_later(scope: anyio.CancelScope, index: int) -> None:
        # Spread the cancellations over every phase of an append: before it
        # starts, while queued, while its batch commits, after it returned.
        if index % 4 == 3:
            await anyio.sleep(0.0005 * index)
        else:
            for _ in range(index):
                await anyio.lowlevel.checkpoint()
        scope.cancel()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for index, session_id in enumerate(sessions):
                scope = anyio.CancelScope()
                tg.start_soon(append, session_id, scope)
                tg.start_soon(cancel_later, scope, index)

    for session_id in sessions:
        log = await store.read(session_id)
        assert log in (make_events(session_id, 1), make_events(session_id, 1, 1 + batch_size))
        if session_id in returned:
            assert len(log) == 1 + batch_size
    # The store still works afterwards, at the position the log shows.
    with anyio.fail_after(TIMEOUT):
        for session_id in sessions:
            last = await last_seq(store, session_id)
            assert (
                await store.append(session_id, make_events(session_id, last + 1), last) == last + 1
            )


# --- tail -----------------------------------------------------------------------------


async def collect_tail(
    store: EventStore,
    session_id: str,
    from_seq: int,
    until: int,
    caught_up_at: int,
    caught_up: anyio.Event,
    into: list[Event],
) -> None:
    """Put tail events into ``into`` until it holds ``until``.

    ``caught_up`` is set once ``into`` holds ``caught_up_at`` events.
    """
    if caught_up_at == 0:
        caught_up.set()
    async with tailing(store, session_id, from_seq) as tail:
        async for event in tail:
            into.append(event)
            if len(into) == caught_up_at:
                caught_up.set()
            if len(into) == until:
                return


async def test_tail_yields_existing_events_then_new_ones(store: EventStore) -> None:
    await create(store, SID, 3)
    seen: list[Event] = []
    caught_up = anyio.Event()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect_tail, store, SID, 0, 9, 3, caught_up, seen)
            await caught_up.wait()
            await anyio.wait_all_tasks_blocked()
            await store.append(SID, make_events(SID, 4, 2), 3)
            await store.append(SID, make_events(SID, 6), 5)
            await store.append(SID, make_events(SID, 7, 3), 6)

    assert seen == make_events(SID, 1, 9)


async def test_tail_of_a_session_that_does_not_exist_yet(store: EventStore) -> None:
    seen: list[Event] = []
    caught_up = anyio.Event()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect_tail, store, SID, 0, 3, 0, caught_up, seen)
            await caught_up.wait()
            await anyio.wait_all_tasks_blocked()
            await create(store, "other", 2)  # another session's appends are not yielded
            await create(store, SID, 3)

    assert seen == make_events(SID, 1, 3)


async def test_tail_from_every_seq(store: EventStore) -> None:
    await create(store, SID, 6)

    # Each round tails from the next seq and appends one event while it waits.
    for from_seq in range(8):
        last = await last_seq(store, SID)
        seen: list[Event] = []
        caught_up = anyio.Event()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(
                    collect_tail, store, SID, from_seq, last - from_seq + 1, last - from_seq,
                    caught_up, seen,
                )  # fmt: skip
                await caught_up.wait()
                await anyio.wait_all_tasks_blocked()
                await store.append(SID, make_events(SID, last + 1), last)

        assert seen == make_events(SID, from_seq + 1, last + 1 - from_seq), f"from {from_seq}"


async def test_tail_from_beyond_the_end_yields_only_later_events(store: EventStore) -> None:
    await create(store, SID, 2)
    seen: list[Event] = []
    caught_up = anyio.Event()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect_tail, store, SID, 4, 2, 0, caught_up, seen)
            await caught_up.wait()
            await anyio.wait_all_tasks_blocked()
            await store.append(SID, make_events(SID, 3, 2), 2)
            await store.append(SID, make_events(SID, 5, 2), 4)

    assert seen == make_events(SID, 5, 2)


async def test_two_concurrent_tails_both_see_everything_exactly_once(store: EventStore) -> None:
    await create(store, SID, 2)
    total = 2 + sum(range(1, 11))
    first: list[Event] = []
    second: list[Event] = []
    later: list[Event] = []
    ready = [anyio.Event(), anyio.Event(), anyio.Event()]

    async def writer() -> None:
        last = 2
        for size in range(1, 11):
            last = await store.append(SID, make_events(SID, last + 1, size), last)
            if size % 3 == 0:
                await anyio.wait_all_tasks_blocked()

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(collect_tail, store, SID, 0, total, 2, ready[0], first)
            tg.start_soon(collect_tail, store, SID, 0, total, 2, ready[1], second)
            tg.start_soon(collect_tail, store, SID, 1, total - 1, 1, ready[2], later)
            for event in ready:
                await event.wait()
            tg.start_soon(writer)

    everything = await store.read(SID)
    assert len(everything) == total
    assert first == everything
    assert second == everything
    assert later == everything[1:]


@pytest.mark.parametrize("appended", [300, 1500])
async def test_a_tail_that_falls_behind_yields_every_event_once(
    store: EventStore, appended: int
) -> None:
    await create(store, SID, 2)
    total = 2 + appended
    with anyio.fail_after(TIMEOUT):
        async with tailing(store, SID) as tail:
            seen = [await anext(tail), await anext(tail)]
            # The tail is parked at a yield while many appends land (1500 is
            # more than a store may buffer for one tail).
            await append_in_batches(store, SID, 2, total)
            while len(seen) < total:
                seen.append(await anext(tail))
            # And it keeps following.
            await store.append(SID, make_events(SID, total + 1), total)
            seen.append(await anext(tail))
    assert seen == make_events(SID, 1, total + 1)


async def test_a_tail_of_kinds_yields_only_those_exactly_once_in_order(store: EventStore) -> None:
    """``kinds``: from the log, then live, past long runs of other events (a run's watcher)."""
    await create(store, SID, 3)  # created, a delta, a step
    with anyio.fail_after(TIMEOUT):
        async with tailing(store, SID, 0, (StepStarted,)) as tail:
            seen = [await anext(tail)]
            last = 3
            for round_ in range(6):
                # Many appends of nothing it wants, then one step among deltas.
                for _ in range(round_ * 7):
                    last = await store.append(SID, [delta(SID, last + 1, "x")], last)
                last = await store.append(SID, make_events(SID, last + 1, 3), last)
                while len(seen) < round_ + 2:
                    seen.append(await anext(tail))
            # A tail of kinds from the middle of the log.
            async with tailing(store, SID, last - 4, (StepStarted,)) as later:
                middle = [await anext(later)]
                last = await store.append(SID, make_events(SID, last + 1, 2), last)
                middle.append(await anext(later))
    steps = [event for event in await store.read(SID) if isinstance(event, StepStarted)]
    assert seen == steps[: len(seen)]
    assert [event.seq for event in seen] == sorted({event.seq for event in seen})
    assert len(seen) == 7
    assert middle == [event for event in steps if event.seq > last - 6][:2]


@pytest.mark.parametrize("appended", [300, 1500])
async def test_a_tail_of_kinds_that_falls_behind_yields_each_of_them_once(
    store: EventStore, appended: int
) -> None:
    await create(store, SID, 2)
    total = 2 + appended
    with anyio.fail_after(TIMEOUT):
        async with tailing(store, SID, kinds=(TextDelta,)) as tail:
            seen = [await anext(tail)]  # the delta at seq 2
            await append_in_batches(store, SID, 2, total)
            wanted = [e for e in await store.read(SID) if isinstance(e, TextDelta)]
            while len(seen) < len(wanted):
                seen.append(await anext(tail))
    assert seen == wanted


async def test_a_tail_yields_the_same_events_as_read(store_factory: Any) -> None:
    store = await store_factory.open()
    await create(store, SID)
    # Values JSON does not keep as they are: a tuple, an int dict key, an int ts.
    odd = ToolStart(
        session_id=SID,
        seq=2,
        ts=1_700_000_002,
        agent_id=SID,
        agent_type=AGENT,
        tool_call_id="call_1",
        tool_name="t",
        arguments={"pair": (1, 2), 3: "three"},
    )
    with anyio.fail_after(TIMEOUT):
        async with tailing(store, SID) as tail:
            await anext(tail)  # caught up: the next event comes from the append
            await store.append(SID, [odd], 1)
            tailed = await anext(tail)
    assert tailed == (await store.read(SID))[1]


async def test_a_tail_left_early_does_not_disturb_the_store(store: EventStore) -> None:
    await create(store, SID, 4)
    async with tailing(store, SID) as tail:
        async for event in tail:
            if event.seq == 2:
                break
    assert await store.append(SID, make_events(SID, 5), 4) == 5
    assert await store.read(SID) == make_events(SID, 1, 5)


# --- close and reopen -----------------------------------------------------------------


async def test_operations_after_close_raise_store_closed(store: EventStore) -> None:
    await create(store, SID, 2)
    await store.close()

    with pytest.raises(StoreClosedError):
        await store.append(SID, make_events(SID, 3), 2)
    with pytest.raises(StoreClosedError):
        await store.read(SID)
    with pytest.raises(StoreClosedError):
        await store.list_sessions()
    with pytest.raises(StoreClosedError):
        await store.delete(SID)
    with pytest.raises(StoreClosedError):
        await first_tail_event(store, SID)


async def test_close_is_idempotent(store: EventStore) -> None:
    await create(store, SID)
    await store.close()
    await store.close()
    with pytest.raises(StoreClosedError):
        await store.read(SID)


async def test_a_waiting_tail_ends_with_store_closed_when_the_store_closes(
    store: EventStore,
) -> None:
    await create(store, SID, 2)
    seen: list[Event] = []
    outcome: list[BaseException] = []
    caught_up = anyio.Event()

    async def consume() -> None:
        try:
            await collect_tail(store, SID, 0, -1, 2, caught_up, seen)
        except StoreClosedError as exc:
            outcome.append(exc)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await caught_up.wait()
            await anyio.wait_all_tasks_blocked()
            await store.close()

    assert len(outcome) == 1
    assert seen == make_events(SID, 1, 2)


async def test_close_waits_for_appends_under_way(store_factory: Any) -> None:
    store = await store_factory.open()
    sessions = [f"s-{index:02d}" for index in range(30)]
    started: set[str] = set()
    returned: set[str] = set()
    refused: set[str] = set()

    async def append(session_id: str) -> None:
        started.add(session_id)
        try:
            await store.append(session_id, make_events(session_id, 1, 2), 0)
        except StoreClosedError:
            refused.add(session_id)
        else:
            returned.add(session_id)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for session_id in sessions:
                tg.start_soon(append, session_id)
            await anyio.lowlevel.checkpoint()
            under_way = set(started) - returned
            await store.close()

    assert returned | refused == set(sessions)
    assert under_way <= returned  # close did not cut off an append already under way
    if store_factory.persistent:
        reopened = await store_factory.open()
        assert await reopened.list_sessions() == sorted(returned)
        for session_id in returned:
            assert await reopened.read(session_id) == make_events(session_id, 1, 2)


async def test_reopen_after_close_keeps_every_event(store_factory: Any) -> None:
    if not store_factory.persistent:
        pytest.skip("a memory store keeps nothing once closed: reopening is not meaningful")
    store = await store_factory.open()
    logs: dict[str, list[Event]] = {}
    for index, size in enumerate((1, 4, 7)):
        session_id = f"keep-{index}"
        logs[session_id] = await create(store, session_id, 1)
        batch = make_events(session_id, 2, size)
        await store.append(session_id, batch, 1)
        logs[session_id] += batch
    await store.delete("keep-0")
    del logs["keep-0"]
    await store.close()

    reopened = await store_factory.open()
    assert await reopened.list_sessions() == sorted(logs)
    for session_id, log in logs.items():
        assert await reopened.read(session_id) == log
        # Compare-and-append still knows where each log ends.
        with pytest.raises(ConcurrencyConflict):
            await reopened.append(session_id, make_events(session_id, 2), 1)
        last = len(log)
        assert (
            await reopened.append(session_id, make_events(session_id, last + 1), last) == last + 1
        )
