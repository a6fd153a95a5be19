"""What a durable step reads in a session's log: the plan, the calls, what a retry finds.

Pure functions of the log or of its folded state, shared by the steps
(``steps.py``, ``calls.py``); and the check of what the durable runtimes run
(a workspace's provider must reach its files from every worker).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from helix_agents.agents.config import AgentConfig
from helix_agents.agents.define import AgentRegistry
from helix_agents.engines.durable.plan import Next, Plan
from helix_agents.errors import HelixError, OwnershipLost, RemoteAgentFailedError, UsageError
from helix_agents.events import (
    Completed,
    Event,
    Failed,
    MessageAppended,
    RunStarted,
    ToolEnd,
    ToolStart,
)
from helix_agents.hitl.routing import expiring
from helix_agents.log.state import SessionState
from helix_agents.messages import AssistantMessage, ToolCall
from helix_agents.runtime.decide import (
    Action,
    Complete,
    Fail,
    ModelStep,
    Over,
    RunRound,
    Stop,
    next_action,
    unanswered_calls,
)
from helix_agents.workspaces.base import shares_files

__all__ = [
    "StepFailed",
    "first_error",
    "goes_on",
    "last_run_seq",
    "last_turn_seq",
    "open_tool_starts",
    "plan_of",
    "refuse_unsupported",
    "stepped_since",
    "unanswered",
]


class StepFailed(HelixError):
    """A step that can never succeed (no such session, an agent this worker lacks): no retry."""


def refuse_unsupported(
    registry: AgentRegistry, providers: Mapping[str, object] | None = None
) -> set[str]:
    """Refuse what the durable steps cannot run; the names of the agents' tools.

    A durable run's steps may each run on another worker, so a workspace must
    live where every worker reaches it: its provider (in ``providers``, the
    workers' ``workspace_providers``) must declare ``durable = True``
    (:func:`~helix_agents.workspaces.base.shares_files`). A kind with no
    provider is the soft wiring of the built-in runtime: its tool calls fail
    with ``WorkspaceFailedError``.

    Raises:
        UsageError: an agent declaring a workspace whose provider keeps its
            files in one process (``MemoryWorkspaceProvider``).
    """
    known: set[str] = set()
    for name in registry.names():
        agent = registry.get(name)
        assert agent is not None
        for workspace in agent.workspaces:
            provider = (providers or {}).get(workspace.kind)
            if provider is not None and not shares_files(provider):
                raise UsageError(
                    f"agent {name!r} declares workspace {workspace.name!r} of kind "
                    f"{workspace.kind!r}, whose provider {type(provider).__name__} keeps its "
                    "files in one process: a durable run's steps may run on any worker, so "
                    "give a provider whose files every worker reaches (durable = True, e.g. "
                    "LocalWorkspaceProvider on a root the workers share)"
                )
        known.update(tool.name for tool in agent.tools)
    return known


def plan_of(agent: AgentConfig, state: SessionState) -> Plan:
    """Where ``state`` stands, and what its workflow runs next (``next_action`` decides)."""
    action = next_action(agent, state)
    due = [entry.expires_at for entry in expiring(state) if entry.expires_at is not None]
    plan = Plan(
        session_id=state.session_id,
        seq=state.last_seq,
        status=state.status,
        next=_NEXT[type(action)],
        expires_at=min(due) if due else None,
    )
    if isinstance(action, Stop):
        plan.stop, plan.stop_reason = action.kind, action.reason
    elif isinstance(action, Over):
        plan.next = "pause" if action.status == "paused" else "end"
    return plan


_NEXT: dict[type[Action], Next] = {
    ModelStep: "step",
    Complete: "step",
    Fail: "step",
    RunRound: "round",
    Stop: "stop",
    Over: "end",
}
"""The durable step that carries each action out (a workflow only drives); ``Suspend``
is not one: a plan asks ``next_action`` with no round's waiting, so it never comes."""


def retryable(error: BaseException) -> bool:
    """Whether a step that raised ``error`` may run again (not a step that can never succeed)."""
    return not isinstance(error, StepFailed | OwnershipLost | RemoteAgentFailedError)


def first_error(group: BaseExceptionGroup[Any]) -> BaseException:
    """The first leaf exception of ``group`` (a step raises what its body raised)."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def goes_on(state: SessionState) -> bool:
    """Whether a call's step may run: the session runs and no stop request waits."""
    stopping = state.abort_requested or state.interrupt_requested
    return state.status == "running" and not stopping


def unanswered(state: SessionState, call_id: str) -> ToolCall | None:
    """Call ``call_id`` of the last turn, if it has no result yet."""
    for call in unanswered_calls(state):
        if call.id == call_id:
            return call
    return None


def stepped_since(log_: list[Event], seq: int) -> bool:
    """Whether the log holds a model turn (or an ending) after ``seq``: the step was done."""
    for event in reversed(log_):
        if event.seq <= seq:
            return False
        if isinstance(event, Completed | Failed) or (
            isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage)
        ):
            return True
    return False


def last_run_seq(log_: list[Event]) -> int:
    """The seq of the last ``run_started`` (0 if none)."""
    for event in reversed(log_):
        if isinstance(event, RunStarted):
            return event.seq
    return 0


def last_turn_seq(log_: list[Event]) -> int:
    """The seq of the last assistant turn (0 if none)."""
    for event in reversed(log_):
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage):
            return event.seq
    return 0


def open_tool_starts(events: list[Event]) -> set[str]:
    """Ids of calls with a ``tool_start`` and no ``tool_end`` after the last model turn."""
    started: set[str] = set()
    for event in events[_last_turn_index(events) :]:
        if isinstance(event, ToolStart):
            started.add(event.tool_call_id)
        elif isinstance(event, ToolEnd):
            started.discard(event.tool_call_id)
    return started


def _last_turn_index(events: list[Event]) -> int:
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage):
            return index
    return 0
