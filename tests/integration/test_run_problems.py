"""Nothing fails silently: a run's problems are in its result, and strict mode fails on them.

Issue 32. Each silent case a newcomer met: a misspelled sub-agent tool, a
child that failed, an output that did not match the schema (whose run then
failed on the step after it). The model is shown each problem and may
recover (so a plain run still completes), but ``AgentResult.problems`` names
them, and a strict session (per executor or per run, inherited by its
children) fails at the first one.
"""

from __future__ import annotations

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import (
    AgentExecutor,
    ToolContext,
    create_sub_agent_tool,
    define_agent,
    define_tool,
    run_sync,
)
from helix_agents.errors import AgentRunError
from helix_agents.messages import AssistantMessage
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.stores import MemoryEventStore

call = ScriptedLLM.call


class Topic(BaseModel):
    topic: str


class Answer(BaseModel):
    answer: str


def _ops(value: Topic, ctx: ToolContext) -> str:
    return f"ops on {value.topic}"


def _broken(value: Topic, ctx: ToolContext) -> str:
    raise RuntimeError(f"the archive of {value.topic} is offline")


def child_agent(script: list[ScriptStep | list]) -> object:
    ops = define_tool("ops", "Operations.", Topic, _ops)
    return define_agent("ops", tools=[ops], output_schema=Answer, llm=ScriptedLLM(script))


def misspelling_parent() -> tuple[object, object]:
    """A parent whose model calls ``subagent_ops`` (one underscore) and then answers."""
    child = child_agent([ScriptedLLM.finish({"answer": "done"})])
    parent = define_agent(
        "lead",
        tools=[create_sub_agent_tool(child, Topic)],
        output_schema=Answer,
        llm=ScriptedLLM(
            [
                [call("subagent_ops", {"topic": "deploy"}, id="m1")],
                ScriptedLLM.finish({"answer": "deployed"}, id="m2"),
            ]
        ),
    )
    return parent, child


def failing_child_parent() -> object:
    """A parent whose child fails (its model is down), then answers anyway."""
    child = define_agent(
        "ops", output_schema=Answer, llm=ScriptedLLM([ScriptedLLM.fail("the model is down")])
    )
    return define_agent(
        "lead",
        tools=[create_sub_agent_tool(child, Topic)],
        output_schema=Answer,
        llm=ScriptedLLM(
            [
                [call("subagent__ops", {"topic": "deploy"}, id="c1")],
                ScriptedLLM.finish({"answer": "deployed"}, id="c2"),
            ]
        ),
    )


async def test_a_misspelled_tool_is_a_problem_of_the_completed_run() -> None:
    parent, _ = misspelling_parent()
    async with AgentExecutor(MemoryEventStore(), [parent]) as executor:
        result = await (await executor.execute(parent, "deploy")).result()
    assert result.status == "completed"
    [problem] = result.problems
    assert (problem.kind, problem.tool_name, problem.tool_call_id) == (
        "unknown_tool",
        "subagent_ops",
        "m1",
    )
    assert problem.describe() == "the model called an unknown tool 'subagent_ops'"


async def test_strict_fails_the_run_at_the_misspelled_tool() -> None:
    parent, _ = misspelling_parent()
    async with AgentExecutor(MemoryEventStore(), [parent], strict=True) as executor:
        handle = await executor.execute(parent, "deploy")
        result = await handle.result()
        state = await executor.state(handle.session_id)
    assert result.status == "failed"
    assert result.error == "strict: the model called an unknown tool 'subagent_ops'"
    assert state.step_count == 1  # the model was not asked again


async def test_strict_per_run_overrides_the_executor() -> None:
    parent, _ = misspelling_parent()
    async with AgentExecutor(MemoryEventStore(), [parent]) as executor:
        with pytest.raises(AgentRunError, match="unknown tool 'subagent_ops'"):
            await executor.run(parent, "deploy", strict=True)
        assert (await executor.run(parent, "deploy")).answer == "deployed"
    async with AgentExecutor(MemoryEventStore(), [parent], strict=True) as executor:
        assert (await executor.run(parent, "deploy", strict=False)).answer == "deployed"


async def test_a_failed_child_is_a_problem_and_strict_fails_the_parent() -> None:
    parent = failing_child_parent()
    async with AgentExecutor(MemoryEventStore(), [parent]) as executor:
        result = await (await executor.execute(parent, "deploy")).result()
        assert result.status == "completed"
        [problem] = result.problems
        assert problem.kind == "child_failed"
        assert problem.tool_name == "subagent__ops"
        assert "the model is down" in problem.error
        strict = await (await executor.execute(parent, "deploy", strict=True)).result()
    assert strict.status == "failed"
    assert strict.error is not None
    assert strict.error.startswith("strict: sub-agent call 'subagent__ops' failed: ")
    assert "the model is down" in strict.error


async def test_strict_is_inherited_by_children() -> None:
    """A child's tool error fails the child in a strict tree; the parent fails on the child."""
    child = child_agent(
        [
            [call("ops", {"nope": 1}, id="o1")],  # invalid arguments: a tool error
            ScriptedLLM.finish({"answer": "recovered"}, id="o2"),
        ]
    )
    parent = define_agent(
        "lead",
        tools=[create_sub_agent_tool(child, Topic)],
        output_schema=Answer,
        llm=ScriptedLLM(
            [
                [call("subagent__ops", {"topic": "x"}, id="c1")],
                ScriptedLLM.finish({"answer": "ok"}, id="c2"),
            ]
        ),
    )
    async with AgentExecutor(MemoryEventStore(), [parent]) as executor:
        relaxed = await (await executor.execute(parent, "go")).result()
        assert relaxed.status == "completed"
        assert relaxed.problems == []
        handle = await executor.execute(parent, "go", strict=True)
        result = await handle.result()
        state = await executor.state(handle.session_id)
        [ref] = state.sub_sessions.values()
        child_state = await executor.state(ref.sub_session_id)
    assert child_state.strict
    assert child_state.status == "failed"
    assert child_state.error is not None
    assert child_state.error.startswith("strict: tool 'ops' failed: invalid arguments")
    assert result.status == "failed"
    assert result.error is not None
    assert "strict: tool 'ops' failed" in result.error


async def test_an_invalid_output_names_the_validation_error_when_the_run_then_fails() -> None:
    """Today: ``LLM call failed: script exhausted`` alone; the cause was one step earlier."""
    agent = define_agent(
        "writer",
        output_schema=Answer,
        llm=ScriptedLLM([ScriptedLLM.finish({"text": "no answer field"}, id="f1")]),
    )
    async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
        result = await (await executor.execute(agent, "write")).result()
    assert result.status == "failed"
    [problem] = result.problems
    assert problem.kind == "output_rejected"
    assert result.error is not None
    assert result.error.startswith("output rejected: ")
    assert "answer" in result.error.split("; then ")[0]
    assert "Field required" in result.error.split("; then ")[0]
    assert "; then LLM call failed: script exhausted" in result.error


async def test_a_denied_approval_is_a_decision_not_a_problem() -> None:
    pay = define_tool("pay", "Pay.", Topic, _ops, requires_approval=True)
    agent = define_agent(
        "payer",
        tools=[pay],
        output_schema=Answer,
        llm=ScriptedLLM(
            [[call("pay", {"topic": "rent"}, id="p1")], ScriptedLLM.finish({"answer": "skipped"})]
        ),
    )
    async with AgentExecutor(MemoryEventStore(), [agent], strict=True) as executor:
        handle = await executor.execute(agent, "pay the rent")
        assert (await handle.result()).status == "paused"
        [entry] = await handle.pending_inputs()
        await handle.deny(entry.tool_call_id, "not this month")
        with anyio.fail_after(30):
            while (state := await executor.state(handle.session_id)).status != "completed":
                assert state.status in ("paused", "running"), state.error
                await anyio.sleep(0.02)
    assert state.problems == []


async def test_a_tool_error_the_model_recovers_from_is_reported_then_cleared_next_turn() -> None:
    broken = define_tool("broken", "Offline.", Topic, _broken)
    agent = define_agent(
        "reader",
        tools=[broken],
        llm=ScriptedLLM(
            lambda request: (
                "It is offline."
                if sum(isinstance(m, AssistantMessage) for m in request.messages) % 2
                else ScriptStep(tool_calls=[call("broken", {"topic": "old"})])
            )
        ),
    )
    async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
        handle = await executor.execute(agent, "read", session_id="reader-1")
        first = await handle.result()
        assert first.status == "completed"
        assert first.output == "It is offline."
        [problem] = first.problems
        assert problem.kind == "tool_error"
        assert problem.error == "RuntimeError: the archive of old is offline"
        second = await (await executor.send_message("reader-1", "again")).result()
    # Each turn reports its own problems: the second turn had one of its own.
    assert [p.tool_call_id for p in second.problems] != [problem.tool_call_id]
    assert len(second.problems) == 1


def test_run_sync_strict_raises_naming_the_first_problem() -> None:
    parent, _ = misspelling_parent()
    with pytest.raises(AgentRunError) as caught:
        run_sync(parent, "deploy", store=MemoryEventStore(), strict=True)
    assert "strict: the model called an unknown tool 'subagent_ops'" in str(caught.value)
