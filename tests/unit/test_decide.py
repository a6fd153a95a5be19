"""``next_action`` and ``call_kind``: a run's decisions, one place for every runtime.

Each test builds the state a log folds to and asks what comes next; the
order of the rules (a stop first, then the end, the finish, what waits, the
round, the step limit, the model) is the contract every driver relies on.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, strategies as st
from pydantic import BaseModel

from helix_agents import (
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.agents.config import AgentConfig
from helix_agents.hitl.gates import Waiting
from helix_agents.log.state import SessionState
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.models.base import FINISH_TOOL_NAME
from helix_agents.runtime.decide import (
    MAX_STEPS_EXCEEDED,
    Complete,
    Fail,
    ModelStep,
    Over,
    RunRound,
    Stop,
    Suspend,
    call_kind,
    next_action,
)


class Answer(BaseModel):
    answer: str


class Nothing(BaseModel):
    pass


def _tool(name: str, *, client: bool = False) -> Any:
    return define_tool(name, "a tool", Nothing, "client" if client else (lambda _a, _c: "ok"))


PLAIN = define_agent("plain", llm=ScriptedLLM(["hi"]), tools=[_tool("t")], max_steps=3)
TYPED = define_agent("typed", llm=ScriptedLLM(["hi"]), output_schema=Answer, max_steps=3)


def _state(**fields: Any) -> SessionState:
    return SessionState(session_id="s", agent_type="a", run_id="r", root_session_id="s", **fields)


def _turn(*calls: ToolCall) -> AssistantMessage:
    return AssistantMessage(content="", tool_calls=list(calls))


def _result(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(tool_call_id=call.id, tool_name=call.name, content="done")


FINISH = ToolCall(id="f", name=FINISH_TOOL_NAME, arguments={"answer": "42"})
BAD_FINISH = ToolCall(id="g", name=FINISH_TOOL_NAME, arguments={"wrong": 1})
TOOL = ToolCall(id="c1", name="t", arguments={})


def test_a_fresh_run_calls_the_model() -> None:
    assert next_action(PLAIN, _state(messages=[UserMessage(content="go")])) == ModelStep()


def test_the_step_limit_fails_with_the_seeds_text() -> None:
    action = next_action(PLAIN, _state(run_step_count=3))
    assert action == Fail(MAX_STEPS_EXCEEDED)
    assert MAX_STEPS_EXCEEDED == "Max steps exceeded"
    assert next_action(PLAIN, _state(run_step_count=2)) == ModelStep()


def test_calls_without_a_result_make_a_round_even_at_the_step_limit() -> None:
    state = _state(messages=[_turn(TOOL)], run_step_count=3)
    assert next_action(PLAIN, state) == RunRound([TOOL])
    answered = _state(messages=[_turn(TOOL), _result(TOOL)], run_step_count=3)
    assert next_action(PLAIN, answered) == Fail(MAX_STEPS_EXCEEDED)


@pytest.mark.parametrize("status", ["completed", "failed", "interrupted", "paused"])
def test_a_run_not_running_is_over(status: str) -> None:
    state = _state(status=status, messages=[_turn(TOOL)], abort_requested=True)
    assert next_action(PLAIN, state) == Over(status)


def test_a_stop_request_comes_first_and_an_abort_beats_an_interrupt() -> None:
    state = _state(messages=[_turn(TOOL)], interrupt_requested=True, stop_reason="why")
    assert next_action(PLAIN, state) == Stop("interrupt", "why")
    both = _state(interrupt_requested=True, abort_requested=True, stop_reason="x")
    assert next_action(PLAIN, both) == Stop("abort", "x")


def test_a_recorded_valid_finish_completes_before_anything_waits() -> None:
    waiting = Waiting(approval=["c1"])
    state = _state(messages=[_turn(FINISH, TOOL), _result(FINISH)], run_step_count=1)
    assert next_action(TYPED, state, waiting) == Complete({"answer": "42"})


def test_a_finish_not_yet_recorded_is_routed_first() -> None:
    state = _state(messages=[_turn(FINISH)], run_step_count=1)
    assert next_action(TYPED, state) == RunRound([FINISH])


def test_an_invalid_finish_does_not_complete() -> None:
    state = _state(messages=[_turn(BAD_FINISH), _result(BAD_FINISH)], run_step_count=1)
    assert next_action(TYPED, state) == ModelStep()


def test_queued_follow_ups_come_before_the_completion() -> None:
    state = _state(
        messages=[_turn(FINISH), _result(FINISH)],
        run_step_count=1,
        queued_messages=[UserMessage(content="one more thing")],
    )
    assert next_action(TYPED, state) == ModelStep()


def test_a_finish_of_an_earlier_run_is_history() -> None:
    """A new run (a message to a completed companion) starts from the model, not the old end."""
    old = [_turn(FINISH), _result(FINISH)]
    assert next_action(TYPED, _state(messages=old, run_step_count=0)) == ModelStep()
    moved_on = [*old, UserMessage(content="again")]
    assert next_action(TYPED, _state(messages=moved_on, run_step_count=1)) == ModelStep()


def test_a_round_that_left_calls_waiting_suspends() -> None:
    waiting = Waiting(client=["c1"])
    state = _state(messages=[_turn(TOOL)], run_step_count=1)
    assert next_action(PLAIN, state, waiting) == Suspend(waiting)
    assert next_action(PLAIN, state, Waiting()) == RunRound([TOOL])


def _kinds_agent() -> AgentConfig:
    child = define_agent("child", llm=ScriptedLLM(["hi"]), output_schema=Answer)

    class Query(BaseModel):
        q: str

    return define_agent(
        "kinds",
        llm=ScriptedLLM(["hi"]),
        output_schema=Answer,
        tools=[
            _tool("local"),
            _tool("browser", client=True),
            create_sub_agent_tool(child, Query),
            create_remote_sub_agent_tool(
                "far",
                description="far",
                input_schema=Query,
                output_schema=Answer,
                transport=object(),  # type: ignore[arg-type]  # never reached: only routed
                remote_agent_type="far",
            ),
        ],
    )


def test_each_call_has_one_kind() -> None:
    agent = _kinds_agent()
    kinds = {
        name: call_kind(agent, ToolCall(id="x", name=name))
        for name in (
            FINISH_TOOL_NAME,
            "local",
            "browser",
            "subagent__child",
            "subagent__far",
            "nope",
        )
    }
    assert kinds == {
        FINISH_TOOL_NAME: "finish",
        "local": "tool",
        "browser": "client",
        "subagent__child": "child",
        "subagent__far": "remote",
        "nope": "unknown",
    }
    # without an output schema, __finish__ is just a tool it does not have
    assert call_kind(PLAIN, ToolCall(id="x", name=FINISH_TOOL_NAME)) == "unknown"


@given(
    status=st.sampled_from(["running", "completed", "failed", "interrupted", "paused"]),
    interrupt=st.booleans(),
    abort=st.booleans(),
    steps=st.integers(min_value=0, max_value=5),
    turn=st.sampled_from(["none", "tool", "tool-answered", "finish", "finish-answered"]),
    queued=st.booleans(),
    waits=st.booleans(),
)
def test_the_rules_apply_in_their_order(
    status: str, interrupt: bool, abort: bool, steps: int, turn: str, queued: bool, waits: bool
) -> None:
    """Whatever the state, exactly the first rule that applies decides."""
    messages: list[Any] = [UserMessage(content="go")]
    call = FINISH if turn.startswith("finish") else TOOL
    if turn != "none":
        messages.append(_turn(call))
    if turn.endswith("answered"):
        messages.append(_result(call))
    state = _state(
        status=status,
        interrupt_requested=interrupt,
        abort_requested=abort,
        run_step_count=steps,
        messages=messages,
        queued_messages=[UserMessage(content="more")] if queued else [],
    )
    waiting = Waiting(approval=["c1"]) if waits else None
    action = next_action(TYPED, state, waiting)
    if status != "running":
        expected: Any = Over(status)
    elif abort or interrupt:
        expected = Stop("abort" if abort else "interrupt", None)
    elif turn == "finish-answered" and steps > 0 and not queued:
        expected = Complete({"answer": "42"})
    elif waits:
        expected = Suspend(Waiting(approval=["c1"]))
    elif turn in ("tool", "finish"):
        expected = RunRound([call])
    elif steps >= TYPED.max_steps:
        expected = Fail(MAX_STEPS_EXCEEDED)
    else:
        expected = ModelStep()
    assert action == expected
