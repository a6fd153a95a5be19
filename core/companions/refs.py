"""What a parent's log says about its companions, and the events that change it.

Pure: no I/O. ``core/companions/parent.py`` runs the calls; these read a parent's
``SubSessionRef`` entries (the current child of a name, whether its outcome
waits for delivery) and build the records (an end seen, a segment of the
parent's stream, a superseded outcome's delivery). specs/companions.md.
"""

from __future__ import annotations

from typing import Any

from helix_agents.agents.config import AgentConfig
from helix_agents.children.target import ChildOutcome
from helix_agents.companions.tools import CompanionArgs
from helix_agents.events import (
    CompletionDelivered,
    Event,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
)
from helix_agents.log.state import SessionState, SubSessionRef
from helix_agents.messages import ToolCall
from helix_agents.protocol import RemoteStatusResponse
from helix_agents.runtime.tool_runner import ToolOutcome, encode_result

__all__ = [
    "ENDED",
    "LIVE",
    "auto_name",
    "ended_events",
    "latest_child",
    "no_child",
    "outcome_notice",
    "outcome_view",
    "recorded_outcome",
    "segment_failed",
    "segment_start",
    "send_problem",
    "supersede",
    "terminated_events",
    "undelivered",
]

LIVE = ("running", "paused_awaiting_client")
ENDED = ("completed", "failed", "interrupted")


def latest_child(state: SessionState, name: str) -> SubSessionRef | None:
    """The current child called ``name`` (its latest fresh spawn), or None."""
    found: SubSessionRef | None = None
    for ref in state.sub_sessions.values():
        later = found is None or ref.started_seq > found.started_seq
        if ref.mode == "persistent" and ref.name == name and later:
            found = ref
    return found


def auto_name(state: SessionState, agent_type: str) -> str:
    """``{agent_type}-{n}``, the smallest ``n >= 1`` no companion of the parent is called."""
    used = {ref.name for ref in state.sub_sessions.values() if ref.mode == "persistent"}
    n = 1
    while f"{agent_type}-{n}" in used:
        n += 1
    return f"{agent_type}-{n}"


def outcome_view(ref: SubSessionRef) -> dict[str, Any]:
    """A child's ended turn as a tool result shows it: ``{status, result | error}``."""
    shown: dict[str, Any] = {"status": ref.status}
    if ref.status == "completed":
        shown["result"] = ref.output
    elif ref.error is not None:
        shown["error"] = ref.error
    return shown


def outcome_notice(ref: SubSessionRef) -> str:
    """The message that pushes a child's outcome to the parent's model."""
    if ref.status == "completed":
        return f"Sub-agent {ref.name!r} completed with result: " + encode_result(
            ToolOutcome(result=ref.output)
        )
    if ref.status == "failed":
        return f"Sub-agent {ref.name!r} failed: {ref.error or 'failed'}"
    return f"Sub-agent {ref.name!r} was interrupted" + (f": {ref.error}" if ref.error else "")


def undelivered(ref: SubSessionRef | None) -> bool:
    """True when the child's turn ended and the parent's model has not had it yet."""
    return ref is not None and ref.status in ENDED and not ref.completion_delivered


def no_child(name: str) -> str:
    """The error for a name no child has."""
    return f"No child agent found with name {name!r}"


def send_problem(
    name: str, ref: SubSessionRef | None, status: RemoteStatusResponse | None
) -> str | None:
    """Why a message cannot go to child ``name``, or None."""
    if ref is None:
        return no_child(name)
    if ref.status in LIVE and status is not None and status.status == "paused":
        return (
            f"child {name!r} has unresolved client-tool calls (or approvals): submit those "
            "or terminate it first"
        )
    if ref.status in ("failed", "terminated"):
        return (
            f"child {name!r} is {ref.status}, not active: use companion__spawnAgent to re-spawn it"
        )
    return None


def recorded_outcome(ref: SubSessionRef) -> ChildOutcome:
    """The outcome the parent's log recorded for the child's turn."""
    status = "failed" if ref.status not in ("completed", "interrupted") else ref.status
    return ChildOutcome(status=status, output=ref.output, error=ref.error)


def ended_events(
    state: SessionState, ref: SubSessionRef, status: RemoteStatusResponse
) -> list[Event]:
    """``sub_session_finished`` for a child seen ended, unless the log moved on since."""
    current = state.sub_sessions.get(ref.sub_session_id)
    if current is None or current.status not in LIVE or current.tool_call_id != ref.tool_call_id:
        return []
    if status.status not in ENDED:
        return []
    return [
        SubSessionFinished(
            sub_session_id=ref.sub_session_id,
            status=status.status,  # type: ignore[arg-type]
            output=status.output if status.status == "completed" else None,
            error=status.error if status.status != "completed" else None,
        )
    ]


def segment_start(
    state: SessionState, agent: AgentConfig, sid: str, call: ToolCall, args: CompanionArgs
) -> SubAgentStart:
    """The ``subagent_start`` chunk of a blocking spawn (its child runs inside the call)."""
    return SubAgentStart(
        agent_id=state.session_id,
        agent_type=agent.name,
        sub_agent_id=sid,
        sub_agent_type=args.agent,
        tool_call_id=call.id,
        parent_session_id=state.session_id,
        input=args.message,
    )


def segment_failed(
    state: SessionState, agent_type: str, sid: str, call: ToolCall, error: str
) -> SubAgentEnd:
    """The ``subagent_end`` of a blocking spawn whose child could not be started."""
    return SubAgentEnd(
        agent_id=state.session_id,
        agent_type=state.agent_type,
        sub_agent_id=sid,
        sub_agent_type=agent_type,
        tool_call_id=call.id,
        parent_session_id=state.session_id,
        success=False,
        error=error,
    )


def supersede(old: SubSessionRef | None) -> list[Event]:
    """Deliver, with the call that re-consults it, an outcome the parent has not yet seen."""
    if old is None or not undelivered(old):
        return []
    return [CompletionDelivered(sub_session_id=old.sub_session_id)]


def terminated_events(sub_session_id: str, error: str) -> list[Event]:
    """A child the parent stopped for good: its end, flagged delivered (never pushed)."""
    return [
        SubSessionFinished(sub_session_id=sub_session_id, status="terminated", error=error),
        CompletionDelivered(sub_session_id=sub_session_id),
    ]
