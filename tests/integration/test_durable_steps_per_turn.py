"""Issue 35: how many durable steps an agent step takes, read from each engine's own record.

A model step opens the round its turn leads to (no ``helix_round_open``); a
round of tool calls that share one policy runs and closes in one step
(``helix_tool_round``, no ``helix_tool_call`` or ``helix_round_close``): two
steps per agent step, as Pydantic AI's agents take. On Temporal the tool
round is a local activity (a marker in the history, no task-queue round
trip) unless its policy says ``local=False``. Calls with different policies
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


def _agents() -> list[AgentConfig]:
    inc = define_tool("inc", "Add one.", Number, _inc)
    dec = define_tool("dec", "Take one.", Number, _dec)
    return [
        define_agent(
            "stepper",
            tools=[inc],
            llm=ScriptedLLM([*([ScriptedLLM.call("inc", {"x": n})] for n in range(3)), "done"]),
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
    assert steps.count("helix_model_step") == 4  # three turns with a call, and the answer
    for gone in ("helix_round_open", "helix_round_close", "helix_tool_call"):
        assert not [name for name in steps if name.endswith(gone)]
    if runtime.name == "dbos":
        assert steps.count("helix_tool_round") == 3
    else:
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
    assert steps.count("helix_model_step") == 2
    assert "helix_tool_call" not in steps
    round_step = "helix_tool_round" if runtime.name == "dbos" else "local:helix_tool_round"
    assert steps.count(round_step) == 1


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
    # The model step opened the round all the same.
    assert not [name for name in steps if name.endswith("helix_round_open")]
    close = "helix_round_close" if runtime.name == "dbos" else "local:helix_round_close"
    assert steps.count(close) == 1


async def test_a_tool_round_not_local_is_a_heartbeating_activity(runtime: Runtime) -> None:
    from helix_agents.temporal import ToolPolicy

    if runtime.name != "temporal":
        pytest.skip("DBOS has one kind of step")
    CALLS.clear()
    slow = ToolPolicy(local=False)
    store, steps = await _run(runtime, "stepper", "n1", default_policy=slow)
    assert CALLS == {"inc0": 1, "inc1": 1, "inc2": 1}
    assert steps.count("helix_tool_round") == 3
    assert "local:helix_tool_round" not in steps
    assert seqs_contiguous(await store.read("n1"))


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
