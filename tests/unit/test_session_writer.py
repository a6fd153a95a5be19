"""``SessionWriter`` on a memory store: stamping, compare-and-append, write-behind, takeovers.

A "foreign" event is one another writer appended straight to the store (an
interrupt request, a client's result, another host's run); the writer finds
it through a ``ConcurrencyConflict`` and folds it before retrying.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
import pytest

from helix_agents import define_agent
from helix_agents.errors import ConcurrencyConflict, OwnershipLost
from helix_agents.events import (
    Aborted,
    AbortRequested,
    ChildChunkForwarded,
    Completed,
    Event,
    Failed,
    HostClaimed,
    Interrupted,
    InterruptRequested,
    RunStarted,
    SessionCreated,
    StateUpdated,
    StepStarted,
    SubSessionStarted,
    TextDelta,
)
from helix_agents.messages import ToolCall
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, tool_end, tool_start
from helix_agents.runtime.writer import SessionWriter, StopRequest
from helix_agents.stores import MemoryEventStore

LIMIT = 5.0
"""Seconds any one test may take."""

S = "session-1"
HOST = "host-a"


class Store(MemoryEventStore):
    """A memory store that counts appends and conflicts, keeps committed batches, and can
    hold an append in flight (``hold``) until the test releases it.
    """

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.conflicts = 0
        self.batches: list[list[Event]] = []
        self.hold: anyio.Event | None = None
        self.entered = anyio.Event()

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        self.calls += 1
        if self.hold is not None:
            self.entered.set()
            await self.hold.wait()
        try:
            last = await super().append(session_id, events, expected_seq)
        except ConcurrencyConflict:
            self.conflicts += 1
            raise
        self.batches.append(list(events))
        return last

    async def last_seq(self, session_id: str) -> int:
        """The seq of the session's last event, 0 if it has none (read from the log)."""
        events = await self.read(session_id)
        return events[-1].seq if events else 0

    async def foreign(self, build: Any) -> Event:
        """Append ``build(seq, ts)`` as another writer would: at the log's end."""
        seq = await self.last_seq(S)
        event: Event = build(seq=seq + 1, ts=time.time())
        event = msgspec.structs.replace(event, session_id=S)
        await MemoryEventStore.append(self, S, [event], seq)
        return event


@asynccontextmanager
async def session(
    *, on_stop: Any = None, host_id: str | None = HOST
) -> AsyncIterator[tuple[Store, SessionWriter]]:
    """A session with ``session_created`` and ``run_started``, and a writer over its log."""
    store = Store()
    now = time.time()
    created = SessionCreated(session_id=S, seq=1, ts=now, agent_type="agent", run_id="run-1")
    started = RunStarted(session_id=S, seq=2, ts=now, run_id="run-1")
    await MemoryEventStore.append(store, S, [created, started], 0)
    writer = SessionWriter(store, await store.read(S), host_id=host_id, on_stop=on_stop)
    try:
        yield store, writer
    finally:
        await store.close()


def delta(text: str) -> TextDelta:
    return TextDelta(agent_id=S, agent_type="agent", delta=text)


def forwarded(child: str, seq: int) -> ChildChunkForwarded:
    chunk = TextDelta(session_id=child, seq=seq, ts=1.0, agent_id=child, agent_type="c", delta="x")
    return ChildChunkForwarded(child_session_id=child, child_seq=seq, chunk=chunk)


def texts(events: Sequence[Event]) -> list[str]:
    return [e.delta for e in events if isinstance(e, TextDelta)]


# --- stamping ----------------------------------------------------------------------------------


async def test_builders_leave_the_envelope_and_the_writer_stamps_it() -> None:
    agent = define_agent("agent")
    call = ToolCall(id="t1", name="lookup", arguments={"q": "x"})
    drafts: list[Event] = [
        StepStarted(step=1),
        tool_start(agent, S, call),
        *result_events(agent, S, call, ToolOutcome(result={"ok": True}), usage=True),
        tool_end(agent, S, call, ToolOutcome(error="again")),
    ]
    assert all((e.session_id, e.seq, e.ts) == ("", 0, 0.0) for e in drafts)
    # Any seq and ts a draft carries is replaced too.
    drafts.append(msgspec.structs.replace(delta("late"), seq=99, ts=-1.0))
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            before = time.time()
            state = await writer.append(*drafts)
            after = time.time()
            stored = await store.read(S, 2)

    assert [e.seq for e in stored] == list(range(3, 3 + len(drafts)))
    assert {e.session_id for e in stored} == {S}
    stamps = {e.ts for e in stored}
    assert len(stamps) == 1  # one batch, one time
    assert before <= stamps.pop() <= after
    unstamped = [msgspec.structs.replace(e, session_id="", seq=0, ts=0.0) for e in stored]
    assert unstamped == [msgspec.structs.replace(e, seq=0, ts=0.0) for e in drafts]
    assert state.last_seq == writer.last_seq == 2 + len(drafts)
    assert store.batches == [stored]


async def test_an_empty_batch_appends_nothing() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            state = await writer.append()
            state = await writer.append_with(lambda _state: [])
            assert store.calls == 0
            assert state.last_seq == 2
            assert await store.last_seq(S) == 2


# --- compare-and-append ------------------------------------------------------------------------


async def test_a_conflict_folds_the_foreign_events_and_rebuilds_the_batch() -> None:
    seen: list[dict[str, Any]] = []

    def increment(state: Any) -> list[Event]:
        seen.append(dict(state.custom_state))
        return [StateUpdated(state={"n": state.custom_state.get("n", 0) + 1})]

    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            await store.foreign(lambda **env: StateUpdated(state={"n": 10}, **env))
            state = await writer.append_with(increment)
            log = await store.read(S)

    assert store.conflicts == 1
    assert seen == [{}, {"n": 10}]  # the factory ran again on the folded state
    assert [e.state for e in log if isinstance(e, StateUpdated)] == [{"n": 10}, {"n": 11}]
    assert [e.seq for e in log] == [1, 2, 3, 4]
    assert state.custom_state == {"n": 11}
    assert writer.last_seq == 4


async def test_pending_events_survive_a_conflict_and_keep_their_order() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            writer.emit(delta("a"), delta("b"))
            await store.foreign(lambda **env: StateUpdated(state={"k": 1}, **env))
            await writer.append(delta("c"))
            log = await store.read(S)

    assert store.conflicts == 1
    assert isinstance(log[2], StateUpdated)
    assert texts(log[3:]) == ["a", "b", "c"]
    assert [e.seq for e in log] == [1, 2, 3, 4, 5, 6]
    assert writer.state.custom_state == {"k": 1}


async def test_concurrent_appends_are_serialised_by_the_lock() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            store.hold = anyio.Event()
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer.append, delta("first"))
                await store.entered.wait()
                tg.start_soon(writer.append, delta("second"))
                await anyio.wait_all_tasks_blocked()
                assert store.calls == 1  # the second waits for the lock, not the store
                store.hold.set()
            log = await store.read(S)

    assert store.conflicts == 0
    assert store.calls == 2
    assert texts(log) == ["first", "second"]
    assert [e.seq for e in log] == [1, 2, 3, 4]


# --- write-behind ------------------------------------------------------------------------------


async def test_emit_is_written_behind_by_the_flusher_in_one_batch() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer), anyio.create_task_group() as tg:
            writer.emit(delta("a"), delta("b"))
            writer.emit(delta("c"))
            assert await store.last_seq(S) == 2  # handed over, not yet written
            assert writer.last_seq == 2
            tg.start_soon(writer.flush_forever)
            events = store.tail(S, 2)
            try:
                committed = [await anext(events) for _ in range(3)]
            finally:
                await events.aclose()  # type: ignore[attr-defined]  # a tail is a generator
            tg.cancel_scope.cancel()

    assert texts(committed) == ["a", "b", "c"]
    assert [e.seq for e in committed] == [3, 4, 5]
    assert store.batches == [committed]  # a burst shares one commit
    assert writer.last_seq == 5


async def test_append_carries_pending_events_before_its_own_in_one_batch() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            writer.emit(delta("a"), delta("b"))
            state = await writer.append(StateUpdated(state={"done": True}))
            log = await store.read(S, 2)

    assert [type(e) for e in log] == [TextDelta, TextDelta, StateUpdated]
    assert texts(log) == ["a", "b"]
    assert store.batches == [log]
    assert state.last_seq == 5
    assert state.custom_state == {"done": True}


async def test_events_emitted_during_an_append_stay_pending_for_the_next() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer), anyio.create_task_group() as tg:
            store.hold = anyio.Event()
            done = anyio.Event()

            async def append_c() -> None:
                await writer.append(delta("c"))
                done.set()

            writer.emit(delta("a"))
            tg.start_soon(append_c)
            await store.entered.wait()
            writer.emit(delta("d"))  # while "a", "c" are in flight
            store.hold.set()
            await done.wait()
            assert texts(await store.read(S)) == ["a", "c"]
            store.hold = None
            await writer.append(delta("e"))
            log = await store.read(S, 2)

    assert texts(log) == ["a", "c", "d", "e"]
    assert [texts(batch) for batch in store.batches] == [["a", "c"], ["d", "e"]]


async def test_held_child_seq_counts_emitted_but_uncommitted_chunks() -> None:
    child, other = "child-1", "child-2"
    with anyio.fail_after(LIMIT):
        async with session() as (_store, writer):
            await writer.append(
                SubSessionStarted(sub_session_id=child, agent_type="c", tool_call_id="t1"),
                SubSessionStarted(sub_session_id=other, agent_type="c", tool_call_id="t2"),
                forwarded(child, 1),
                forwarded(child, 2),
            )
            assert writer.held_child_seq(child) == 2
            assert writer.held_child_seq(other) == 0
            writer.emit(forwarded(child, 3), forwarded(other, 7), forwarded(child, 5))
            assert writer.held_child_seq(child) == 5
            assert writer.held_child_seq(other) == 7
            # A child whose start is itself still pending: only the pending chunks count.
            writer.emit(
                SubSessionStarted(sub_session_id="child-3", agent_type="c", tool_call_id="t3"),
                forwarded("child-3", 4),
            )
            assert "child-3" not in writer.state.sub_sessions
            assert writer.held_child_seq("child-3") == 4
            assert writer.held_child_seq("never-started") == 0
            await writer.append()  # commits everything pending
            assert writer.held_child_seq(child) == 5
            assert writer.state.sub_sessions[child].last_child_seq == 5
            assert writer.held_child_seq("child-3") == 4


# --- other writers -----------------------------------------------------------------------------

TAKEOVERS = [
    pytest.param(lambda **env: RunStarted(run_id="run-2", mode="resume", **env), id="run_started"),
    pytest.param(lambda **env: HostClaimed(host_id="host-b", **env), id="host_claimed"),
    pytest.param(lambda **env: Completed(output="done", **env), id="completed"),
    pytest.param(lambda **env: Failed(error="boom", **env), id="failed"),
    pytest.param(lambda **env: Aborted(reason="stop", **env), id="aborted"),
    pytest.param(lambda **env: Interrupted(reason="stop", **env), id="interrupted"),
]


@pytest.mark.parametrize("build", TAKEOVERS)
async def test_a_foreign_run_claim_or_ending_raises_ownership_lost(build: Any) -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            foreign = await store.foreign(build)
            writer.emit(delta("pending"))
            with pytest.raises(OwnershipLost):
                await writer.append(delta("mine"))
            log = await store.read(S)

    assert log[-1] == foreign  # nothing of this writer's was appended after it
    assert texts(log) == []
    assert writer.last_seq == 3  # the foreign event was folded


async def test_a_host_claim_by_this_host_is_not_a_takeover() -> None:
    with anyio.fail_after(LIMIT):
        async with session() as (store, writer):
            await store.foreign(lambda **env: HostClaimed(host_id=HOST, **env))
            await writer.append(delta("mine"))
            log = await store.read(S)

    assert texts(log) == ["mine"]
    assert writer.state.host_id == HOST


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        pytest.param(
            lambda **env: InterruptRequested(reason="pause", **env),
            StopRequest("interrupt", "pause"),
            id="interrupt",
        ),
        pytest.param(
            lambda **env: AbortRequested(reason="enough", **env),
            StopRequest("abort", "enough"),
            id="abort",
        ),
    ],
)
async def test_a_foreign_stop_request_calls_on_stop_and_the_append_goes_on(
    build: Any, expected: StopRequest
) -> None:
    stops: list[StopRequest] = []
    with anyio.fail_after(LIMIT):
        async with session(on_stop=stops.append) as (store, writer):
            await store.foreign(build)
            await writer.append(delta("mine"))
            log = await store.read(S)

    assert stops == [expected]
    assert texts(log) == ["mine"]
    assert log[-1].seq == 4
    state = writer.state
    assert state.stop_reason == expected.reason
    assert (state.interrupt_requested, state.abort_requested) == (
        expected.kind == "interrupt",
        expected.kind == "abort",
    )


async def test_a_stop_request_without_on_stop_is_only_folded() -> None:
    with anyio.fail_after(LIMIT):
        async with session(on_stop=None) as (store, writer):
            await store.foreign(lambda **env: InterruptRequested(reason="pause", **env))
            await writer.append(delta("mine"))

    assert writer.state.interrupt_requested
    assert writer.last_seq == 4
