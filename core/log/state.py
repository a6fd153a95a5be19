"""What the projections produce: a session's state, its status, its stream items."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from helix_agents.events import (
    Chunk,
    PendingInput,
    PendingInputKind,
    Principal,
    QueuedMultitask,
    RemoteRef,
    SubSessionMode,
    SuspensionReason,
)
from helix_agents.messages import Message, UserMessage

__all__ = [
    "MessageReceipt",
    "ModelTokens",
    "PendingApproval",
    "PendingClientTool",
    "PendingTurn",
    "ProblemKind",
    "RunBase",
    "RunProblem",
    "SessionState",
    "SessionStatus",
    "StatusSnapshot",
    "StreamItem",
    "SubSessionRef",
    "SubSessionStatus",
    "ToolOwnership",
    "UsageTotals",
    "WorkspaceFile",
]

SessionStatus = Literal["running", "completed", "failed", "interrupted", "paused"]
"""The protocol's status values; ``paused`` is a session suspended on outside input."""

SubSessionStatus = Literal[
    "running", "completed", "failed", "interrupted", "terminated", "paused_awaiting_client"
]
"""A child's status as its parent's log knows it."""


ProblemKind = Literal["tool_error", "unknown_tool", "child_failed", "output_rejected"]
"""What went wrong in a run that the model was shown and could recover from."""

_PROBLEM_LABELS: dict[str, str] = {
    "tool_error": "tool {name!r} failed: {error}",
    "unknown_tool": "the model called an unknown tool {name!r}",
    "child_failed": "sub-agent call {name!r} failed: {error}",
    "output_rejected": "output rejected: {error}",
}


class RunProblem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One thing that went wrong in a run (a tool error, a failed child...): its ``tool_end``."""

    kind: ProblemKind
    tool_name: str
    tool_call_id: str
    error: str
    seq: int
    """The seq of the ``tool_end`` that recorded it."""

    def describe(self) -> str:
        """The problem in one line, as an error message names it."""
        return _PROBLEM_LABELS[self.kind].format(name=self.tool_name, error=self.error)


class SubSessionRef(msgspec.Struct, kw_only=True, rename="camel"):
    """A parent's record of one child session, folded from its child events."""

    sub_session_id: str
    agent_type: str
    tool_call_id: str
    mode: SubSessionMode
    status: SubSessionStatus = "running"
    name: str | None = None
    remote: RemoteRef | None = None
    output: Any = None
    error: str | None = None
    last_child_seq: int = 0
    completion_delivered: bool = False
    started_seq: int = 0
    finished_seq: int | None = None
    suspended_seq: int | None = None
    """The seq of the child's latest ``sub_session_suspended`` on this log."""
    spawn_call_id: str | None = None
    """The call that created the ref (``tool_call_id`` is the one owning its current turn)."""
    started_at: float = 0.0
    """When the child was (last) started or spawned: the ``ts`` of that event, seconds."""
    completed_at: float | None = None
    """When it last finished (``sub_session_finished``'s ``ts``); None while it goes on."""


class PendingClientTool(msgspec.Struct, kw_only=True, rename="camel"):
    """A tool call waiting for the client; ``submitted`` once its result has arrived."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None
    submitted: bool = False
    result: Any = None
    error: str | None = None
    expires_in: float | None = None
    expires_at: float | None = None
    expired: bool = False


class PendingApproval(msgspec.Struct, kw_only=True, rename="camel"):
    """A tool call waiting for a human's approval; ``approved`` is None until decided."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None
    approved: bool | None = None
    reason: str | None = None
    expires_in: float | None = None
    expires_at: float | None = None
    expired: bool = False
    decided_by: str | None = None
    """Who decided (the ``approval_given`` event's ``decided_by``)."""
    decided_at: float | None = None
    """When it was decided (the ``approval_given`` event's time)."""


class ToolOwnership(msgspec.Struct, kw_only=True, rename="camel"):
    """A descendant's pending entry as an ancestor knows it: the route, and its answer."""

    owner_session_id: str
    remote: RemoteRef | None = None
    via_session_id: str | None = None
    kind: PendingInputKind = "client_tool"
    tool_name: str = ""
    arguments: Any = None
    path: list[str] = []
    expires_in: float | None = None
    expires_at: float | None = None
    answered: bool = False
    answered_seq: int | None = None
    result: Any = None
    error: str | None = None
    approved: bool | None = None
    reason: str | None = None
    expired: bool = False
    decided_by: str | None = None


class WorkspaceFile(msgspec.Struct, kw_only=True, rename="camel"):
    """A file this session's tools wrote to a workspace, as its log records it (a reference)."""

    workspace: str
    path: str
    size: int
    sha256: str
    seq: int
    """The seq of the ``workspace_written`` event."""


class ModelTokens(msgspec.Struct, kw_only=True, rename="camel"):
    """The tokens of the LLM calls to one model (cached input and reasoning are parts of
    input and output, priced apart: ``helix_agents.log.pricing``)."""

    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


class UsageTotals(msgspec.Struct, kw_only=True, rename="camel"):
    """This session's own usage (children are aggregated by the usage rollup, not here)."""

    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    sub_agent_calls: int = 0
    custom: dict[str, float] = {}
    models: dict[str, ModelTokens] = {}
    """The LLM calls' tokens by the model name the provider reported (``""``: none
    reported): what prices them (``helix_agents.log.pricing``)."""
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the provider's prompt cache."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those spent on reasoning (thinking)."""


class MessageReceipt(msgspec.Struct, kw_only=True, rename="camel"):
    """What became of a message sent with an id: the run it started or joined, and its text."""

    run_id: str
    messages: list[UserMessage]
    queued: bool = False
    """True when it was queued into a run under way rather than starting one."""


class PendingTurn(msgspec.Struct, kw_only=True, rename="camel"):
    """A message waiting for a turn of its own (``message_queued`` with ``multitask``)."""

    seq: int
    """The seq of its ``message_queued``."""
    messages: list[UserMessage]
    message_id: str | None = None
    multitask: QueuedMultitask = "enqueue"
    run_id: str
    """The run that was going on when it arrived (the one an interrupt or rollback stops)."""


class RunBase(msgspec.Struct, kw_only=True, rename="camel"):
    """What the current run began from: what a rollback (``run_superseded``) restores."""

    seq: int
    """The seq the run began at (its ``run_started``; 1 for the first run)."""
    message_count: int = 0
    """How many messages the conversation had (a run only appends to them)."""
    deferred_messages: list[Message] = []
    custom_state: dict[str, Any] = {}
    output: Any = None


class SessionState(msgspec.Struct, kw_only=True, rename="camel"):
    """Everything known about a session, folded from its log by ``project_state``."""

    session_id: str
    agent_type: str
    run_id: str
    status: SessionStatus = "running"
    suspension: SuspensionReason | None = None
    parent_session_id: str | None = None
    root_session_id: str
    parent_tool_call_id: str | None = None
    ancestors: list[str] = []
    """Session ids from the root to the parent (root first)."""
    metadata: dict[str, str] = {}
    input: Any = None
    messages: list[Message] = []
    awaiting_results: list[str] = []
    """Call ids of the last assistant turn that have no result message yet."""
    deferred_messages: list[Message] = []
    """Input given while ``awaiting_results``: joins ``messages`` after the last result."""
    queued_messages: list[UserMessage] = []
    """Follow-up messages sent while a run went on, not yet taken into the conversation."""
    pending_turns: list[PendingTurn] = []
    """Messages waiting for a turn of their own (enqueue, interrupt, rollback), in order."""
    run_base: RunBase | None = None
    """What the current run began from (restored if it is superseded)."""
    message_ids: dict[str, MessageReceipt] = {}
    """Client message ids seen (``send_message``), so a repeat starts nothing new."""
    custom_state: dict[str, Any] = {}
    step_count: int = 0
    run_step_count: int = 0
    output: Any = None
    error: str | None = None
    recoverable: bool = False
    interrupt_requested: bool = False
    abort_requested: bool = False
    stop_reason: str | None = None
    sub_sessions: dict[str, SubSessionRef] = {}
    pending_client_tools: dict[str, PendingClientTool] = {}
    client_tool_ownership: dict[str, ToolOwnership] = {}
    pending_approvals: dict[str, PendingApproval] = {}
    usage: UsageTotals = msgspec.field(default_factory=UsageTotals)
    host_id: str | None = None
    workspace_session_id: str | None = None
    """The session whose workspaces this one uses (inherited); None: its own."""
    owner: Principal | None = None
    """Who owns the session (``session_created.owner``; specs/auth.md); children inherit it."""
    workspace_files: dict[str, dict[str, WorkspaceFile]] = {}
    """Files this session wrote and did not delete since, by workspace name, then path."""
    strict: bool = False
    """Fail a run at its first problem (``session_created``'s ``strict``)."""
    problems: list[RunProblem] = []
    """What went wrong in the current turn that the model was shown (specs/runtime.md)."""
    forked_from: str | None = None
    """The origin session this one is a branch of (``session_forked``); None: not a branch."""
    forked_at: int | None = None
    """The origin's sequence the branch was forked at."""
    model: str | None = None
    """A ``PROVIDER:MODEL`` name the session's model calls use instead of its agent's (a fork)."""
    last_seq: int = 0
    created_ts: float = 0.0
    updated_ts: float = 0.0

    @property
    def is_terminal(self) -> bool:
        """True when the session completed or failed (it cannot be resumed)."""
        return self.status in ("completed", "failed")


class StatusSnapshot(msgspec.Struct, kw_only=True, rename="camel"):
    """A session's status as the protocol reports it (``latest_sequence`` = last seq)."""

    session_id: str
    run_id: str
    status: SessionStatus
    step_count: int
    latest_sequence: int
    output: Any = None
    error: str | None = None
    recoverable: bool = False
    state: dict[str, Any] = {}
    suspension: SuspensionReason | None = None
    pending_client_tool_call_ids: list[str] = []
    pending_inputs: list[PendingInput] = []
    awaiting_input: bool = False
    interrupt_requested: bool = False
    abort_requested: bool = False


class StreamItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One stream position: the chunk and its sequence (the seq of the event holding it)."""

    sequence: int
    chunk: Chunk
