"""The run loop's side of human in the loop: approval gates, client calls, suspending.

A call that waits for a person records its pending entry (``approval_requested``
or ``client_tool_pending``) and the round of calls goes on; when every call of
the round is done or waiting, the run suspends with one batch holding an
``input_required`` chunk (the open entries of the session's subtree) and
``suspended``. ``specs/hitl.md`` is the whole model: routing of answers,
the ancestors' ownership records, expiry.
"""

from __future__ import annotations

import hashlib
import inspect
import logging
import time
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any, Literal

from helix_agents.agents.config import AgentConfig, RemoteSubAgentTool, SubAgentTool
from helix_agents.agents.tools import Tool
from helix_agents.events import (
    ApprovalRequested,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    Event,
    InputRequired,
    RemoteRef,
    Suspended,
    SuspensionReason,
)
from helix_agents.log.projections import pending_inputs
from helix_agents.log.state import SessionState
from helix_agents.messages import ToolCall
from helix_agents.runtime.tool_runner import (
    InvalidArguments,
    RunToolContext,
    ToolOutcome,
    result_events,
    tool_start,
    validate_arguments,
)
from helix_agents.runtime.writer import SessionWriter

__all__ = [
    "Waiting",
    "approval_gate",
    "client_call",
    "expiry_message",
    "route_records",
    "suspension",
    "tree_unique_call_id",
    "waits_for_people",
]

log = logging.getLogger("helix_agents")

GatedTool = Tool[Any] | SubAgentTool[Any] | RemoteSubAgentTool[Any]


@dataclass
class Waiting:
    """The calls of a round that wait: own client tools, own approvals, suspended children."""

    client: list[str] = field(default_factory=list)
    approval: list[str] = field(default_factory=list)
    children: dict[str, str] = field(default_factory=dict)
    """Child session id -> the parent's tool call id."""

    def __bool__(self) -> bool:
        return bool(self.client or self.approval or self.children)

    @property
    def reason(self) -> SuspensionReason:
        """What the session waits for, most remote first."""
        if self.children:
            return "children"
        return "approval" if self.approval else "client_tool"

    @property
    def call_ids(self) -> list[str]:
        """Every waiting call id."""
        return [*self.client, *self.approval, *self.children.values()]


def expiry_message(expires_in: float | None) -> str:
    """The error an entry resolves to when nobody answered it in time."""
    return f"no answer within {expires_in or 0:g} s"


def waits_for_people(tool: Any) -> bool:
    """True for a tool whose calls can wait for a person (a client tool or an approval gate)."""
    if isinstance(tool, Tool) and tool.is_client_tool:
        return True
    gated = isinstance(tool, Tool | SubAgentTool | RemoteSubAgentTool)
    return gated and tool.requires_approval is not False


def tree_unique_call_id(session_id: str, call_id: str) -> str:
    """``call_id`` made unique in a tree: suffixed with a digest of the session id.

    Pending entries are answered by tool call id at the root, so two
    descendants waiting on calls with the same id (scripted models number
    them alike) must not collide.
    """
    digest = hashlib.blake2b(session_id.encode(), digest_size=4).hexdigest()
    return f"{call_id[:55]}-{digest}"


def _expiry(expires_in: float | None) -> tuple[float | None, float | None]:
    if expires_in is None:
        return None, None
    return expires_in, time.time() + expires_in


async def approval_gate(
    writer: SessionWriter, agent: AgentConfig, call: ToolCall, tool: GatedTool
) -> Literal["go", "wait", "done"]:
    """Decide a call's approval: run it (``go``), wait for a person, or ``done`` (denied).

    A predicate that raises counts as "needs approval": a gate fails closed.
    """
    rule = tool.requires_approval
    if rule is False:
        return "go"
    decision = writer.state.pending_approvals.get(call.id)
    if decision is None:
        if callable(rule) and not await _predicate_says_approve(rule, writer, agent, call, tool):
            return "go"
        expires_in, expires_at = _expiry(tool.expires_in)
        await writer.append(
            ApprovalRequested(
                tool_call_id=call.id,
                tool_name=call.name,
                arguments=call.arguments,
                expires_in=expires_in,
                expires_at=expires_at,
            )
        )
        return "wait"
    if decision.approved is None:
        return "wait"
    if decision.approved:
        return "go"
    if decision.expired:
        error = decision.reason or expiry_message(decision.expires_in)
    else:
        error = (
            f"denied by a person: {decision.reason}" if decision.reason else "denied by a person"
        )
    sid = writer.session_id
    await writer.append(
        tool_start(agent, sid, call),
        *result_events(agent, sid, call, ToolOutcome(error=error), usage=False),
    )
    return "done"


async def _predicate_says_approve(
    rule: Any, writer: SessionWriter, agent: AgentConfig, call: ToolCall, tool: GatedTool
) -> bool:
    try:
        value = validate_arguments(tool.input_schema, call.arguments)
    except InvalidArguments:
        return False  # the call fails validation where it runs; nothing to approve
    try:
        verdict = rule(value, RunToolContext(agent, writer, call))
        if inspect.isawaitable(verdict):
            verdict = await verdict
    except Exception:
        log.exception("the approval rule of %s failed: asking a person", call.name)
        return True
    return bool(verdict)


async def client_call(
    writer: SessionWriter, agent: AgentConfig, call: ToolCall, tool: Tool[Any]
) -> bool:
    """Record a client tool's pending call or its submitted result; True while waiting."""
    pending = writer.state.pending_client_tools.get(call.id)
    sid = writer.session_id
    if pending is None:
        expires_in, expires_at = _expiry(tool.expires_in)
        await writer.append(
            tool_start(agent, sid, call),
            ClientToolPending(
                tool_call_id=call.id,
                tool_name=tool.name,
                arguments=call.arguments,
                expires_in=expires_in,
                expires_at=expires_at,
            ),
        )
        return True
    if not pending.submitted:
        return True
    outcome = ToolOutcome(result=pending.result, error=pending.error)
    await writer.append(*result_events(agent, sid, call, outcome, usage=True))
    return False


def route_records(
    chunk: InputRequired, *, via: str, remote: RemoteRef | None, known: AbstractSet[str]
) -> list[Event]:
    """An ancestor's route to each entry of a forwarded ``input_required`` it does not know.

    Recorded in the batch that forwards the chunk, so on every ancestor the
    route to an entry exists before the entry shows on its stream.
    """
    return [
        ClientToolOwnershipRecorded(
            tool_call_id=entry.tool_call_id,
            owner_session_id=entry.owner_session_id,
            remote=remote,
            via_session_id=via,
            kind=entry.kind,
            tool_name=entry.tool_name,
            arguments=entry.arguments,
            path=entry.path,
            expires_in=entry.expires_in,
            expires_at=entry.expires_at,
        )
        for entry in chunk.pending
        if entry.tool_call_id not in known
    ]


def _answered_since(state: SessionState, waiting: Waiting) -> bool:
    """An answer arrived for something this round waits on, after it began to wait."""
    if any(
        state.pending_client_tools[call_id].submitted
        for call_id in waiting.client
        if call_id in state.pending_client_tools
    ):
        return True
    if any(
        state.pending_approvals[call_id].approved is not None
        for call_id in waiting.approval
        if call_id in state.pending_approvals
    ):
        return True
    for child_id in waiting.children:
        ref = state.sub_sessions.get(child_id)
        since = ref.suspended_seq if ref is not None and ref.suspended_seq is not None else 0
        for mirror in state.client_tool_ownership.values():
            if mirror.via_session_id == child_id and (mirror.answered_seq or 0) > since:
                return True
    return False


def suspension(agent: AgentConfig, waiting: Waiting) -> Any:
    """The events factory that suspends the run, unless an answer already arrived.

    Runs under the writer's lock on the latest state, so an answer recorded
    before the suspension is seen here (the loop then goes on), and one
    recorded after it finds the session paused and resumes it.
    """

    def build(state: SessionState) -> list[Event]:
        if _answered_since(state, waiting):
            return []
        return [
            InputRequired(
                agent_id=state.session_id, agent_type=agent.name, pending=pending_inputs(state)
            ),
            Suspended(reason=waiting.reason, tool_call_ids=waiting.call_ids),
        ]

    return build
