"""How each event changes a session's state: one pure handler per event class.

``HANDLERS`` maps every event class to its handler (a dict, not a ``match``: one
lookup per event, not a chain of ``isinstance``); ``initial_state`` is the state
``session_created`` begins; :class:`~helix_agents.log.projections.SessionProjector`
applies them. ``tests/unit/test_projections.py`` pins that every class has a handler.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from helix_agents.errors import CorruptLogError
from helix_agents.events import (
    CHUNK_TYPES,
    RECORD_TYPES,
    SCHEDULE_TYPES,
    Aborted,
    AbortRequested,
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Completed,
    CompletionDelivered,
    Event,
    EventBase,
    Failed,
    HostClaimed,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    MessageQueued,
    ReplaceState,
    RunStarted,
    RunSuperseded,
    SessionCreated,
    SessionForked,
    StateUpdated,
    StepStarted,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    SubSessionSuspended,
    Suspended,
    UsageRecorded,
    UseAgent,
    WorkspaceDeleted,
    WorkspaceWritten,
)
from helix_agents.log.state import (
    MessageReceipt,
    ModelTokens,
    PendingApproval,
    PendingClientTool,
    ProblemKind,
    RunBase,
    RunProblem,
    SessionState,
    SubSessionRef,
    ToolOwnership,
    WorkspaceFile,
)
from helix_agents.log.turns import begin_turn, queue_turn, supersede_run
from helix_agents.messages import FINISH_TOOL_NAME, AssistantMessage, ToolResultMessage

__all__ = ["HANDLERS", "initial_state"]


def _start_run(state: SessionState, event: RunStarted) -> None:
    begin_turn(state, event)
    state.run_id = event.run_id
    state.status = "running"
    state.suspension = None
    state.run_step_count = 0
    state.interrupt_requested = False
    state.stop_reason = None
    state.error = None
    state.recoverable = False
    if event.mode == "continue":
        state.output = None
    if event.mode != "resume":  # a new turn; a resumed one keeps what went wrong so far
        state.problems = []
    if event.message_id is not None:
        state.message_ids[event.message_id] = MessageReceipt(
            run_id=event.run_id, messages=list(event.messages)
        )
    # Messages queued while the previous run went on come first.
    incoming = [*state.queued_messages, *event.messages]
    state.queued_messages = []
    # A tool call and its result must stay adjacent (chat APIs refuse anything
    # between them): input given while results are missing waits for them.
    if state.awaiting_results:
        state.deferred_messages.extend(incoming)
    else:
        state.messages.extend(incoming)


def _step(state: SessionState, event: StepStarted) -> None:
    state.step_count += 1
    state.run_step_count = event.step
    if event.taken:
        if event.taken > len(state.queued_messages):
            raise CorruptLogError(
                f"step_started at seq {event.seq} takes {event.taken} queued messages; "
                f"{len(state.queued_messages)} are queued"
            )
        taken = state.queued_messages[: event.taken]
        del state.queued_messages[: event.taken]
        (state.deferred_messages if state.awaiting_results else state.messages).extend(taken)


def _queued(state: SessionState, event: MessageQueued) -> None:
    if not queue_turn(state, event):
        state.queued_messages.extend(event.messages)
    if event.message_id is not None:
        state.message_ids[event.message_id] = MessageReceipt(
            run_id=state.run_id, messages=list(event.messages), queued=True
        )


def _interrupt_requested(state: SessionState, event: InterruptRequested) -> None:
    state.interrupt_requested = True
    state.stop_reason = event.reason


def _abort_requested(state: SessionState, event: AbortRequested) -> None:
    state.abort_requested = True
    state.stop_reason = event.reason


def _interrupted(state: SessionState, event: Interrupted) -> None:
    state.status = "interrupted"
    state.suspension = None
    state.interrupt_requested = False
    state.stop_reason = event.reason


def _aborted(state: SessionState, event: Aborted) -> None:
    state.status = "failed"
    state.suspension = None
    state.error = f"aborted: {event.reason}" if event.reason else "aborted"
    state.recoverable = False
    state.stop_reason = event.reason


def _suspended(state: SessionState, event: Suspended) -> None:
    state.status = "paused"
    state.suspension = event.reason


def _completed(state: SessionState, event: Completed) -> None:
    state.status = "completed"
    state.suspension = None
    state.output = event.output
    state.error = None


def _failed(state: SessionState, event: Failed) -> None:
    state.status = "failed"
    state.suspension = None
    state.error = event.error
    state.recoverable = event.recoverable


def _host_claimed(state: SessionState, event: HostClaimed) -> None:
    state.host_id = event.host_id


def _message(state: SessionState, event: MessageAppended) -> None:
    message = event.message
    state.messages.append(message)
    if isinstance(message, ToolResultMessage):
        if message.is_error:
            _problem(state, message, event.seq)
        # A recorded result settles any wait on that call.
        call_id = message.tool_call_id
        state.pending_client_tools.pop(call_id, None)
        state.pending_approvals.pop(call_id, None)
        if call_id in state.awaiting_results:
            state.awaiting_results.remove(call_id)
            if not state.awaiting_results and state.deferred_messages:
                state.messages.extend(state.deferred_messages)
                state.deferred_messages.clear()
    elif isinstance(message, AssistantMessage):
        if state.deferred_messages:
            # A new turn began without the awaited results: the held-back input
            # belongs before it, never dropped.
            state.messages.pop()
            state.messages.extend(state.deferred_messages)
            state.deferred_messages.clear()
            state.messages.append(message)
        state.awaiting_results = [call.id for call in message.tool_calls]


def _state_updated(state: SessionState, event: StateUpdated) -> None:
    # A copy: a caller changing the folded state must never change the log.
    state.custom_state = dict(event.state)


def _usage(state: SessionState, event: UsageRecorded) -> None:
    usage = state.usage
    kind = event.kind
    if kind == "tokens":
        usage.input_tokens += event.input_tokens
        usage.output_tokens += event.output_tokens
        usage.cached_input_tokens += event.cached_input_tokens
        usage.reasoning_tokens += event.reasoning_tokens
        usage.llm_calls += 1
        model = usage.models.get(event.name or "")
        if model is None:
            model = usage.models[event.name or ""] = ModelTokens()
        model.input_tokens += event.input_tokens
        model.output_tokens += event.output_tokens
        model.cached_input_tokens += event.cached_input_tokens
        model.reasoning_tokens += event.reasoning_tokens
        model.llm_calls += 1
    elif kind == "tool":
        usage.tool_calls += 1
    elif kind == "subagent":
        usage.sub_agent_calls += 1
    else:
        key = event.name or "custom"
        usage.custom[key] = usage.custom.get(key, 0.0) + event.value


def _ref(state: SessionState, sub_session_id: str, event: EventBase) -> SubSessionRef:
    ref = state.sub_sessions.get(sub_session_id)
    if ref is None:
        raise CorruptLogError(
            f"{type(event).__name__} at seq {event.seq} names unknown sub-session "
            f"{sub_session_id!r}"
        )
    return ref


def _sub_started(state: SessionState, event: SubSessionStarted) -> None:
    ref = state.sub_sessions.get(event.sub_session_id)
    if ref is not None:
        # Re-spawning a persistent child continues its preserved session.
        ref.status = "running"
        ref.completion_delivered = False
        ref.output = None
        ref.error = None
        ref.finished_seq = None
        ref.tool_call_id = event.tool_call_id
        ref.started_at = event.ts
        ref.completed_at = None
        return
    state.sub_sessions[event.sub_session_id] = SubSessionRef(
        sub_session_id=event.sub_session_id,
        agent_type=event.agent_type,
        tool_call_id=event.tool_call_id,
        mode=event.mode,
        name=event.name,
        remote=event.remote,
        started_seq=event.seq,
        spawn_call_id=event.tool_call_id,
        started_at=event.ts,
    )


def _sub_resumed(state: SessionState, event: SubSessionResumed) -> None:
    ref = _ref(state, event.sub_session_id, event)
    ref.status = "running"
    ref.completion_delivered = False
    ref.finished_seq = None
    ref.completed_at = None
    if event.tool_call_id is not None:
        ref.tool_call_id = event.tool_call_id


def _sub_suspended(state: SessionState, event: SubSessionSuspended) -> None:
    ref = _ref(state, event.sub_session_id, event)
    ref.status = "paused_awaiting_client"
    ref.suspended_seq = event.seq


def _forwarded(state: SessionState, event: ChildChunkForwarded) -> None:
    ref = _ref(state, event.child_session_id, event)
    if event.child_seq <= ref.last_child_seq:
        raise CorruptLogError(
            f"child chunk {event.child_session_id}#{event.child_seq} at seq {event.seq} "
            f"repeats or precedes #{ref.last_child_seq}"
        )
    ref.last_child_seq = event.child_seq


def _sub_finished(state: SessionState, event: SubSessionFinished) -> None:
    ref = _ref(state, event.sub_session_id, event)
    ref.status = event.status
    ref.output = event.output
    ref.error = event.error
    ref.finished_seq = event.seq
    ref.completed_at = event.ts


def _delivered(state: SessionState, event: CompletionDelivered) -> None:
    _ref(state, event.sub_session_id, event).completion_delivered = True


def _client_pending(state: SessionState, event: ClientToolPending) -> None:
    state.pending_client_tools[event.tool_call_id] = PendingClientTool(
        tool_call_id=event.tool_call_id,
        tool_name=event.tool_name,
        arguments=event.arguments,
        expires_in=event.expires_in,
        expires_at=event.expires_at,
    )


def _client_result(state: SessionState, event: ClientToolResultSubmitted) -> None:
    pending = state.pending_client_tools.get(event.tool_call_id)
    if pending is not None:
        pending.submitted = True
        pending.result = event.result
        pending.error = event.error
        pending.expired = event.expired
        return
    mirror = state.client_tool_ownership.get(event.tool_call_id)
    if mirror is not None:
        mirror.answered = True
        mirror.answered_seq = event.seq
        mirror.result = event.result
        mirror.error = event.error
        mirror.expired = event.expired


def _ownership(state: SessionState, event: ClientToolOwnershipRecorded) -> None:
    state.client_tool_ownership[event.tool_call_id] = ToolOwnership(
        owner_session_id=event.owner_session_id,
        remote=event.remote,
        via_session_id=event.via_session_id,
        kind=event.kind,
        tool_name=event.tool_name,
        arguments=event.arguments,
        path=list(event.path),
        expires_in=event.expires_in,
        expires_at=event.expires_at,
    )


def _approval_requested(state: SessionState, event: ApprovalRequested) -> None:
    state.pending_approvals[event.tool_call_id] = PendingApproval(
        tool_call_id=event.tool_call_id,
        tool_name=event.tool_name,
        arguments=event.arguments,
        expires_in=event.expires_in,
        expires_at=event.expires_at,
    )


def _approval_given(state: SessionState, event: ApprovalGiven) -> None:
    pending = state.pending_approvals.get(event.tool_call_id)
    if pending is not None:
        pending.approved = event.approved
        pending.reason = event.reason
        pending.expired = event.expired
        pending.decided_by = event.decided_by
        pending.decided_at = event.ts
        return
    mirror = state.client_tool_ownership.get(event.tool_call_id)
    if mirror is not None:
        mirror.answered = True
        mirror.answered_seq = event.seq
        mirror.approved = event.approved
        mirror.reason = event.reason
        mirror.expired = event.expired
        mirror.decided_by = event.decided_by


def _workspace_written(state: SessionState, event: WorkspaceWritten) -> None:
    state.workspace_files.setdefault(event.workspace, {})[event.path] = WorkspaceFile(
        workspace=event.workspace,
        path=event.path,
        size=event.size,
        sha256=event.sha256,
        seq=event.seq,
    )


def _workspace_deleted(state: SessionState, event: WorkspaceDeleted) -> None:
    files = state.workspace_files.get(event.workspace)
    if files is not None:
        files.pop(event.path, None)
        if not files:
            del state.workspace_files[event.workspace]


def _problem(state: SessionState, message: ToolResultMessage, seq: int) -> None:
    """An error result the model is shown is a problem of the run (folded before it settles).

    Not a problem: a person's denial or an expiry (a decision), nor anything
    once a stop was asked for (the run is ending anyway).
    """
    if state.interrupt_requested or state.abort_requested:
        return
    call_id = message.tool_call_id
    decided = state.pending_approvals.get(call_id) or state.client_tool_ownership.get(call_id)
    if decided is not None and decided.approved is False:
        return
    try:
        error = str(msgspec.json.decode(message.content)["error"])
    except (msgspec.DecodeError, KeyError, TypeError):
        error = message.content
    kind: ProblemKind = "tool_error"
    if message.tool_name == FINISH_TOOL_NAME:
        kind = "output_rejected"
    elif error == f"unknown tool {message.tool_name!r}":
        kind = "unknown_tool"
    elif any(ref.tool_call_id == call_id for ref in state.sub_sessions.values()):
        kind = "child_failed"
    state.problems.append(
        RunProblem(
            kind=kind, tool_name=message.tool_name, tool_call_id=call_id, error=error, seq=seq
        )
    )


def _forked(state: SessionState, event: SessionForked) -> None:
    state.forked_from, state.forked_at = event.origin_session_id, event.origin_seq
    mine = (None, event.origin_session_id)
    for edit in event.edits:
        if edit.session_id not in mine:
            continue
        if isinstance(edit, ReplaceState):
            state.custom_state = dict(edit.state)
        elif isinstance(edit, UseAgent):
            state.agent_type = edit.agent_type or state.agent_type
            state.model = edit.model or state.model


def _unchanged(state: SessionState, event: Any) -> None:
    """A chunk (the stream's content) or a fact kept beside the state (``RECORD_TYPES``)."""


def _created_again(state: SessionState, event: SessionCreated) -> None:
    raise CorruptLogError(f"session_created at seq {event.seq}: a log is created once")


def _schedule_event(state: SessionState, event: EventBase) -> None:
    raise CorruptLogError(f"{type(event).__name__} at seq {event.seq}: not in a session's log")


_Handler = Callable[[SessionState, Any], None]

HANDLERS: dict[type[EventBase], _Handler] = {
    SessionCreated: _created_again,
    RunStarted: _start_run,
    StepStarted: _step,
    InterruptRequested: _interrupt_requested,
    AbortRequested: _abort_requested,
    Interrupted: _interrupted,
    Aborted: _aborted,
    Suspended: _suspended,
    Completed: _completed,
    Failed: _failed,
    HostClaimed: _host_claimed,
    MessageAppended: _message,
    MessageQueued: _queued,
    StateUpdated: _state_updated,
    UsageRecorded: _usage,
    SubSessionStarted: _sub_started,
    SubSessionResumed: _sub_resumed,
    SubSessionSuspended: _sub_suspended,
    ChildChunkForwarded: _forwarded,
    SubSessionFinished: _sub_finished,
    CompletionDelivered: _delivered,
    ClientToolPending: _client_pending,
    ClientToolResultSubmitted: _client_result,
    ClientToolOwnershipRecorded: _ownership,
    ApprovalRequested: _approval_requested,
    ApprovalGiven: _approval_given,
    WorkspaceWritten: _workspace_written,
    WorkspaceDeleted: _workspace_deleted,
    SessionForked: _forked,
    **dict.fromkeys(RECORD_TYPES, _unchanged),
    RunSuperseded: supersede_run,
    **dict.fromkeys(CHUNK_TYPES, _unchanged),
    **dict.fromkeys(SCHEDULE_TYPES, _schedule_event),
}


def initial_state(event: Event) -> SessionState:
    """The state a log's first event, its ``session_created``, begins."""
    if type(event) is not SessionCreated:
        raise CorruptLogError(
            f"a session log starts with session_created at seq 1, not {type(event).__name__} "
            f"at seq {event.seq}"
        )
    if event.seq != 1:
        raise CorruptLogError(f"session_created has seq {event.seq}, not 1")
    return SessionState(
        session_id=event.session_id,
        agent_type=event.agent_type,
        run_id=event.run_id,
        parent_session_id=event.parent_session_id,
        root_session_id=event.root_session_id or event.session_id,
        parent_tool_call_id=event.parent_tool_call_id,
        ancestors=list(event.ancestors),
        workspace_session_id=event.workspace_session_id,
        owner=event.owner,
        metadata=dict(event.metadata),
        input=event.input,
        messages=list(event.messages),
        custom_state=dict(event.initial_state),
        strict=event.strict,
        run_base=RunBase(seq=1, custom_state=dict(event.initial_state)),
        last_seq=1,
        created_ts=event.ts,
        updated_ts=event.ts,
    )
