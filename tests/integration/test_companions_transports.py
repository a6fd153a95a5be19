"""Companions over every transport, and exactly-once delivery across restarts.

Each test runs with the children local (the parent's executor, in-process),
behind HTTP (an ``AgentServer`` on its own store, real uvicorn on 127.0.0.1)
and behind NATS (a ``NatsAgentHost`` on a real nats-server, its own JetStream
stream). The parent is stopped by cancelling its executor (its process's
end, as far as the log can tell) and a new executor recovers it; a remote
child's host is stopped the same way and a new one recovers the child. Every
child outcome is delivered to the parent once: counted in its log.
"""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest
from companion_hosts import KINDS, children_of, until
from companion_kit import (
    Gates,
    Verdict,
    call,
    critic,
    deliveries,
    notices,
    outcomes,
    parent,
    settled,
    tool_results,
    worker,
)

from helix_agents import AgentExecutor, EventStore, define_agent, get_usage_rollup
from helix_agents.events import Event, SessionCreated, StepStarted
from helix_agents.log import project_state
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem

LIMIT = 60.0  # generous: a liveness bound on a shared machine
SPAWN = "companion__spawnAgent"
WAIT = "companion__waitForResult"
TERMINATE = "companion__terminateChild"


def stepping(log: Sequence[Event]) -> bool:
    return any(isinstance(e, StepStarted) for e in log)


def created_once(log: Sequence[Event]) -> bool:
    return sum(isinstance(e, SessionCreated) for e in log) == 1


@pytest.fixture(params=KINDS)
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_backend() -> str:
    return "sqlite"


async def test_the_critic_loop_over_the_transport(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    review = {"agent": "critic", "name": "reviewer"}

    def maker(req: LLMRequest) -> ScriptItem:
        verdicts = [m.content for m in req.messages if getattr(m, "tool_name", None) == SPAWN]
        if any('"pass"' in v for v in verdicts):
            return "shipped"
        return call(SPAWN, {**review, "initialMessage": f"Review v{len(verdicts) + 1}"})

    the_critic = critic()
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [the_critic], request) as kids:
            lead = parent(maker, [kids.entry(the_critic)])
            async with AgentExecutor(store, [lead]) as executor:
                result = await (await executor.execute(lead, "go", session_id="cl")).result()
            child_log = await kids.log("cl-agent-reviewer")
            rollup = await get_usage_rollup(store, "cl")
            remote_rollup = await executor.usage_rollup("cl")
    assert result.output == "shipped"
    log = await store.read("cl")
    rounds = [r for r in tool_results(log).values() if isinstance(r, dict)]
    assert [r["output"]["verdict"] for r in rounds] == ["revise", "pass"]
    assert rounds[1]["output"]["notes"] == "round 2: seen ['Review v1', 'Review v2']"
    assert created_once(child_log)
    assert deliveries(log) == {"cl-agent-reviewer": ["pull", "pull"]}
    critic_calls = project_state(child_log).usage.llm_calls
    lead_calls = project_state(log).usage.llm_calls
    assert critic_calls == 2
    assert remote_rollup.llm_calls == lead_calls + critic_calls
    assert remote_rollup.sessions == ["cl", "cl-agent-reviewer"]
    if kind == "local":
        assert rollup.llm_calls == remote_rollup.llm_calls


async def test_non_blocking_outcomes_are_pushed_once(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)
    spawns = [
        call(SPAWN, {"agent": "worker", "name": "a", "initialMessage": "job a"}, id="sa"),
        call(SPAWN, {"agent": "worker", "name": "b", "initialMessage": "fail b"}, id="sb"),
    ]

    def lead_script(req: LLMRequest) -> ScriptItem:
        turn = sum(1 for m in req.messages if type(m).__name__ == "AssistantMessage")
        return spawns if turn == 0 else f"turn {turn}"

    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(lead_script, [kids.entry(work, "non-blocking")])
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.execute(lead, "go", session_id="pu")).result()
                gates.open("job a")
                gates.open("fail b")
                await settled(kids.store, "pu-agent-a")
                await settled(kids.store, "pu-agent-b", "failed")
                for text in ("news?", "more news?"):
                    await (await executor.send_message("pu", text)).result()
    log = await store.read("pu")
    assert sorted(notices(log)) == [
        'Sub-agent \'a\' completed with result: {"text":"done: job a (turn 1)"}',
        "Sub-agent 'b' failed: " + project_state(log).sub_sessions["pu-agent-b"].error,  # type: ignore[operator]
    ]
    assert deliveries(log) == {"pu-agent-a": ["push"], "pu-agent-b": ["push"]}
    assert outcomes(log) == {"pu-agent-a": 1, "pu-agent-b": 1}


async def test_terminate_over_the_transport(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)
    script = [
        call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "never"}, id="sp"),
        call(TERMINATE, {"name": "w"}, id="term"),
        "ok",
    ]
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(script, [kids.entry(work, "non-blocking")])
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.execute(lead, "go", session_id="te")).result()
                await (await executor.send_message("te", "anything?")).result()
            child = project_state(await kids.log("te-agent-w"))
    results = tool_results(await store.read("te"))
    assert results["term"] == {"name": "w", "terminated": True, "status": "terminated"}
    assert child.status == "failed"
    log = await store.read("te")
    assert deliveries(log) == {"te-agent-w": ["pull"]}
    assert notices(log) == []


async def test_a_parent_restarted_mid_spawn_delivers_once(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)
    script = [
        call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "long job"}, id="sp"),
        "done",
    ]
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(script, [kids.entry(work, "blocking")])
            with anyio.CancelScope() as scope:
                async with AgentExecutor(store, [lead]) as executor:
                    await executor.execute(lead, "go", session_id="rs")
                    await until(kids.store, "rs-agent-w", stepping)
                    scope.cancel()  # the parent's process ends mid-call
            async with AgentExecutor(store, [lead]) as executor:
                assert "rs" in await executor.recover()
                gates.open("long job")
                await settled(store, "rs")
                # A second restart finds nothing to deliver again.
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.send_message("rs", "again?")).result()
            child_log = await kids.log("rs-agent-w")
    log = await store.read("rs")
    assert tool_results(log)["sp"]["output"] == {"text": "done: long job (turn 1)"}
    assert deliveries(log) == {"rs-agent-w": ["pull"]}
    assert notices(log) == []
    assert created_once(child_log)


async def test_a_non_blocking_outcome_survives_parent_restarts_once(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)

    def lead_script(req: LLMRequest) -> ScriptItem:
        turn = sum(1 for m in req.messages if type(m).__name__ == "AssistantMessage")
        if turn == 0:
            return call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "bg"}, id="sp")
        return f"turn {turn}"

    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(lead_script, [kids.entry(work, "non-blocking")])
            with anyio.CancelScope() as scope:
                async with AgentExecutor(store, [lead]) as executor:
                    await (await executor.execute(lead, "go", session_id="nr")).result()
                    await until(kids.store, "nr-agent-w", stepping)
                    scope.cancel()
            for text in ("first", "second"):
                async with AgentExecutor(store, [lead]) as executor:
                    await executor.recover()  # a local child is resumed here
                    gates.open("bg")
                    await settled(kids.store, "nr-agent-w")
                    await (await executor.send_message("nr", text)).result()
    log = await store.read("nr")
    assert deliveries(log) == {"nr-agent-w": ["push"]}
    assert len(notices(log)) == 1


async def test_a_parent_re_entered_after_an_interrupt_delivers_once(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)
    script = [
        call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "task"}, id="sp"),
        "done",
    ]
    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(script, [kids.entry(work, "blocking")])
            async with AgentExecutor(store, [lead]) as executor:
                await executor.execute(lead, "go", session_id="ri")
                await until(kids.store, "ri-agent-w", stepping)
                await executor.service.interrupt("ri", "pause")
                await settled(store, "ri", "interrupted")
                child = project_state(await kids.log("ri-agent-w"))
                assert child.status == "interrupted"  # stopped with its parent
                gates.open("task")
                await (await executor.resume("ri")).result()
            child_log = await kids.log("ri-agent-w")
    log = await store.read("ri")
    assert tool_results(log)["sp"]["status"] == "completed"
    assert deliveries(log) == {"ri-agent-w": ["pull"]}
    assert created_once(child_log)


@pytest.mark.parametrize(
    "kind", ["http", pytest.param("nats", marks=pytest.mark.nats)], ids=["http", "nats"]
)
async def test_a_remote_child_restarted_mid_turn_is_delivered_once(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    work = worker(gates)

    def script(req: LLMRequest) -> ScriptItem:
        turn = sum(1 for m in req.messages if type(m).__name__ == "AssistantMessage")
        if turn == 0:
            return call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "survive"})
        return f"turn {turn}"

    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [work], request) as kids:
            lead = parent(script, [kids.entry(work, "non-blocking")])
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.execute(lead, "go", session_id="cr")).result()
                await until(kids.store, "cr-agent-w", stepping)
                await kids.stop_host()  # the child's process ends mid-turn
                await kids.start_host()  # a new one recovers it
                gates.open("survive")
                await settled(kids.store, "cr-agent-w")
                await (await executor.send_message("cr", "status?")).result()
                await (await executor.send_message("cr", "again?")).result()
            child_log = await kids.log("cr-agent-w")
    log = await store.read("cr")
    assert deliveries(log) == {"cr-agent-w": ["push"]}
    assert len(notices(log)) == 1
    assert created_once(child_log)


@pytest.mark.parametrize(
    "kind", ["http", pytest.param("nats", marks=pytest.mark.nats)], ids=["http", "nats"]
)
async def test_a_remote_output_that_misses_the_declared_schema_is_a_failure(
    kind: str, store: EventStore, request: pytest.FixtureRequest
) -> None:
    gates = Gates()
    gates.open("job")
    served = worker(gates)  # answers {"text": ...}
    declared = define_agent("worker", output_schema=Verdict, llm=ScriptedLLM([]))

    def lead_script(req: LLMRequest) -> ScriptItem:
        turn = sum(1 for m in req.messages if type(m).__name__ == "AssistantMessage")
        if turn == 0:
            return call(SPAWN, {"agent": "worker", "name": "w", "initialMessage": "job"})
        return f"turn {turn}"

    with anyio.fail_after(LIMIT):
        async with children_of(kind, store, [served], request) as kids:
            lead = parent(lead_script, [kids.entry(declared, "non-blocking")])
            async with AgentExecutor(store, [lead]) as executor:
                await (await executor.execute(lead, "go", session_id="sc")).result()
                await settled(kids.store, "sc-agent-w")  # it completed, over there
                await (await executor.send_message("sc", "news?")).result()
    log = await store.read("sc")
    [notice] = notices(log)
    assert notice.startswith("Sub-agent 'w' failed: remote output does not match Verdict: ")
    assert "the child returned: {" in notice  # what came back, named
    assert project_state(log).sub_sessions["sc-agent-w"].status == "failed"
    assert deliveries(log) == {"sc-agent-w": ["push"]}
