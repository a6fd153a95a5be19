"""What a run decides about one model turn, as pure functions of the agent and its state.

The tools its model sees, ids for its calls that are unique where they must
be, which calls still lack a result, and a turn that ends the run (a valid
``__finish__``, or text from an agent with no output schema).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import msgspec

from helix_agents.agents.config import AgentConfig
from helix_agents.agents.tools import json_schema_of
from helix_agents.companions.tools import companion_specs
from helix_agents.events import Completed, Event, OutputChunk
from helix_agents.hitl.gates import tree_unique_call_id, waits_for_people
from helix_agents.log.state import SessionState
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage
from helix_agents.models.base import FINISH_TOOL_NAME, ToolSpec
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, tool_start, validate_finish

__all__ = [
    "FINISH_REMINDER",
    "completion",
    "final_answer",
    "tool_specs",
    "unanswered_calls",
    "unique_calls",
]

FINISH_REMINDER = (
    f"Call the {FINISH_TOOL_NAME} tool with your final output; it must match the output schema."
)
"""Sent when an agent with an output schema answers with text instead of finishing."""

_CALL_ID = re.compile(r"[A-Za-z0-9_\-]{1,64}")


def unanswered_calls(state: SessionState) -> list[ToolCall]:
    """Tool calls of the last assistant message that have no recorded result yet."""
    answered: set[str] = set()
    for message in reversed(state.messages):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            return [call for call in message.tool_calls if call.id not in answered]
    return []


def tool_specs(agent: AgentConfig) -> list[ToolSpec]:
    """The tools as ``agent``'s model sees them: its own, the companion tools, ``__finish__``."""
    specs = [tool.spec() for tool in agent.tools]
    specs.extend(companion_specs(agent))
    if agent.output_schema is not None:
        specs.append(
            ToolSpec(
                name=FINISH_TOOL_NAME,
                description="Finish the task with your final output.",
                parameters=json_schema_of(agent.output_schema),
            )
        )
    return specs


def unique_calls(
    agent: AgentConfig, state: SessionState, calls: Sequence[ToolCall]
) -> list[ToolCall]:
    """Give every call an id unique in the session and safe inside a session id.

    In a sub-agent, a call that can wait for a person gets an id unique in
    the whole tree (the root answers entries by id).
    """
    used = {
        call.id
        for message in state.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    }
    fixed: list[ToolCall] = []
    for index, call in enumerate(calls):
        call_id = call.id
        if not _CALL_ID.fullmatch(call_id) or call_id in used:
            call_id = f"call-{state.last_seq}-{index}"
        if state.parent_session_id is not None and waits_for_people(agent.tool(call.name)):
            call_id = tree_unique_call_id(state.session_id, call_id)
        used.add(call_id)
        fixed.append(call if call_id == call.id else msgspec.structs.replace(call, id=call_id))
    return fixed


def final_answer(
    agent: AgentConfig, state: SessionState, calls: list[ToolCall], content: str
) -> list[Event]:
    """For a turn that ends the run: its whole ending.

    That is a turn whose only call is a valid ``__finish__`` (validation
    is pure, so the answer, the finish call's record and the completion
    can be one batch, one commit, instead of three), or a turn with no
    call from an agent without an output schema (its text is the output).
    """
    if not calls and agent.output_schema is None:
        return completion(agent, state, content)
    if len(calls) != 1 or calls[0].name != FINISH_TOOL_NAME or agent.output_schema is None:
        return []
    call = calls[0]
    outcome = validate_finish(agent, call.arguments)
    if outcome.error is not None:
        return []
    sid = state.session_id
    return [
        tool_start(agent, sid, call),
        *result_events(agent, sid, call, ToolOutcome(result="output accepted"), usage=False),
        *completion(agent, state, outcome.result),
    ]


def completion(agent: AgentConfig, state: SessionState, output: Any) -> list[Event]:
    """The events that complete the run with ``output``: its output chunk, then ``completed``."""
    return [
        OutputChunk(
            agent_id=state.session_id,
            agent_type=agent.name,
            output=output,
        ),
        Completed(output=output),
    ]
