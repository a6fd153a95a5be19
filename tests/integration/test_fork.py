"""Forks on the built-in runtime (specs/branches.md): a branch at every kind of point.

Each test records a session, forks it, lets the branch run on, and counts on
the model and tool doubles that nothing recorded was called again; the
origin's logs stay byte-for-byte as they were and the store passes ``check``.
"""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, create_sub_agent_tool, define_agent, define_tool
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ApprovalRequested,
    DecideApproval,
    Event,
    ReplaceState,
    ReplaceToolResult,
    ReplaceUserMessage,
    RunStarted,
    SessionForked,
    StepStarted,
    ToolStart,
    UseAgent,
)
from helix_agents.log import encode_event, project_state
from helix_agents.messages import ToolResultMessage, UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.models.base import LLMRequest
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.stores.check import check_store

pytestmark = pytest.mark.anyio


class Q(BaseModel):
    q: str


class Counter:
    """A model double: answers a script by turn and remembers every request."""

    def __init__(self, turns: list[Any]) -> None:
        self.requests: list[LLMRequest] = []
        self.llm = ScriptedLLM(self._answer)
        self.turns = turns

    def _answer(self, request: LLMRequest) -> Any:
        self.requests.append(request)
        done = sum(1 for m in request.messages if type(m).__name__ == "AssistantMessage")
        return self.turns[min(done, len(self.turns) - 1)]


tool_calls: list[str] = []


def _lookup(value: Q, ctx: Any) -> dict[str, str]:
    tool_calls.append(value.q)
    return {"found": value.q.upper()}


lookup = define_tool("lookup", "Look up.", Q, _lookup)
rm = define_tool("rm", "Remove.", Q, _lookup, requires_approval=True)


async def _bytes(store: Any, session_id: str) -> list[bytes]:
    return [encode_event(e) for e in await store.read(session_id)]


async def _until_idle(executor: AgentExecutor, session_id: str) -> None:
    with anyio.fail_after(10):
        while True:
            state = await executor.state(session_id)
            if state.status != "running" and not executor.is_executing(session_id):
                return
            await anyio.sleep(0.01)


def _first(log: list[Event], kind: type[Any], nth: int = 0) -> int:
    return [e.seq for e in log if isinstance(e, kind)][nth]


def _tool_results(state: Any) -> list[str]:
    return [m.content for m in state.messages if isinstance(m, ToolResultMessage)]


@pytest.fixture
async def sqlite(tmp_path: Path) -> Any:
    store = SqliteEventStore(str(tmp_path / "s.db"))
    yield store
    await store.close()


async def _recorded(store: Any, model: Counter, *tools: Any) -> tuple[Any, list[Event]]:
    tool_calls.clear()
    agent = define_agent("a", tools=list(tools) or [lookup], llm=model.llm)
    async with AgentExecutor(store, [agent]) as executor:
        assert await executor.run(agent, "hello", session_id="s1") == "done"
    return agent, await store.read("s1")


async def test_fork_before_a_model_turn_calls_only_that_turn_again(sqlite: Any) -> None:
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(sqlite, model)
    assert (len(model.requests), tool_calls) == (2, ["x"])
    origin = await _bytes(sqlite, "s1")
    second_step = _first(log, StepStarted, 1) - 1  # the tool's result is kept, the turn runs
    async with AgentExecutor(sqlite, [agent]) as executor:
        result = await executor.fork("s1", second_step, new_session_id="b1")
        assert (result.session_id, result.status, result.origin_seq) == ("b1", "running", 9)
        assert result.run_id is not None
        await _until_idle(executor, "b1")
        state = await executor.state("b1")
    assert (state.status, state.output) == ("completed", "done")
    assert (len(model.requests), tool_calls) == (3, ["x"])  # one live model turn, no tool call
    branch = await sqlite.read("b1")
    assert [encode_event(e) for e in branch[:second_step]] != origin[:second_step]  # ids mapped
    marker = branch[second_step]
    assert isinstance(marker, SessionForked)
    assert (marker.origin_session_id, marker.origin_seq, marker.edits) == ("s1", 9, [])
    assert (state.forked_from, state.forked_at) == ("s1", 9)
    assert all(e.session_id == "b1" for e in branch)
    assert await _bytes(sqlite, "s1") == origin
    assert (await check_store(sqlite)).ok


async def test_fork_between_a_tool_call_and_its_result_runs_the_tool_live(sqlite: Any) -> None:
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(sqlite, model)
    origin = await _bytes(sqlite, "s1")
    async with AgentExecutor(sqlite, [agent]) as executor:
        result = await executor.fork("s1", _first(log, ToolStart))
        await _until_idle(executor, result.session_id)
        state = await executor.state(result.session_id)
    assert state.status == "completed"
    assert tool_calls == ["x", "x"]  # the call after the point runs again, live
    assert len(model.requests) == 3  # the recorded turn is not asked again
    assert await _bytes(sqlite, "s1") == origin
    assert (await check_store(sqlite)).ok


async def test_a_tool_result_edit_answers_the_call_and_the_model_sees_it(sqlite: Any) -> None:
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(sqlite, model)
    call_id = log[_first(log, ToolStart) - 1].tool_call_id  # type: ignore[union-attr]
    edit = ReplaceToolResult(tool_call_id=call_id, result={"found": "EDITED"})
    async with AgentExecutor(sqlite, [agent]) as executor:
        # between the call and its result: the edit gives the result, the tool never runs
        between = await executor.fork("s1", _first(log, ToolStart), edits=[edit])
        await _until_idle(executor, between.session_id)
        # after the result: the recorded result is rewritten in the branch's copy
        after = await executor.fork("s1", _first(log, StepStarted, 1) - 1, edits=[edit])
        await _until_idle(executor, after.session_id)
        states = [await executor.state(r.session_id) for r in (between, after)]
    assert tool_calls == ["x"]
    assert len(model.requests) == 4
    for state, request in zip(states, model.requests[2:], strict=True):
        assert state.status == "completed"
        assert _tool_results(state) == ['{"found":"EDITED"}']
        seen = [m.content for m in request.messages if isinstance(m, ToolResultMessage)]
        assert seen == ['{"found":"EDITED"}']
    assert _tool_results(project_state(await sqlite.read("s1"))) == ['{"found":"X"}']
    assert (await check_store(sqlite)).ok


async def test_a_user_message_edit_regenerates_the_turn(sqlite: Any) -> None:
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(sqlite, model)
    start = _first(log, RunStarted)
    edit = ReplaceUserMessage(seq=1, message=UserMessage(content="bonjour"))
    async with AgentExecutor(sqlite, [agent]) as executor:
        result = await executor.fork("s1", start, edits=[edit])
        await _until_idle(executor, result.session_id)
        state = await executor.state(result.session_id)
    assert state.status == "completed"
    assert [m.content for m in model.requests[2].messages] == ["bonjour"]
    assert tool_calls == ["x", "x"]  # everything after the point is live
    assert project_state(await sqlite.read("s1")).messages[0].content == "hello"  # type: ignore[union-attr]


async def test_state_and_agent_edits_apply_to_what_runs_after(sqlite: Any) -> None:
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(sqlite, model)
    v2_model = Counter(["done by v2"])
    v2 = define_agent("a-v2", tools=[lookup], llm=v2_model.llm)
    point = _first(log, StepStarted, 1) - 1
    edits = [ReplaceState(state={"tries": 3}), UseAgent(agent_type="a-v2")]
    async with AgentExecutor(sqlite, [agent, v2]) as executor:
        result = await executor.fork("s1", point, edits=edits)
        await _until_idle(executor, result.session_id)
        state = await executor.state(result.session_id)
    assert (state.agent_type, state.custom_state, state.output) == (
        "a-v2",
        {"tries": 3},
        "done by v2",
    )
    assert (len(model.requests), len(v2_model.requests), tool_calls) == (2, 1, ["x"])


async def test_a_paused_session_forks_with_its_open_entry_and_decides_it_again(
    sqlite: Any,
) -> None:
    tool_calls.clear()
    model = Counter([[ScriptedLLM.call("rm", {"q": "tmp"})], "done"])
    agent = define_agent("a", tools=[rm], llm=model.llm)
    async with AgentExecutor(sqlite, [agent]) as executor:
        handle = await executor.execute(agent, "hello", session_id="s1")
        assert (await handle.result()).status == "paused"
        (entry,) = await handle.pending_inputs()
        paused_at = (await executor.state("s1")).last_seq
        await handle.approve(entry.tool_call_id)
        await _until_idle(executor, "s1")
        assert tool_calls == ["tmp"]
        origin = await _bytes(sqlite, "s1")
        log = await sqlite.read("s1")
        assert _first(log, ApprovalRequested) < paused_at
        # the branch is paused with the same open entry, and nothing runs
        kept = await executor.fork("s1", paused_at)
        assert (kept.status, kept.run_id) == ("paused", None)
        assert [e.tool_call_id for e in await executor.pending_inputs(kept.session_id)] == [
            entry.tool_call_id
        ]
        # decided the other way: denied, the tool never runs
        denied = await executor.fork(
            "s1",
            paused_at,
            edits=[DecideApproval(tool_call_id=entry.tool_call_id, approved=False, reason="no")],
        )
        await _until_idle(executor, denied.session_id)
        state = await executor.state(denied.session_id)
        # decided after the point: refused, nothing written
        sessions = await sqlite.list_sessions()
        with pytest.raises(AgentServerError, match="fork before it") as caught:
            await executor.fork(
                "s1", edits=[DecideApproval(tool_call_id=entry.tool_call_id, approved=False)]
            )
        assert caught.value.code == "INVALID_REQUEST"
        assert await sqlite.list_sessions() == sessions
    assert state.status == "completed"
    assert tool_calls == ["tmp"]
    assert "denied by a person: no" in _tool_results(state)[0]
    assert len(model.requests) == 3  # the origin's two turns, the denied branch's last
    assert await _bytes(sqlite, "s1") == origin
    assert (await check_store(sqlite)).ok


async def test_bad_forks_are_refused_and_write_nothing() -> None:
    store = MemoryEventStore()
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(store, model)
    hi = UserMessage(content="x")
    async with AgentExecutor(store, [agent]) as executor:
        cases: list[tuple[str, Any]] = [
            ("NOT_FOUND", executor.fork("nobody")),
            ("INVALID_REQUEST", executor.fork("s1", 0)),
            ("INVALID_REQUEST", executor.fork("s1", len(log) + 1)),
            ("INVALID_REQUEST", executor.fork("s1", new_session_id="bad id")),
            ("INVALID_REQUEST", executor.fork("s1", new_session_id="s1")),
            (
                "INVALID_REQUEST",
                executor.fork("s1", 2, edits=[ReplaceUserMessage(seq=3, message=hi)]),
            ),
            (
                "INVALID_REQUEST",
                executor.fork("s1", edits=[ReplaceToolResult(tool_call_id="nope")]),
            ),
            ("INVALID_REQUEST", executor.fork("s1", edits=[UseAgent(model="nope")])),
            (
                "INVALID_REQUEST",
                executor.fork("s1", 2, edits=[ReplaceUserMessage(seq=2, message=hi)]),
            ),
            (
                "INVALID_REQUEST",
                executor.fork("s1", edits=[ReplaceState(session_id="x", state={})]),
            ),
        ]
        for code, call in cases:
            with pytest.raises(AgentServerError) as caught:
                await call
            assert caught.value.code == code, caught.value
            assert await store.list_sessions() == ["s1"]


async def test_a_session_lists_its_forks_by_metadata() -> None:
    store = MemoryEventStore()
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, _log = await _recorded(store, model)
    async with AgentExecutor(store, [agent]) as executor:
        one = await executor.fork("s1", 3, run=False)
        two = await executor.fork("s1", run=False)
    assert (one.status, one.run_id, two.status) == ("running", None, "completed")
    from helix_agents.branches import forks_of

    assert await forks_of(store, "s1") == sorted([one.session_id, two.session_id])
    assert await forks_of(store, one.session_id) == []


# --- trees ---------------------------------------------------------------------------


class Out(BaseModel):
    answer: str


def _tree(
    grand_gate: anyio.Event | None = None, started: anyio.Event | None = None
) -> tuple[Any, dict[str, Counter]]:
    async def slow(value: Q, ctx: Any) -> dict[str, str]:
        tool_calls.append(value.q)
        if started is not None:
            started.set()
        if grand_gate is not None:
            await grand_gate.wait()
        return {"found": value.q}

    models = {
        "grand": Counter(
            [[ScriptedLLM.call("slow", {"q": "deep"})], ScriptedLLM.finish({"answer": "g"})]
        ),
        "child": Counter(
            [
                [ScriptedLLM.call("subagent__grand", {"q": "go"})],
                ScriptedLLM.finish({"answer": "c"}),
            ]
        ),
        "root": Counter([[ScriptedLLM.call("subagent__child", {"q": "go"})], "done"]),
    }
    grand = define_agent(
        "grand",
        output_schema=Out,
        tools=[define_tool("slow", "Slow.", Q, slow)],
        llm=models["grand"].llm,
    )
    child = define_agent(
        "child",
        output_schema=Out,
        tools=[create_sub_agent_tool(grand, Q)],
        llm=models["child"].llm,
    )
    root = define_agent("root", tools=[create_sub_agent_tool(child, Q)], llm=models["root"].llm)
    return root, models


def _calls(models: dict[str, Counter]) -> dict[str, int]:
    return {name: len(model.requests) for name, model in models.items()}


async def test_a_tree_forked_after_its_children_ended_reuses_them(sqlite: Any) -> None:
    tool_calls.clear()
    root, models = _tree()
    async with AgentExecutor(sqlite, [root]) as executor:
        assert await executor.run(root, "hi", session_id="t1") == "done"
        origin = {s: await _bytes(sqlite, s) for s in await sqlite.list_sessions()}
        log = await sqlite.read("t1")
        result = await executor.fork("t1", _first(log, StepStarted, 1) - 1)
        await _until_idle(executor, result.session_id)
        assert (await executor.state(result.session_id)).output == "done"
    assert result.sessions == {"t1": result.session_id}  # the children are reused as recorded
    assert _calls(models) == {"grand": 2, "child": 2, "root": 3}
    assert tool_calls == ["deep"]
    assert {s: await _bytes(sqlite, s) for s in origin} == origin
    assert (await check_store(sqlite)).ok


async def test_a_tree_forked_mid_child_forks_the_open_children_at_their_points(
    sqlite: Any,
) -> None:
    tool_calls.clear()
    gate, started = anyio.Event(), anyio.Event()
    root, models = _tree(gate, started)
    grand_id = "t2-sub-call_0_0-sub-call_0_0"
    async with AgentExecutor(sqlite, [root]) as executor:
        handle = await executor.execute(root, "hi", session_id="t2")
        with anyio.fail_after(10):  # the grandchild's tool is under way, the root saw it
            await started.wait()
            async with aclosing(sqlite.tail("t2")) as events:
                async for event in events:
                    chunk = getattr(event, "chunk", None)
                    if isinstance(chunk, ToolStart) and chunk.tool_name == "slow":
                        break
        mid = (await executor.state("t2")).last_seq
        gate.set()
        await handle.result()
        origin = {s: await _bytes(sqlite, s) for s in await sqlite.list_sessions()}
        result = await executor.fork("t2", mid)
        await _until_idle(executor, result.session_id)
        state = await executor.state(result.session_id)
        child_branch = result.sessions["t2-sub-call_0_0"]
        grand_branch = result.sessions[grand_id]
        assert project_state(await sqlite.read(grand_branch)).status == "completed"
    assert state.output == "done"
    assert set(result.sessions) == {"t2", "t2-sub-call_0_0", grand_id}
    assert child_branch == f"{result.session_id}-sub-call_0_0"
    assert grand_branch == f"{child_branch}-sub-call_0_0"
    # each recorded model turn answered once: only what followed each point ran live
    assert _calls(models) == {"grand": 3, "child": 3, "root": 3}
    assert tool_calls == ["deep", "deep"]  # the grandchild's call was open at the point
    assert {s: await _bytes(sqlite, s) for s in origin} == origin
    assert (await check_store(sqlite)).ok


async def test_forking_a_child_forks_the_path_from_the_root(sqlite: Any) -> None:
    tool_calls.clear()
    root, models = _tree()
    grand_id = "t3-sub-call_0_0-sub-call_0_0"
    async with AgentExecutor(sqlite, [root]) as executor:
        assert await executor.run(root, "hi", session_id="t3") == "done"
        glog = await sqlite.read(grand_id)
        edit = ReplaceToolResult(
            tool_call_id=glog[_first(glog, ToolStart) - 1].tool_call_id,  # type: ignore[union-attr]
            result={"found": "edited"},
        )
        result = await executor.fork(grand_id, _first(glog, ToolStart), edits=[edit])
        assert set(result.sessions) == {"t3", "t3-sub-call_0_0", grand_id}
        assert result.session_id == result.sessions[grand_id]
        await _until_idle(executor, result.root_session_id)
        root_state = await executor.state(result.root_session_id)
        grand_state = await executor.state(result.session_id)
    assert root_state.output == "done"
    assert _tool_results(grand_state)[0] == '{"found":"edited"}'
    assert tool_calls == ["deep"]
    assert _calls(models) == {"grand": 3, "child": 3, "root": 3}
    root_log = await sqlite.read(result.root_session_id)
    marker = next(e for e in root_log if isinstance(e, SessionForked))
    assert (marker.origin_session_id, marker.edits) == ("t3", [])
    assert (await check_store(sqlite)).ok


async def test_a_model_edit_runs_what_follows_on_that_model(
    sqlite: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from responses_fake import FakeResponses, Turn, serve_in_thread

    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(sqlite, model)
    fake = FakeResponses(replies=[Turn().message(["from ", "gpt-fork"]).completed().reply()])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    point = _first(log, StepStarted, 1) - 1
    with serve_in_thread(fake.app()) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        async with AgentExecutor(sqlite, [agent]) as executor:
            result = await executor.fork("s1", point, edits=[UseAgent(model="openai:gpt-fork")])
            await _until_idle(executor, result.session_id)
            state = await executor.state(result.session_id)
    assert (state.model, state.output) == ("openai:gpt-fork", "from gpt-fork")
    (request,) = fake.requests
    assert request.body["model"] == "gpt-fork"
    assert (len(model.requests), tool_calls) == (2, ["x"])  # the recorded ones, only


async def test_the_same_fork_again_answers_the_branch_it_wrote() -> None:
    store = MemoryEventStore()
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(store, model)
    point = _first(log, ToolStart)
    async with AgentExecutor(store, [agent]) as executor:
        first = await executor.fork("s1", point, new_session_id="same")
        await _until_idle(executor, "same")
        written = await _bytes(store, "same")
        again = await executor.fork("s1", point, new_session_id="same")
        assert await _bytes(store, "same") == written
        with pytest.raises(AgentServerError, match="already exists"):
            await executor.fork("s1", point - 1, new_session_id="same")
    assert (again.session_id, again.run_id, first.run_id is not None) == ("same", None, True)
    assert tool_calls == ["x", "x"]  # the branch's call ran once, not again


async def test_a_companion_is_forked_so_the_branch_consults_its_own_copy(sqlite: Any) -> None:
    from companion_kit import call, critic, parent

    spawn = "companion__spawnAgent"
    review = {"agent": "critic", "name": "reviewer"}

    def maker(request: LLMRequest) -> Any:
        verdicts = [m.content for m in request.messages if getattr(m, "tool_name", None) == spawn]
        if any('"pass"' in v for v in verdicts):
            return "final artifact v2"
        return call(spawn, {**review, "initialMessage": f"Review v{len(verdicts) + 1}"})

    from helix_agents import PersistentAgent

    judge = critic()
    lead = parent(maker, [PersistentAgent(judge, mode="blocking")])
    async with AgentExecutor(sqlite, [lead]) as executor:
        assert await executor.run(lead, "make it", session_id="mk") == "final artifact v2"
        origin = {s: await _bytes(sqlite, s) for s in await sqlite.list_sessions()}
        log = await sqlite.read("mk")
        second_round = _first(log, StepStarted, 1) - 1  # the critic's first verdict is in
        result = await executor.fork("mk", second_round, new_session_id="mkb")
        await _until_idle(executor, "mkb")
        state = await executor.state("mkb")
    assert state.output == "final artifact v2"
    assert result.sessions == {"mk": "mkb", "mk-agent-reviewer": "mkb-agent-reviewer"}
    copy = project_state(await sqlite.read("mkb-agent-reviewer"))
    assert (copy.parent_session_id, copy.forked_from) == ("mkb", "mk-agent-reviewer")
    # the branch's critic remembers round 1 (copied) and answered round 2 live
    assert copy.output["notes"] == "round 2: seen ['Review v1', 'Review v2']"
    assert judge.llm.calls == 3  # type: ignore[union-attr]  # two recorded, one live
    assert {s: await _bytes(sqlite, s) for s in origin} == origin
    assert (await check_store(sqlite)).ok


async def test_a_branch_of_a_branch_keeps_the_first_marker_as_recorded() -> None:
    store = MemoryEventStore()
    model = Counter([[ScriptedLLM.call("lookup", {"q": "x"})], "done"])
    agent, log = await _recorded(store, model)
    async with AgentExecutor(store, [agent]) as executor:
        first = await executor.fork("s1", _first(log, ToolStart), new_session_id="b1")
        await _until_idle(executor, "b1")
        branch = await store.read("b1")
        again = await executor.fork("b1", new_session_id="b2")
    copied = await store.read("b2")
    markers = [e for e in copied if isinstance(e, SessionForked)]
    assert [(m.origin_session_id, m.session_map) for m in markers] == [
        ("s1", {"s1": "b1"}),
        ("b1", {"b1": "b2"}),
    ]
    assert (first.status, again.status) == ("running", "completed")
    assert len(copied) == len(branch) + 1
    assert (await check_store(store)).ok
