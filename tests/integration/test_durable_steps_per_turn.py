"""Issue 35: how many durable steps an agent step takes, read from each engine's own record.

A model step opens the round its turn leads to (no ``helix_round_open``); a
round of tool calls that share one policy runs and closes in one step
(``helix_tool_round``, no ``helix_tool_call`` or ``helix_round_close``). On
Temporal that is two steps per agent step, as Pydantic AI's agents take, and
the tool round is a local activity (a marker in the history, no task-queue
round trip) unless its policy says ``local=False``. On DBOS the model step
runs that round itself, its first attempt (``helix_turn``: one step per agent
step, the run's beginning in the first); ``local=False``, or a first attempt
that fails, gives the round a step of its own. Calls with different policies
keep a step each. Every log is the built-in runtime's, event for event.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentConfig, AgentExecutor, define_agent, define_tool
from helix_agents.events import Completed
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime, same_log
from tests.integration._temporal_kit import results_of, seqs_contiguous, stream_to_end, wait_for

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.parametrize("runtime", ["temporal", "dbos"], indirect=True),
]

LIMIT = 90.0
CALLS: Counter[str] = Counter()


class Number(BaseModel):
    x: int


def _inc(value: Number, ctx: Any) -> int:
    CALLS[f"inc{value.x}"] += 1
    return value.x + 1


def _dec(value: Number, ctx: Any) -> int:
    CALLS[f"dec{value.x}"] += 1
    return value.x - 1


async def _nap(value: Number, ctx: Any) -> int:
    """Sleeps past its policy's timeout the first time it is called, not after."""
    CALLS[f"nap{value.x}"] += 1
    if CALLS[f"nap{value.x}"] == 1:
        await anyio.sleep(30)
    return value.x


def _agents() -> list[AgentConfig]:
    inc = define_tool("inc", "Add one.", Number, _inc)
    nap = define_tool("nap", "Sleep once.", Number, _nap)
    dec = define_tool("dec", "Take one.", Number, _dec)
    return [
        define_agent(
            "stepper",
            tools=[inc],
            llm=ScriptedLLM([*([ScriptedLLM.call("inc", {"x": n})] for n in range(3)), "done"]),
        ),
        define_agent(
            "sleepy", tools=[nap], llm=ScriptedLLM([[ScriptedLLM.call("nap", {"x": 1})], "up"])
        ),
        define_agent(
            "pair",
            tools=[inc, dec],
            llm=ScriptedLLM(
                [[ScriptedLLM.call("inc", {"x": 10}), ScriptedLLM.call("dec", {"x": 20})], "both"]
            ),
        ),
    ]


async def _run(
    runtime: Runtime, agent_type: str, session_id: str, **knobs: Any
) -> tuple[MemoryEventStore, list[str]]:
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(_agents(), store, **knobs) as server:
            await server.start(
                RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
            )
            await stream_to_end(server, session_id)
            steps = await runtime.steps(session_id)
    return store, steps


async def _builtin(agent_type: str, session_id: str) -> MemoryEventStore:
    store = MemoryEventStore()
    async with AgentExecutor(store, _agents()) as executor:
        await executor.service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        await wait_for(store, session_id, lambda e: isinstance(e, Completed))
    return store


async def test_an_agent_step_is_a_model_step_and_a_tool_round(runtime: Runtime) -> None:
    CALLS.clear()
    store, steps = await _run(runtime, "stepper", "s1")
    log = await store.read("s1")
    assert seqs_contiguous(log)
    assert same_log(log, await (await _builtin("stepper", "s1")).read("s1"))
    assert CALLS == {"inc0": 2, "inc1": 2, "inc2": 2}  # once here, once in the built-in run
    for gone in ("helix_round_open", "helix_round_close", "helix_tool_call"):
        assert not [name for name in steps if name.endswith(gone)]
    if runtime.name == "dbos":
        # Three turns with a call, and the answer: the calls ran in the turns' steps.
        assert steps == ["helix_turn"] * 4
    else:
        assert steps.count("helix_model_step") == 4
        # Local activities: markers in the history, never scheduled on the task queue.
        assert steps.count("local:helix_tool_round") == 3
        assert "helix_tool_round" not in steps
        assert [name for name in steps if not name.startswith("local:")] == ["helix_model_step"] * 4


async def test_two_calls_of_a_turn_share_one_step(runtime: Runtime) -> None:
    CALLS.clear()
    store, steps = await _run(runtime, "pair", "p1")
    log = await store.read("p1")
    assert seqs_contiguous(log)
    ids = _call_ids(log)
    assert len(ids) == 2
    for call_id in ids:
        assert len(results_of(log, call_id)) == 1
    assert CALLS == {"inc10": 1, "dec20": 1}
    assert "helix_tool_call" not in steps
    if runtime.name == "dbos":
        assert steps == ["helix_turn"] * 2
    else:
        assert steps.count("helix_model_step") == 2
        assert steps.count("local:helix_tool_round") == 1


async def test_calls_with_different_policies_keep_a_step_each(runtime: Runtime) -> None:
    from helix_agents.temporal import ToolPolicy

    CALLS.clear()
    store, steps = await _run(
        runtime, "pair", "d1", tool_policies={"dec": ToolPolicy(max_attempts=2)}
    )
    log = await store.read("d1")
    assert seqs_contiguous(log)
    assert CALLS == {"inc10": 1, "dec20": 1}
    assert steps.count("helix_tool_call") == 2
    assert not [name for name in steps if name.endswith("helix_tool_round")]
    model_step = "helix_turn" if runtime.name == "dbos" else "helix_model_step"
    assert steps.count(model_step) == 2
    # The model step opened the round all the same.
    assert not [name for name in steps if name.endswith("helix_round_open")]
    close = "helix_round_close" if runtime.name == "dbos" else "local:helix_round_close"
    assert steps.count(close) == 1


async def test_a_tool_round_not_local_is_a_step_of_its_own(runtime: Runtime) -> None:
    """Temporal: a heartbeating activity, not a local one; DBOS: not in the model's step."""
    from helix_agents.temporal import ToolPolicy

    CALLS.clear()
    slow = ToolPolicy(local=False)
    store, steps = await _run(runtime, "stepper", "n1", default_policy=slow)
    assert CALLS == {"inc0": 1, "inc1": 1, "inc2": 1}
    assert steps.count("helix_tool_round") == 3
    assert "local:helix_tool_round" not in steps
    if runtime.name == "dbos":
        assert steps.count("helix_turn") == 4
    assert seqs_contiguous(await store.read("n1"))


async def test_a_round_whose_first_attempt_times_out_gets_a_step_with_the_other_attempts(
    runtime: Runtime,
) -> None:
    """DBOS: the round's first attempt, in the model's step, times out; its own step has
    the policy's second attempt, which records the one result."""
    from helix_agents.temporal import ToolPolicy

    if runtime.name != "dbos":
        pytest.skip("Temporal's tool round is its own (local) activity from the first attempt")
    CALLS.clear()
    two = ToolPolicy(max_attempts=2, timeout=1.0, initial_interval=0.1)
    store, steps = await _run(runtime, "sleepy", "t1", default_policy=two)
    log = await store.read("t1")
    assert seqs_contiguous(log)
    assert CALLS == {"nap1": 2}  # the first attempt cut at its timeout, the second recorded
    (call_id,) = set(_call_ids(log))
    assert [event.message.content for event in results_of(log, call_id)] == ["1"]
    assert steps == ["helix_turn", "helix_tool_round", "helix_turn"]


async def test_a_round_whose_only_attempt_times_out_records_the_error(runtime: Runtime) -> None:
    """DBOS: a policy of one attempt, spent in the model's step: the call's result is the
    error (the model reads it), in a step of its own, and the run goes on."""
    from helix_agents.temporal import ToolPolicy

    if runtime.name != "dbos":
        pytest.skip("Temporal's tool round is its own (local) activity from the first attempt")
    CALLS.clear()
    once = ToolPolicy(max_attempts=1, timeout=1.0)
    store, steps = await _run(runtime, "sleepy", "t2", default_policy=once)
    log = await store.read("t2")
    assert seqs_contiguous(log)
    assert CALLS == {"nap1": 1}
    (call_id,) = set(_call_ids(log))
    (result,) = results_of(log, call_id)
    assert result.message.is_error
    assert "tool failed" in result.message.content
    assert isinstance(log[-1], Completed)
    assert steps == ["helix_turn", "helix_tool_failed", "helix_round_close", "helix_turn"]


def _call_ids(log: list[Any]) -> list[str]:
    from helix_agents.events import ToolStart

    return [event.tool_call_id for event in log if isinstance(event, ToolStart)]


async def test_a_run_on_sqlite_starts_without_the_queue(runtime: Runtime) -> None:
    """On a SQLite system database the one process is the only worker: a run is started at
    once (no queue, so no wait for its poll); on Postgres it is enqueued for the fleet."""
    if runtime.name != "dbos" or runtime.system_database is not None:
        pytest.skip("DBOS on SQLite only (its Postgres runs are enqueued)")
    from dbos import DBOS

    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(_agents(), store) as server:
            await server.start(
                RemoteStartRequest(session_id="q1", agent_type="stepper", message="go")
            )
            await stream_to_end(server, "q1")
            # The log says "completed" a moment before DBOS records the workflow's end.
            assert await (await DBOS.retrieve_workflow_async("q1#2")).get_result() == "completed"
            status = await DBOS.get_workflow_status_async("q1#2")
    assert status is not None
    assert status.status == "SUCCESS"
    assert status.queue_name is None
