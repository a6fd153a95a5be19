"""The event catalog: every fact a session log can hold.

A session is an append-only log of these events. Each has the envelope
``session_id``, ``seq`` (1, 2, 3 ... per session, no gaps) and ``ts`` (Unix
seconds, informational only: projections never read it). The JSON encoding
(camelCase field names, ``type`` tag) is both the storage and the wire format;
``specs/events.md`` documents every type.

Evolution rules: a new field gets a default; a field's type or a tag never
changes; a new meaning is a new event type. Decoding tolerates unknown fields.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from helix_agents.memory.base import MemoryItem
from helix_agents.messages import Message, UserMessage

__all__ = [
    "CHUNK_TYPES",
    "EVENT_TYPES",
    "WEBHOOK_EVENT_KINDS",
    "RECORD_TYPES",
    "SCHEDULE_TYPES",
    "Aborted",
    "AbortRequested",
    "ApprovalGiven",
    "ApprovalRequested",
    "Chunk",
    "ChunkBase",
    "ChildChunkForwarded",
    "ClientToolOwnershipRecorded",
    "ClientToolPending",
    "ClientToolResultSubmitted",
    "Completed",
    "CompletionDelivered",
    "CustomChunk",
    "ErrorChunk",
    "Event",
    "EventBase",
    "ForkEdit",
    "ForkEditBase",
    "Failed",
    "HostClaimed",
    "Interrupted",
    "InputRequired",
    "InterruptRequested",
    "MemoryRead",
    "MemoryWritten",
    "MessageAppended",
    "MessageQueued",
    "MULTITASK_CHOICES",
    "Multitask",
    "QueuedMultitask",
    "OutputChunk",
    "PartialOutput",
    "PendingInput",
    "PendingInputKind",
    "Principal",
    "ReasoningDelta",
    "RemoteRef",
    "RequestAction",
    "RequestMade",
    "RunMode",
    "ReplaceState",
    "ReplaceToolResult",
    "ReplaceUserMessage",
    "DecideApproval",
    "RunStarted",
    "ScheduleCatchup",
    "ScheduleCreated",
    "ScheduleDeleted",
    "ScheduleFired",
    "SchedulePaused",
    "ScheduleResumed",
    "RunSuperseded",
    "SessionCreated",
    "SessionForked",
    "StateUpdated",
    "StepRestarted",
    "StepStarted",
    "SubAgentEnd",
    "SubAgentStart",
    "SubSessionFinished",
    "SubSessionFinishStatus",
    "SubSessionMode",
    "SubSessionResumed",
    "SubSessionStarted",
    "SubSessionSuspended",
    "Suspended",
    "SuspensionReason",
    "TextDelta",
    "ToolEnd",
    "ToolStart",
    "UseAgent",
    "UsageKind",
    "UsageRecorded",
    "WorkspaceDeleted",
    "WorkspaceWritten",
    "Webhook",
    "WebhookAttempted",
    "WebhookDelivered",
    "WebhookEventKind",
    "WebhookFailed",
]

RunMode = Literal["start", "resume", "continue"]
"""Why a run began: a new session, resuming an interrupted or paused one, or a new turn."""

SuspensionReason = Literal["client_tool", "approval", "children"]
"""What a paused session waits for."""

SubSessionMode = Literal["ephemeral", "persistent"]
"""Ephemeral children run once per tool call; persistent ones are companions."""

SubSessionFinishStatus = Literal["completed", "failed", "interrupted", "terminated"]
"""How a child session ended, as recorded on its parent."""

UsageKind = Literal["tokens", "tool", "subagent", "custom"]
"""What a usage record counts."""

WebhookEventKind = Literal["completed", "failed", "paused_for_person"]
"""What a webhook is told about: a run completed, failed, or paused waiting for a person."""

WEBHOOK_EVENT_KINDS: tuple[WebhookEventKind, ...] = ("completed", "failed", "paused_for_person")
"""Every :data:`WebhookEventKind`, the default of ``Webhook.events``."""
Multitask = Literal["steer", "enqueue", "interrupt", "rollback", "reject"]
"""What a message sent to a running or paused session does (specs/server.md)."""

QueuedMultitask = Literal["enqueue", "interrupt", "rollback"]
"""The choices a ``message_queued`` records (``steer`` is its default: None)."""

MULTITASK_CHOICES: tuple[str, ...] = ("steer", "enqueue", "interrupt", "rollback", "reject")
"""Every :data:`Multitask` value, in the order the docs list them."""


class EventBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", rename="camel"):
    """The envelope every event carries.

    The writer stamps it: code that builds an event gives only its payload
    and leaves the envelope at its defaults; ``SessionWriter`` (or the
    executor, for the events it appends itself) sets the session, the next
    seq and the time. A store refuses an event whose envelope does not fit
    its log, so a forgotten stamp can never be stored.
    """

    session_id: str = ""
    seq: int = 0
    ts: float = 0.0


class Principal(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """Who: a user of a tenant, as an authenticated identity names them (specs/auth.md).

    A session's owner (``session_created.owner``) and the maker of a request
    that changed it (``request_made.by``). Either part may be absent: a static
    token mapped to a user without a tenant, a service without a user.
    """

    tenant: str | None = None
    user: str | None = None


class Webhook(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Where a session's run ends are POSTed, signed (``session_created.webhook``)."""

    url: str
    events: list[WebhookEventKind] = msgspec.field(
        default_factory=lambda: list(WEBHOOK_EVENT_KINDS)
    )
    """Which ends are delivered (default: all three)."""


class RemoteRef(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Where a remote child lives: the transport kind, its address, its agent type there."""

    transport: str
    remote_agent_type: str
    url: str | None = None


PendingInputKind = Literal["client_tool", "approval"]
"""What a pending input waits for: a client tool's result, or a person's decision."""


class PendingInput(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One call in a tree waiting for a person; the client answers it by ``tool_call_id``."""

    kind: PendingInputKind
    tool_call_id: str
    tool_name: str
    arguments: Any = None
    owner_session_id: str
    path: list[str] = []
    expires_in: float | None = None
    expires_at: float | None = None


# --- stream chunks -----------------------------------------------------------


class ChunkBase(EventBase, frozen=True, kw_only=True):
    """An event that is also a stream chunk; ``agent_id`` is the emitting session."""

    agent_id: str
    agent_type: str


class TextDelta(ChunkBase, tag="text_delta", frozen=True):
    """A piece of streamed LLM text. Emitted by the run loop while the LLM streams."""

    delta: str


class ReasoningDelta(ChunkBase, tag="reasoning_delta", frozen=True):
    """A piece of the model's streamed reasoning (thinking); never part of the answer.

    Emitted by the run loop while the LLM streams, as ``text_delta`` is; the
    reasoning a provider needs back is kept on the assistant message instead.
    """

    delta: str


class ToolStart(ChunkBase, tag="tool_start", frozen=True):
    """A tool call began (including ``subagent__*`` calls). Emitted before the tool runs."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None


class ToolEnd(ChunkBase, tag="tool_end", frozen=True):
    """A tool call ended; ``error`` is set when it failed. Emitted after its result."""

    tool_call_id: str
    tool_name: str
    result: Any = None
    error: str | None = None


class SubAgentStart(ChunkBase, tag="subagent_start", frozen=True):
    """A sub-agent began. Emitted by the parent, after its ``tool_start``."""

    sub_agent_id: str
    sub_agent_type: str
    tool_call_id: str
    parent_session_id: str
    input: Any = None


class SubAgentEnd(ChunkBase, tag="subagent_end", frozen=True):
    """A sub-agent ended. Emitted by the parent, before its ``tool_end``."""

    sub_agent_id: str
    sub_agent_type: str
    tool_call_id: str
    parent_session_id: str
    success: bool
    result: Any = None
    error: str | None = None


class OutputChunk(ChunkBase, tag="output", frozen=True):
    """The session's validated structured output. Emitted when it completes."""

    output: Any = None


class PartialOutput(ChunkBase, tag="partial_output", frozen=True):
    """The structured output as the model writes it: the fields of ``__finish__`` so far.

    Emitted by the run loop while the LLM streams the ``__finish__`` call's
    arguments, only when they parse to a new JSON object (and at a bounded
    rate, specs/llm.md); not validated. The validated output is the ``output``
    chunk that follows a run's accepted finish.
    """

    output: Any = None


class ErrorChunk(ChunkBase, tag="error", frozen=True):
    """An error worth showing on the stream (the session failed, or a step did)."""

    error: str
    recoverable: bool = False


class InputRequired(ChunkBase, tag="input_required", frozen=True):
    """The emitting session paused waiting for people: ``pending`` lists its subtree's open entries.

    Emitted by a session as it suspends, in the batch with ``suspended``;
    forwarded up the tree like any chunk. The one whose ``agent_id`` is the
    session being streamed is that session's complete list.
    """

    pending: list[PendingInput] = []


class StepRestarted(ChunkBase, tag="step_restarted", frozen=True):
    """A run began again inside a step whose model output was cut off (a crash, a stop).

    The step runs again from its start, so the text the emitting agent
    streamed in the cut step is void: a reader drops this agent's
    ``text_delta`` chunks with a sequence greater than ``discard_from`` on the
    emitter's own stream, or, on an ancestor's stream (forwarded: sequences
    differ there), the last ``discard_deltas`` text deltas of this agent,
    ``discard_chars`` characters in all. Emitted before the step's new text.
    """

    step: int = 1
    discard_from: int = 0
    discard_deltas: int = 0
    discard_chars: int = 0


class CustomChunk(ChunkBase, tag="custom", frozen=True):
    """A chunk a tool emitted through ``ctx.emit``."""

    name: str
    data: Any = None


Chunk = (
    TextDelta
    | ReasoningDelta
    | PartialOutput
    | ToolStart
    | ToolEnd
    | SubAgentStart
    | SubAgentEnd
    | OutputChunk
    | ErrorChunk
    | CustomChunk
    | InputRequired
    | StepRestarted
)
"""Any stream chunk."""


# --- lifecycle ---------------------------------------------------------------


class SessionCreated(EventBase, tag="session_created", frozen=True):
    """The session exists. Always seq 1; appended at expected seq 0 (idempotent start)."""

    agent_type: str
    run_id: str
    messages: list[UserMessage] = []
    input: Any = None
    initial_state: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    parent_session_id: str | None = None
    root_session_id: str | None = None
    parent_tool_call_id: str | None = None
    ancestors: list[str] = []
    """Session ids from the root to the parent (root first); empty for a root."""
    workspace_session_id: str | None = None
    """The session whose workspaces this one uses (a sub-agent with ``inherit_workspace``)."""
    trace_context: dict[str, str] = {}
    """The W3C trace context (``traceparent``, ``tracestate``) every run of the session
    is traced under; empty: a new trace (specs/otel.md)."""
    strict: bool = False
    """Every run fails at its first problem (a tool error, an unknown tool, a failed
    child, a rejected output) instead of showing it to the model (specs/runtime.md)."""
    owner: Principal | None = None
    """Who owns the session (specs/auth.md): the identity that started it, or its
    parent's owner for a child; None: started without identities (no auth, a
    static token of the old forms, a library call)."""
    webhook: Webhook | msgspec.UnsetType = msgspec.UNSET
    """Where the session's run ends are delivered (specs/server.md "Webhooks"); absent:
    none. A fork does not inherit it."""


class RunStarted(EventBase, tag="run_started", frozen=True):
    """A run of the loop began; ``messages`` are new user input for a resume or continue.

    ``message_id``: the client's id of that input (``send_message``), so a
    repeat of the same message id starts nothing new. Messages queued while
    the previous run went on join the conversation first.
    """

    run_id: str
    mode: RunMode = "start"
    messages: list[UserMessage] = []
    message_id: str | None = None
    turn_of: int | None = None
    """The seq of the ``message_queued`` (enqueue, interrupt, rollback) whose turn this
    run is: its messages are that one's, and it leaves the session's waiting turns."""


class StepStarted(EventBase, tag="step_started", frozen=True):
    """The loop began step ``step`` (1-based within the current run).

    ``taken``: how many queued messages (``message_queued``) join the
    conversation at this step, before its model call.
    """

    step: int
    taken: int = 0


class InterruptRequested(EventBase, tag="interrupt_requested", frozen=True):
    """Someone asked the session to stop softly (it can be resumed)."""

    reason: str | None = None


RequestAction = Literal[
    "message", "resume", "interrupt", "abort", "tool_result", "approval", "fork"
]
"""What a request that changed a session did (``request_made.action``)."""


class RequestMade(EventBase, tag="request_made", frozen=True):
    """A request that changed the session was served: who made it (specs/auth.md).

    Appended by the HTTP gateway (and the MCP and A2A entrances) after the
    request succeeded, when the request came with an identity that names
    someone; a start is recorded as ``session_created.owner`` instead.
    ``ref``: the tool call answered (``tool_result``, ``approval``) or the
    client's message id (``message``), when there is one. It changes nothing
    in the session's state.
    """

    action: RequestAction
    by: Principal
    ref: str | None = None


class AbortRequested(EventBase, tag="abort_requested", frozen=True):
    """Someone asked the session to stop for good."""

    reason: str | None = None


class Interrupted(EventBase, tag="interrupted", frozen=True):
    """The running loop stopped at an interrupt; the session can be resumed."""

    reason: str | None = None


class Aborted(EventBase, tag="aborted", frozen=True):
    """The running loop stopped at an abort; the session is over (status failed)."""

    reason: str | None = None


class Suspended(EventBase, tag="suspended", frozen=True):
    """The loop paused until outside input arrives (client tool results, approvals, children)."""

    reason: SuspensionReason
    tool_call_ids: list[str] = []


class Completed(EventBase, tag="completed", frozen=True):
    """The session finished with ``output`` (validated against the agent's output schema)."""

    output: Any = None


class Failed(EventBase, tag="failed", frozen=True):
    """The session failed; ``recoverable`` says whether a resume may succeed."""

    error: str
    recoverable: bool = False


class HostClaimed(EventBase, tag="host_claimed", frozen=True):
    """Host ``host_id`` took over running this session (failover)."""

    host_id: str
    previous_host_id: str | None = None


class RunSuperseded(EventBase, tag="run_superseded", frozen=True):
    """Run ``run_id`` was rolled back (a ``rollback`` message): its events, seqs
    ``from_seq`` .. ``to_seq``, stay in the log, but the conversation, the custom
    state and the output are again what they were before it began (usage,
    children and workspace files are kept: that work was done)."""

    run_id: str
    from_seq: int
    to_seq: int


# --- conversation ------------------------------------------------------------


class MessageAppended(EventBase, tag="message_appended", frozen=True):
    """A message joined the conversation (assistant reply, tool result, user input)."""

    message: Message


class MessageQueued(EventBase, tag="message_queued", frozen=True):
    """A follow-up message arrived while a run was going on (``send_message``).

    It waits in the session's queue; the run takes it into the conversation
    at its next step (``step_started.taken``), or the next run does (every
    ``run_started`` takes the whole queue first). ``message_id``: as on
    ``run_started``.
    """

    messages: list[UserMessage]
    message_id: str | None = None
    multitask: QueuedMultitask | None = None
    """None: ``steer`` (as above). ``enqueue``: a turn of its own once the run
    completes; ``interrupt``/``rollback``: the run stops (an ``interrupt_requested``
    in the same batch), then its turn (a rollback supersedes the run first:
    ``run_superseded``). Waiting turns start in the order they arrived."""


class StateUpdated(EventBase, tag="state_updated", frozen=True):
    """The agent's custom state is now ``state`` (a whole replacement, not a patch)."""

    state: dict[str, Any]


class UsageRecorded(EventBase, tag="usage_recorded", frozen=True):
    """Resources used: LLM tokens, a tool call, a sub-agent call, or a custom metric.

    For ``tokens``: ``input_tokens`` counts every input token, of which
    ``cached_input_tokens`` were read from the provider's prompt cache;
    ``output_tokens`` counts every output token, of which ``reasoning_tokens``
    were reasoning (thinking).
    """

    kind: UsageKind
    name: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    value: float = 0.0
    sub_session_id: str | None = None
    data: dict[str, Any] = {}
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


# --- children ----------------------------------------------------------------


class SubSessionStarted(EventBase, tag="sub_session_started", frozen=True):
    """The parent started (or is about to start) child session ``sub_session_id``.

    For a persistent child already known (``mode`` persistent, a completed
    companion spawned again by ``name``) it re-opens the child for a new turn
    owned by ``tool_call_id``.
    """

    sub_session_id: str
    agent_type: str
    tool_call_id: str
    mode: SubSessionMode = "ephemeral"
    name: str | None = None
    input: Any = None
    remote: RemoteRef | None = None


class SubSessionResumed(EventBase, tag="sub_session_resumed", frozen=True):
    """The parent resumed or re-consulted child ``sub_session_id``; it runs again.

    ``tool_call_id``: the parent's call that re-consulted a persistent child
    (``companion__sendMessage``, or a spawn re-opening it); it now owns the
    child's turn.
    """

    sub_session_id: str
    tool_call_id: str | None = None


class SubSessionSuspended(EventBase, tag="sub_session_suspended", frozen=True):
    """Child ``sub_session_id`` paused, waiting for outside input."""

    sub_session_id: str
    reason: SuspensionReason = "client_tool"
    tool_call_ids: list[str] = []


class ChildChunkForwarded(EventBase, tag="child_chunk_forwarded", frozen=True):
    """A chunk of child ``child_session_id`` (its seq ``child_seq``), copied into this log.

    ``chunk`` keeps its origin: a grandchild's chunk arrives already flattened,
    with the grandchild's ``agent_id``. A chunk whose ``child_seq`` the parent
    already holds is a duplicate and is never appended.
    """

    child_session_id: str
    child_seq: int
    chunk: Chunk


class SubSessionFinished(EventBase, tag="sub_session_finished", frozen=True):
    """Child ``sub_session_id`` reached an end; recorded on the parent."""

    sub_session_id: str
    status: SubSessionFinishStatus
    output: Any = None
    error: str | None = None


class CompletionDelivered(EventBase, tag="completion_delivered", frozen=True):
    """A persistent child's outcome reached the parent's LLM (the exactly-once record)."""

    sub_session_id: str
    via: Literal["pull", "push"] = "pull"


# --- human in the loop -------------------------------------------------------


class ClientToolPending(EventBase, tag="client_tool_pending", frozen=True):
    """This session waits for the client to run tool call ``tool_call_id``."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None
    expires_in: float | None = None
    expires_at: float | None = None


class ClientToolResultSubmitted(EventBase, tag="client_tool_result_submitted", frozen=True):
    """The client's result for ``tool_call_id`` arrived (``error`` when the tool failed).

    On the owner it answers its pending call; on an ancestor it records the
    answer it forwarded toward the owner. ``expired``: the root's timer
    answered it when the entry expired.
    """

    tool_call_id: str
    result: Any = None
    error: str | None = None
    expired: bool = False


class ClientToolOwnershipRecorded(EventBase, tag="client_tool_ownership_recorded", frozen=True):
    """On an ancestor: entry ``tool_call_id`` belongs to ``owner_session_id``, via child ``via``.

    Recorded in the batch that forwards the descendant's ``input_required``
    chunk, so the route to every open entry is on every ancestor's log.
    """

    tool_call_id: str
    owner_session_id: str
    remote: RemoteRef | None = None
    via_session_id: str | None = None
    kind: PendingInputKind = "client_tool"
    tool_name: str = ""
    arguments: Any = None
    path: list[str] = []
    expires_in: float | None = None
    expires_at: float | None = None


class ApprovalRequested(EventBase, tag="approval_requested", frozen=True):
    """Tool call ``tool_call_id`` needs a human's approval before it runs."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None
    expires_in: float | None = None
    expires_at: float | None = None


class ApprovalGiven(EventBase, tag="approval_given", frozen=True):
    """A human decided on tool call ``tool_call_id`` (on an ancestor: the decision forwarded).

    ``expired``: nobody answered in time and the root's timer denied it.
    ``decided_by``: who decided, as the submission said (``None``: not said, an
    expiry, or a log written before the field existed).
    """

    tool_call_id: str
    approved: bool
    reason: str | None = None
    expired: bool = False
    decided_by: str | None = None


# --- branches ----------------------------------------------------------------


class ForkEditBase(msgspec.Struct, frozen=True, kw_only=True, tag_field="kind", rename="camel"):
    """An edit a fork makes to what came before its fork point (specs/branches.md).

    ``session_id``: the origin session of the tree it applies to (None: the
    session being forked).
    """

    session_id: str | None = None


class ReplaceUserMessage(ForkEditBase, tag="user_message", frozen=True):
    """The user input the event at ``seq`` carries is replaced by ``message``.

    The event is a ``session_created``, ``run_started``, ``message_queued`` or a
    ``message_appended`` of a user message, at or before the fork point.
    """

    seq: int
    message: UserMessage


class ReplaceToolResult(ForkEditBase, tag="tool_result", frozen=True):
    """The recorded result of tool call ``tool_call_id`` is replaced (``error``: it failed)."""

    tool_call_id: str
    result: Any = None
    error: str | None = None


class ReplaceState(ForkEditBase, tag="state", frozen=True):
    """The agent's custom state at the fork point is replaced by ``state``."""

    state: dict[str, Any]


class DecideApproval(ForkEditBase, tag="approval", frozen=True):
    """The approval of ``tool_call_id``, open at the fork point, is decided (again) live."""

    tool_call_id: str
    approved: bool
    reason: str | None = None


class UseAgent(ForkEditBase, tag="agent", frozen=True):
    """What runs after the fork point runs as agent ``agent_type`` and/or on model ``model``.

    ``agent_type``: another registered agent (a new version of it); ``model``:
    a ``PROVIDER:MODEL`` name used for this session's model calls instead of the agent's.
    """

    agent_type: str | None = None
    model: str | None = None


ForkEdit = ReplaceUserMessage | ReplaceToolResult | ReplaceState | DecideApproval | UseAgent
"""Any fork edit."""


class SessionForked(EventBase, tag="session_forked", frozen=True):
    """This session is a branch of ``origin_session_id``: its events before this one are the
    origin's events 1 .. ``origin_seq`` (ids mapped to the branch's, ``edits`` applied).

    Appended right after the copied prefix, before anything the branch runs live.
    ``origin_root_session_id``/``root_origin_seq``: the origin tree's root and the
    sequence its branch was forked at (a child's fork forks the path from the
    root). ``session_map``: each origin session of the tree that was forked, by
    id, to its branch's id (the sessions reused as recorded are not in it).
    """

    origin_session_id: str
    origin_seq: int
    edits: list[ForkEdit] = []
    origin_root_session_id: str | None = None
    root_origin_seq: int | None = None
    session_map: dict[str, str] = {}


# --- workspaces --------------------------------------------------------------


class WorkspaceWritten(EventBase, tag="workspace_written", frozen=True):
    """A workspace tool of this session wrote file ``path`` of workspace ``workspace``.

    Emitted by ``workspace_write`` once the provider has stored the file, before
    the call's result. The log keeps a reference, not the bytes: ``size`` and
    the ``sha256`` of what was written (the content a model wrote is also in
    its tool call's arguments). ``owner_session_id`` is set when the workspace
    belongs to another session (an inherited one).
    """

    workspace: str
    kind: str
    path: str
    size: int
    sha256: str
    owner_session_id: str | None = None
    tool_call_id: str | None = None


class WorkspaceDeleted(EventBase, tag="workspace_deleted", frozen=True):
    """A workspace tool of this session deleted file ``path`` of workspace ``workspace``.

    Emitted by ``workspace_delete`` when a file was there and is gone.
    """

    workspace: str
    kind: str
    path: str
    owner_session_id: str | None = None
    tool_call_id: str | None = None


# --- webhooks (specs/server.md "Webhooks"): the log is the outbox ---------------


class WebhookAttempted(EventBase, tag="webhook_attempted", frozen=True):
    """A host claims attempt ``attempt`` of delivery ``delivery_id`` and is about to POST it.

    Appended by compare-and-append at the head its deliverer read (two hosts
    never both make one attempt). ``next_at``: when the next attempt is due
    unless this one is recorded delivered (a host that dies mid-POST leaves it);
    None for the last attempt.
    """

    delivery_id: str
    attempt: int
    next_at: float | None = None


class WebhookDelivered(EventBase, tag="webhook_delivered", frozen=True):
    """Attempt ``attempt`` of delivery ``delivery_id`` was accepted (a 2xx answer)."""

    delivery_id: str
    attempt: int
    status_code: int = 200


class WebhookFailed(EventBase, tag="webhook_failed", frozen=True):
    """Attempt ``attempt`` of delivery ``delivery_id`` failed; ``final``: no attempt follows."""

    delivery_id: str
    attempt: int
    error: str
    status_code: int | None = None
    next_at: float | None = None
    """When the next attempt is due (the backoff from now); None when ``final``."""
    final: bool = False


# --- memory ------------------------------------------------------------------


class MemoryWritten(EventBase, tag="memory_written", frozen=True):
    """A tool of this session wrote (or deleted) a memory item (``specs/server.md "Memory"``).

    ``namespace`` is absolute (the session's tenant first). ``value`` is what
    was written, None for a delete; ``version`` the item's version after the
    write (a delete leaves a tombstone with its own). ``write`` numbers the
    call's writes from 0: with ``tool_call_id`` it is the idempotency key a
    rerun of the call meets, so a call recovered after a crash does not write twice.
    """

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    version: int
    tool_call_id: str | None = None
    write: int = 0


class MemoryRead(EventBase, tag="memory_read", frozen=True):
    """A tool of this session read memory: what it asked, and exactly what it got back.

    ``op`` ``get``: ``namespace`` and ``key`` name the item (``query`` None),
    ``items`` holds it (empty: none). ``op`` ``search``: ``namespace`` is the
    prefix, ``query`` the text (None: a listing; ``key`` None), ``items`` the
    page returned (``limit``, ``offset``).
    """

    op: Literal["get", "search"]
    namespace: tuple[str, ...]
    key: str | None
    query: str | None
    items: list[MemoryItem]
    limit: int | None = None
    offset: int | None = None
    tool_call_id: str | None = None


# --- schedules ---------------------------------------------------------------
# These live in the store's one schedules log (``helix_agents.ids.SCHEDULES_LOG``),
# never in a session's log; ``helix_agents.schedules`` folds them (specs/server.md).

ScheduleCatchup = Literal["once", "skip"]
"""What a schedule does with the ticks it missed (downtime): one run for them all, or none."""


class ScheduleCreated(EventBase, tag="schedule_created", frozen=True, kw_only=True):
    """Schedule ``schedule_id`` exists: when it fires and what each tick starts.

    Exactly one of ``cron`` (a 5-field expression read in ``timezone``) and
    ``interval_seconds``; exactly one of ``start`` (a ``POST /start`` body but
    its ``sessionId``: each tick starts a new session) and ``turn`` (a
    ``POST /message`` body but its ``messageId``: each tick is a new turn of
    that session). An interval's ticks are the Unix times that are multiples of
    it; ``created_at`` (Unix seconds): ticks before it never fire.
    """

    schedule_id: str
    cron: str | None = None
    timezone: str = "UTC"
    interval_seconds: int | None = None
    catchup: ScheduleCatchup = "once"
    start: dict[str, Any] | None = None
    turn: dict[str, Any] | None = None
    created_at: float
    owner: Principal | None = None
    """Who owns the schedule, and so every session it starts (specs/auth.md)."""


class SchedulePaused(EventBase, tag="schedule_paused", frozen=True, kw_only=True):
    """Schedule ``schedule_id`` fires no tick from ``at`` until it is resumed."""

    schedule_id: str
    at: float


class ScheduleResumed(EventBase, tag="schedule_resumed", frozen=True, kw_only=True):
    """Schedule ``schedule_id`` fires again: its first tick is the first after ``at``."""

    schedule_id: str
    at: float


class ScheduleDeleted(EventBase, tag="schedule_deleted", frozen=True, kw_only=True):
    """Schedule ``schedule_id`` is gone: it fires no more, and its id is not reused."""

    schedule_id: str
    at: float


class ScheduleFired(EventBase, tag="schedule_fired", frozen=True, kw_only=True):
    """Tick ``tick`` (Unix seconds) of schedule ``schedule_id`` is claimed, by this append.

    The one append at the log's head that wins; its appender then starts
    ``run_session_id`` (a new session, or a new turn of the schedule's session
    with message id ``message_id``). ``missed``: the earlier ticks this run
    stands for (catch-up ``once`` after downtime).
    """

    schedule_id: str
    tick: float
    run_session_id: str
    message_id: str | None = None
    missed: int = 0
    fired_at: float


Event = (
    SessionCreated
    | RunStarted
    | StepStarted
    | InterruptRequested
    | AbortRequested
    | Interrupted
    | Aborted
    | Suspended
    | Completed
    | Failed
    | HostClaimed
    | MessageAppended
    | MessageQueued
    | StateUpdated
    | UsageRecorded
    | TextDelta
    | ReasoningDelta
    | PartialOutput
    | ToolStart
    | ToolEnd
    | SubAgentStart
    | SubAgentEnd
    | OutputChunk
    | ErrorChunk
    | CustomChunk
    | InputRequired
    | StepRestarted
    | SubSessionStarted
    | SubSessionResumed
    | SubSessionSuspended
    | ChildChunkForwarded
    | SubSessionFinished
    | CompletionDelivered
    | ClientToolPending
    | ClientToolResultSubmitted
    | ClientToolOwnershipRecorded
    | ApprovalRequested
    | ApprovalGiven
    | WorkspaceWritten
    | WorkspaceDeleted
    | SessionForked
    | RequestMade
    | WebhookAttempted
    | WebhookDelivered
    | WebhookFailed
    | MemoryWritten
    | MemoryRead
    | ScheduleCreated
    | SchedulePaused
    | ScheduleResumed
    | ScheduleDeleted
    | ScheduleFired
    | RunSuperseded
)
"""Any event of the catalog."""

EVENT_TYPES: tuple[type[EventBase], ...] = Event.__args__
"""Every event class, in catalog order."""

CHUNK_TYPES: tuple[type[ChunkBase], ...] = Chunk.__args__
"""Every chunk class."""

RECORD_TYPES: tuple[type[EventBase], ...] = (
    RequestMade,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
    MemoryWritten,
    MemoryRead,
)
"""Facts kept beside the session's state (who made a request, a webhook's progress, what a
tool read or wrote in memory): no fold changes the state for them."""

SCHEDULE_TYPES: tuple[type[EventBase], ...] = (
    ScheduleCreated,
    SchedulePaused,
    ScheduleResumed,
    ScheduleDeleted,
    ScheduleFired,
)
"""The events of the schedules' log, which no session's log holds."""
