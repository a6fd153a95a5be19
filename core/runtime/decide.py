"""A run's decisions, written once: pure functions of the agent and what its log says.

:func:`next_action` says what a run does next (call the model, run a round of
calls, pause for people, complete, fail at the step limit, stop on a request,
nothing: it is over) and :func:`call_kind` how one call of a round is carried
out. Every runtime is a driver of these: the built-in loop
(``run_loop.py``), the durable steps Temporal and DBOS replay
(``helix_agents.engines.durable``). A driver carries the action out, folds
what it appended, and asks again; none decides anything of its own.

Also here, what a run decides about one model turn: the tools its model sees,
ids for its calls that are unique where they must be, which calls still lack
a result, and a turn that ends the run (a valid ``__finish__``, or text from
an agent with no output schema).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from helix_agents.agents.config import AgentConfig, RemoteSubAgentTool, SubAgentTool
from helix_agents.agents.tools import COMPANION_TOOL_PREFIX, json_schema_of
from helix_agents.companions.tools import companion_specs
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    Aborted,
    Completed,
    ErrorChunk,
    Event,
    Failed,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    MessageQueued,
    Multitask,
    OutputChunk,
    RunStarted,
    RunSuperseded,
)
from helix_agents.hitl.gates import Waiting, tree_unique_call_id, waits_for_people
from helix_agents.log.state import PendingTurn, RunProblem, SessionState
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from helix_agents.models.base import FINISH_TOOL_NAME, ToolSpec
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, tool_start, validate_finish

__all__ = [
    "MAX_STEPS_EXCEEDED",
    "FINISH_REMINDER",
    "Action",
    "CallKind",
    "JOB_KINDS",
    "JobKind",
    "Complete",
    "Fail",
    "ModelStep",
    "Over",
    "RunRound",
    "Stop",
    "Suspend",
    "call_kind",
    "failure",
    "failure_text",
    "finished_output",
    "internal_error",
    "next_action",
    "next_turn",
    "queued_events",
    "stop_of",
    "turn_due",
    "reminder",
    "stop_ending",
    "stop_reason_text",
    "strict_error",
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

MAX_STEPS_EXCEEDED = "Max steps exceeded"
"""Why a run that reached its agent's ``max_steps`` fails (the seeds' text)."""

# --- the next action ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelStep:
    """Call the model: ``step_started``, its streamed text, its turn."""


@dataclass(frozen=True, slots=True)
class RunRound:
    """Route and run the last turn's calls that have no result yet."""

    calls: list[ToolCall]


@dataclass(frozen=True, slots=True)
class Suspend:
    """Pause the run: the round left calls waiting for people (or for paused children)."""

    waiting: Waiting


@dataclass(frozen=True, slots=True)
class Complete:
    """Complete the run with ``output`` (the last turn's valid ``__finish__``)."""

    output: Any


@dataclass(frozen=True, slots=True)
class Fail:
    """Fail the run with ``error`` (the step limit)."""

    error: str
    recoverable: bool = False


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop the run: an interrupt or abort request is in the log."""

    kind: Literal["interrupt", "abort"]
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Over:
    """Nothing to do: the run is over (paused, completed, failed, interrupted)."""

    status: str


Action = ModelStep | RunRound | Suspend | Complete | Fail | Stop | Over
"""What a run does next (:func:`next_action`)."""


def next_action(agent: AgentConfig, state: SessionState, waiting: Waiting | None = None) -> Action:
    """What the run of ``state`` does next; ``waiting``: what the round just run left waiting.

    In this order: a run not running is over; a stop request in the log stops
    it; a strict session's problem fails it once its round is done; the last
    turn's valid ``__finish__`` completes it (unless follow-ups are queued:
    they come first); a round that left calls waiting suspends it; calls
    without a result make a round; the step limit fails it; else the model is
    called.
    """
    if state.status != "running":
        return Over(state.status)
    if state.abort_requested:
        return Stop("abort", state.stop_reason)
    if state.interrupt_requested:
        return Stop("interrupt", state.stop_reason)
    if state.strict and state.problems and not waiting and not unanswered_calls(state):
        return Fail(strict_error(state.problems[0]))
    if not state.queued_messages:
        finished = finished_output(agent, state)
        if finished is not None:
            return Complete(finished[0])
    if waiting:
        return Suspend(waiting)
    pending = unanswered_calls(state)
    if pending:
        return RunRound(pending)
    if state.run_step_count >= agent.max_steps:
        return Fail(MAX_STEPS_EXCEEDED)
    return ModelStep()


def turn_due(state: SessionState) -> PendingTurn | None:
    """The waiting turn (``message_queued`` with ``multitask``) due to start now, if any.

    The first in arrival order, once the run completed, or once it stopped
    (``interrupted``) for an interrupt or rollback message sent to it. A
    failed session starts none; one interrupted by a plain interrupt keeps
    them until a later run of it completes.
    """
    if not state.pending_turns:
        return None
    if state.status == "completed":
        return state.pending_turns[0]
    if state.status == "interrupted" and any(
        turn.multitask != "enqueue" and turn.run_id == state.run_id for turn in state.pending_turns
    ):
        return state.pending_turns[0]
    return None


def next_turn(agent: AgentConfig, state: SessionState, run_id: str) -> list[Event]:
    """The events that begin the waiting turn due (:func:`turn_due`) as run ``run_id``.

    A run stopped for a rollback is superseded first (``run_superseded``); one
    stopped for an interrupt keeps what it did, and its calls left without a
    result get ``interrupted`` as their error, so the conversation stays valid.
    Then ``run_started(continue)`` with the turn's message. Empty: none due.
    """
    turn = turn_due(state)
    if turn is None:
        return []
    sid = state.session_id
    events: list[Event] = []
    rollback = state.status == "interrupted" and any(
        t.multitask == "rollback" and t.run_id == state.run_id for t in state.pending_turns
    )
    if rollback and state.run_base is not None:
        events.append(
            RunSuperseded(run_id=state.run_id, from_seq=state.run_base.seq, to_seq=state.last_seq)
        )
    else:
        for call in unanswered_calls(state):
            outcome = ToolOutcome(error="interrupted")
            events.extend(result_events(agent, sid, call, outcome, usage=False))
    events.append(
        RunStarted(
            run_id=run_id,
            mode="continue",
            messages=list(turn.messages),
            message_id=turn.message_id,
            turn_of=turn.seq,
        )
    )
    return events


def queued_events(
    state: SessionState, messages: list[UserMessage], message_id: str | None, choice: Multitask
) -> list[Event]:
    """What a message sent to the ``running`` or ``paused`` run of ``state`` appends.

    ``steer``: ``message_queued``; ``enqueue``: one with its choice; ``interrupt``
    and ``rollback``: one with its choice, then ``interrupt_requested`` (and, for
    a paused run, which has nothing to stop, ``interrupted`` at once).
    ``reject`` raises ``SESSION_BUSY``.
    """
    if choice == "reject":
        raise AgentServerError(
            "SESSION_BUSY",
            f"session {state.session_id!r} is {state.status} and its messages mid-run are "
            "rejected (multitask 'reject'): send it again once the run ended",
        )
    if choice == "steer":
        return [MessageQueued(messages=messages, message_id=message_id)]
    queued = MessageQueued(messages=messages, message_id=message_id, multitask=choice)
    if choice == "enqueue":
        return [queued]
    reason = f"{choice}: a new message"
    stop: list[Event] = [InterruptRequested(reason=reason)]
    if state.status == "paused":
        stop.append(Interrupted(reason=reason))
    return [queued, *stop]


def stop_of(events: Sequence[Event]) -> str | None:
    """The reason of the stop request among ``events`` (:func:`queued_events`), if any."""
    for event in events:
        if isinstance(event, InterruptRequested):
            return event.reason or ""
    return None


CallKind = Literal["finish", "companion", "unknown", "child", "remote", "client", "tool"]
"""How a round carries out one call (:func:`call_kind`)."""

JobKind = Literal["tool", "child", "remote", "companion"]
"""The calls a round runs on their own (the others are recorded, or wait for people)."""

JOB_KINDS: dict[CallKind, JobKind] = {
    "tool": "tool",
    "child": "child",
    "remote": "remote",
    "companion": "companion",
}
"""The call kinds that are jobs, as :data:`JobKind`."""


def call_kind(agent: AgentConfig, call: ToolCall) -> CallKind:
    """How ``call`` is carried out: recorded at once (``finish``, ``unknown``) or run.

    A ``child``/``remote``/``client``/``tool`` call passes its approval gate
    first (``hitl.gates.approval_gate``); a ``client`` call waits for the
    client's result; the rest run concurrently in the round.
    """
    if call.name == FINISH_TOOL_NAME and agent.output_schema is not None:
        return "finish"
    if agent.persistent_agents and call.name.startswith(COMPANION_TOOL_PREFIX):
        return "companion"
    tool = agent.tool(call.name)
    if tool is None:
        return "unknown"
    if isinstance(tool, SubAgentTool):
        return "child"
    if isinstance(tool, RemoteSubAgentTool):
        return "remote"
    if tool.is_client_tool:
        return "client"
    return "tool"


def finished_output(agent: AgentConfig, state: SessionState) -> tuple[Any] | None:
    """The output of this run's last turn's valid ``__finish__`` call, once it has its record.

    Only a turn of the current run counts, and only while it is the last word
    (no message after it): a finished turn of an earlier run is history.
    """
    if agent.output_schema is None or state.run_step_count == 0:
        return None
    answered: set[str] = set()
    for message in reversed(state.messages):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif not isinstance(message, AssistantMessage):
            return None
        else:
            for call in message.tool_calls:
                if call.name == FINISH_TOOL_NAME and call.id in answered:
                    outcome = validate_finish(agent, call.arguments)
                    if outcome.error is None:
                        return (outcome.result,)
            return None
    return None


def failure(
    agent: AgentConfig, session_id: str, error: str, *, recoverable: bool = False
) -> list[Event]:
    """The events that fail a run: its error chunk, then ``failed``."""
    return [
        ErrorChunk(
            agent_id=session_id, agent_type=agent.name, error=error, recoverable=recoverable
        ),
        Failed(error=error, recoverable=recoverable),
    ]


def strict_error(problem: RunProblem) -> str:
    """Why a strict session's run failed: its first problem."""
    return f"strict: {problem.describe()}"


def failure_text(state: SessionState, error: str) -> str:
    """The error a run fails with, led by a rejected output of the round just before it.

    A model that fails right after its output was rejected fails for that
    reason first: ``output rejected: answer: Field required; then LLM call
    failed: ...`` (the cause is one step earlier than the failure). Other
    problems stay in ``problems`` only (a tool error is no cause of a model
    call's failure); the step limit keeps the seeds' text.
    """
    if not state.problems or error == MAX_STEPS_EXCEEDED or error.startswith("strict: "):
        return error
    last_turn: set[str] = set()
    for message in reversed(state.messages):
        if isinstance(message, AssistantMessage):
            last_turn = {call.id for call in message.tool_calls}
            break
    problem = state.problems[-1]
    if problem.kind != "output_rejected" or problem.tool_call_id not in last_turn:
        return error
    return f"{problem.describe()}; then {error}"


def stop_reason_text(kind: str, reason: str | None) -> str | None:
    """The error a stop leaves (an abort's: ``aborted: <reason>``; an interrupt leaves none)."""
    if kind != "abort":
        return None
    return f"aborted: {reason}" if reason else "aborted"


def stop_ending(
    agent: AgentConfig, session_id: str, kind: str, reason: str | None, closing: list[Event]
) -> list[Event]:
    """The events that end a stopped run: its open calls closed, then the ending.

    An interrupt ends ``interrupted`` (resumable); an abort leaves its error
    chunk and ends ``aborted``.
    """
    error = stop_reason_text(kind, reason)
    if error is None:
        return [*closing, Interrupted(reason=reason)]
    return [
        *closing,
        ErrorChunk(agent_id=session_id, agent_type=agent.name, error=error),
        Aborted(reason=reason),
    ]


def internal_error(kind: str, message: str) -> str:
    """Why a run failed on an error of its own (a bug, a broken store): kind and message."""
    return f"internal error: {kind}: {message}"


def reminder(agent: AgentConfig, calls: Sequence[ToolCall]) -> list[Event]:
    """After a turn: the reminder to call ``__finish__``, when it answered without calls."""
    if calls or agent.output_schema is None:
        return []
    return [MessageAppended(message=UserMessage(content=FINISH_REMINDER))]


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
