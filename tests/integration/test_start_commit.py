"""A new session's start events go into the store with its run's first batch.

``ExecutorService.start`` hands ``session_created`` and ``run_started`` to the
run's writer unsaved: the run begins at once and the writer commits them
with the run's first events (a fast run's whole log in one commit), and the
start answers only once they are durable. These tests hold that to its
rules on a real SQLite file: nothing is visible before it is durable, a
slow run does not hold the start, a retried start runs nothing, a start
that loses its id to another writer writes nothing, and a failed commit
fails the start and leaves no session behind.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio
import pytest
from wrapped_store import WrappedStore

from helix_agents import AgentExecutor, define_agent
from helix_agents.errors import AgentServerError, StoreError
from helix_agents.events import Completed, Event, RunStarted, SessionCreated
from helix_agents.models import LLMRequest, LLMResponse, LLMStreamEvent, LLMTextDelta, ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore, SqliteEventStore

TIMEOUT = 20  # seconds per test; generous, nothing is timed


class Watched(WrappedStore):
    """Records each append (session, first seq, size); can hold or fail a session's first one."""

    def __init__(self, inner: SqliteEventStore | MemoryEventStore) -> None:
        super().__init__(inner)
        self.appends: list[tuple[str, int, int]] = []
        self.hold: dict[str, anyio.Event] = {}  # session -> released when set
        self.held = anyio.Event()
        self.fail_first: set[str] = set()
        self.before_first: dict[str, list[Event]] = {}  # another writer's log, written first

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        if expected_seq == 0:
            foreign = self.before_first.pop(session_id, None)
            if foreign is not None:
                await self.inner.append(session_id, foreign, 0)
            gate = self.hold.get(session_id)
            if gate is not None:
                self.held.set()
                await gate.wait()
            if session_id in self.fail_first:
                self.fail_first.discard(session_id)
                raise StoreError("disk on fire")
        last = await self.inner.append(session_id, events, expected_seq)
        self.appends.append((session_id, expected_seq + 1, len(events)))
        return last


class GatedLLM:
    """Streams one delta, then waits for ``go`` before finishing; counts its calls."""

    def __init__(self) -> None:
        self.go = anyio.Event()
        self.calls = 0

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        self.calls += 1
        yield LLMTextDelta(text="thinking ")
        await self.go.wait()
        yield LLMResponse(content="thinking done")


def _request(session_id: str, agent_type: str = "writer") -> RemoteStartRequest:
    return RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")


def _counting(texts: list[str]) -> tuple[ScriptedLLM, list[int]]:
    calls: list[int] = []
    answers = iter(texts)

    def script(request: LLMRequest) -> str:
        calls.append(1)
        return next(answers)

    return ScriptedLLM(script, chunk_words=1), calls


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Watched]:
    inner = SqliteEventStore(tmp_path / "events.db")
    try:
        yield Watched(inner)
    finally:
        await inner.close()


async def test_a_fast_run_and_its_start_share_one_commit(store: Watched) -> None:
    writer = define_agent("writer", llm=ScriptedLLM(["one two three four five"], chunk_words=1))
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:
            response = await executor.service.start(_request("fast"))
            log = await store.read("fast")
            await executor.wait_idle("fast")
    # The answer came once the whole log was durable: the run had finished
    # within the commit window, so start and body went in as one batch.
    assert store.appends == [("fast", 1, len(log))]
    assert isinstance(log[0], SessionCreated)
    assert log[0].run_id == response.run_id
    assert isinstance(log[1], RunStarted)
    assert isinstance(log[-1], Completed)


async def test_nothing_is_visible_and_the_start_waits_until_the_commit_is_durable(
    store: Watched,
) -> None:
    writer = define_agent("writer", llm=ScriptedLLM(["hello world"], chunk_words=1))
    store.hold["held"] = anyio.Event()
    answered: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:

            async def start() -> None:
                answered.append((await executor.service.start(_request("held"))).run_id)

            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                await store.held.wait()  # the combined batch is at the store's door
                for _ in range(20):
                    await anyio.lowlevel.checkpoint()
                assert answered == []  # no answer before the commit
                assert await store.read("held") == []  # and nothing for readers either
                status = await _status_error(executor, "held")
                assert status == "NOT_FOUND"
                store.hold["held"].set()
            await executor.wait_idle("held")
            log = await store.read("held")
    assert answered == [log[0].run_id]
    assert isinstance(log[-1], Completed)


async def _status_error(executor: AgentExecutor, session_id: str) -> str:
    try:
        await executor.service.get_status(session_id)
    except AgentServerError as exc:
        return exc.code
    return "found"


async def test_a_slow_run_does_not_hold_its_start(store: Watched) -> None:
    llm = GatedLLM()
    writer = define_agent("writer", llm=llm)
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:
            response = await executor.service.start(_request("slow"))
            # Answered while the model is still streaming: the start went in
            # alone when the window closed, with what the run had by then.
            log = await store.read("slow")
            assert [type(event) for event in log[:2]] == [SessionCreated, RunStarted]
            assert not any(isinstance(event, Completed) for event in log)
            assert executor.is_executing("slow")
            assert store.appends[0][:2] == ("slow", 1)
            llm.go.set()
            await executor.wait_idle("slow")
            log = await store.read("slow")
    assert log[0].run_id == response.run_id  # type: ignore[attr-defined]
    assert isinstance(log[-1], Completed)
    assert len(store.appends) >= 2


async def test_a_retried_start_runs_nothing(store: Watched) -> None:
    llm, calls = _counting(["first answer"])
    writer = define_agent("writer", llm=llm)
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:
            first = await executor.service.start(_request("again"))
            await executor.wait_idle("again")
            appends = len(store.appends)
            with pytest.raises(AgentServerError) as refused:
                await executor.service.start(_request("again"))
            assert not executor.is_executing("again")
    assert refused.value.code == "ALREADY_COMPLETED"
    assert calls == [1]  # the model was asked once, for the first start only
    assert len(store.appends) == appends  # the retry wrote nothing
    log = await store.read("again")
    assert [e.run_id for e in log if isinstance(e, SessionCreated)] == [first.run_id]


async def test_a_retry_while_the_first_start_commits_gets_the_same_run(store: Watched) -> None:
    llm = GatedLLM()
    writer = define_agent("writer", llm=llm)
    store.hold["twice"] = anyio.Event()
    run_ids: list[str] = []
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:

            async def start() -> None:
                run_ids.append((await executor.service.start(_request("twice"))).run_id)

            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                await store.held.wait()
                tg.start_soon(start)  # waits for the first: same id, same request
                for _ in range(20):
                    await anyio.lowlevel.checkpoint()
                assert run_ids == []
                store.hold["twice"].set()
            llm.go.set()
            await executor.wait_idle("twice")
            log = await store.read("twice")
    assert len(run_ids) == 2
    assert run_ids[0] == run_ids[1] == log[0].run_id  # type: ignore[attr-defined]
    assert llm.calls == 1
    assert isinstance(log[-1], Completed)


async def test_a_start_that_loses_its_id_to_another_writer_writes_nothing(
    store: Watched,
) -> None:
    llm, calls = _counting(["ours"])
    writer = define_agent("writer", llm=llm)
    # Another process creates the session between our look at the log and
    # our commit; its run is its own (another run id).
    theirs = [
        SessionCreated(session_id="raced", seq=1, ts=1.0, agent_type="writer", run_id="run_theirs"),
        RunStarted(session_id="raced", seq=2, ts=1.0, run_id="run_theirs"),
    ]
    store.before_first["raced"] = theirs
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:
            with pytest.raises(AgentServerError) as refused:
                # The message differs from theirs (none): a different request.
                await executor.service.start(_request("raced"))
            await executor.wait_idle("raced")
            log = await store.read("raced")
    assert refused.value.code == "ALREADY_RUNNING"
    assert log == theirs  # our run's events were never written
    assert calls in ([], [1])  # it may have asked the model: nothing of it was kept


async def test_a_start_whose_commit_fails_fails_and_leaves_nothing(store: Watched) -> None:
    writer = define_agent("writer", llm=ScriptedLLM(["a b c"], chunk_words=1))
    store.fail_first.add("broken")
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [writer]) as executor:
            with pytest.raises(StoreError):
                await executor.service.start(_request("broken"))
            await executor.wait_idle("broken")
            assert await store.read("broken") == []
            assert not executor.is_executing("broken")
            # The id is free: the same start now goes through and completes.
            response = await executor.service.start(_request("broken"))
            await executor.wait_idle("broken")
            log = await store.read("broken")
    assert log[0].run_id == response.run_id  # type: ignore[attr-defined]
    assert isinstance(log[-1], Completed)
    assert sum(isinstance(event, SessionCreated) for event in log) == 1


async def test_where_a_commit_is_no_fsync_the_start_commits_alone_and_first() -> None:
    """The memory store (and JetStream) do not say ``shares_start_commit``: the start's two
    events are their own append, before the run's, and a retry finds them by the conflict."""
    store = Watched(MemoryEventStore())
    writer, calls = _counting(["one two three"])
    agent = define_agent("writer", llm=writer)
    with anyio.fail_after(TIMEOUT):
        async with AgentExecutor(store, [agent]) as executor:
            response = await executor.service.start(_request("plain"))
            # Durable on answering: the start is in the store whatever the run has done.
            assert [type(e) for e in (await store.read("plain"))[:2]] == [
                SessionCreated,
                RunStarted,
            ]
            await executor.wait_idle("plain")
            with pytest.raises(AgentServerError) as retried:
                await executor.service.start(_request("plain"))
            log = await store.read("plain")
    assert store.appends[0] == ("plain", 1, 2)
    assert len(store.appends) > 1  # the run's events came in later appends
    assert log[0].run_id == response.run_id
    assert retried.value.code == "ALREADY_COMPLETED"
    assert calls == [1]  # the retried start ran nothing
    assert isinstance(log[-1], Completed)
