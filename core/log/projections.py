"""Pure projections of a session log: its state, its status and its stream.

A projection is a fold over events: no I/O, no clock, no randomness. Folding
any prefix of a valid log gives a valid state, so ``--at SEQ`` debugging and
incremental folding (``SessionProjector.apply`` per new event) come for free.

How each event changes the state is in ``helix_agents.log.folds``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from helix_agents.errors import CorruptLogError
from helix_agents.events import (
    ChildChunkForwarded,
    CustomChunk,
    ErrorChunk,
    Event,
    InputRequired,
    MessageAppended,
    OutputChunk,
    PartialOutput,
    PendingInput,
    PendingInputKind,
    ReasoningDelta,
    SessionCreated,
    StepRestarted,
    StepStarted,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log.folds import HANDLERS, initial_state
from helix_agents.log.state import (
    PendingApproval,
    PendingClientTool,
    SessionState,
    StatusSnapshot,
    StreamItem,
    ToolOwnership,
)
from helix_agents.messages import AssistantMessage

__all__ = [
    "SessionProjector",
    "interrupted_step",
    "pending_inputs",
    "project_state",
    "project_status",
    "project_stream",
    "status_of",
    "stream_item",
]


class SessionProjector:
    """Folds a session's events, one at a time, into its :class:`SessionState`.

    Raises :class:`CorruptLogError` when an event does not continue the log
    (wrong session, a gap or repeat in ``seq``, a second ``session_created``,
    a child event for an unknown child, a repeated child chunk).
    """

    __slots__ = ("_state",)

    def __init__(self) -> None:
        self._state: SessionState | None = None

    @property
    def state(self) -> SessionState:
        """The state folded so far; raises :class:`CorruptLogError` before the first event."""
        if self._state is None:
            raise CorruptLogError("an empty log has no state")
        return self._state

    @property
    def last_seq(self) -> int:
        """The seq of the last event applied (0 before any)."""
        return 0 if self._state is None else self._state.last_seq

    def apply(self, event: Event) -> SessionState:
        """Fold one more event and return the state (the same object, updated)."""
        state = self._state
        if state is None:
            self._state = initial_state(event)
            return self._state
        self._check(state, event)
        HANDLERS[type(event)](state, event)
        state.last_seq = event.seq
        state.updated_ts = event.ts
        return state

    def apply_all(self, events: Iterable[Event]) -> SessionState:
        """Fold every event of ``events`` in order and return the state."""
        state = self._state
        handlers = HANDLERS
        last: Event | None = None
        for last in events:
            if state is None:
                state = self._state = initial_state(last)
                continue
            if last.seq != state.last_seq + 1 or last.session_id != state.session_id:
                self._check(state, last)
            handlers[type(last)](state, last)
            state.last_seq = last.seq
        if state is None:
            raise CorruptLogError("an empty log has no state")
        if last is not None:
            state.updated_ts = last.ts
        return state

    @staticmethod
    def _check(state: SessionState, event: Event) -> None:
        if event.session_id != state.session_id:
            raise CorruptLogError(
                f"event at seq {event.seq} belongs to session {event.session_id!r}, "
                f"not {state.session_id!r}"
            )
        if event.seq != state.last_seq + 1:
            raise CorruptLogError(
                f"seq {event.seq} does not follow seq {state.last_seq} in session "
                f"{state.session_id!r}"
            )


def project_state(events: Iterable[Event]) -> SessionState:
    """Fold a whole session log (from seq 1) into its state.

    Raises :class:`CorruptLogError` for an empty or invalid log.
    """
    return SessionProjector().apply_all(events)


def status_of(state: SessionState) -> StatusSnapshot:
    """The protocol's status view of an already-folded state."""
    pending = pending_inputs(state)
    return StatusSnapshot(
        session_id=state.session_id,
        run_id=state.run_id,
        status=state.status,
        step_count=state.step_count,
        latest_sequence=state.last_seq,
        output=state.output,
        error=state.error,
        recoverable=state.recoverable,
        state=state.custom_state,
        suspension=state.suspension,
        pending_client_tool_call_ids=[
            call_id
            for call_id, pending in state.pending_client_tools.items()
            if not pending.submitted
        ],
        pending_inputs=pending,
        awaiting_input=state.status == "paused" and bool(pending),
        interrupt_requested=state.interrupt_requested,
        abort_requested=state.abort_requested,
    )


def pending_inputs(state: SessionState) -> list[PendingInput]:
    """The open (unanswered) entries of the session's subtree: its own, then its descendants'."""
    if state.is_terminal:
        return []
    path = [*state.ancestors, state.session_id]
    own: list[tuple[PendingInputKind, str, PendingClientTool | PendingApproval]] = [
        *(
            ("client_tool", call_id, pending)
            for call_id, pending in state.pending_client_tools.items()
            if not pending.submitted
        ),
        *(
            ("approval", call_id, pending)
            for call_id, pending in state.pending_approvals.items()
            if pending.approved is None
        ),
    ]
    entries = [
        _entry(kind, call_id, pending, state.session_id, path) for kind, call_id, pending in own
    ]
    for call_id, mirror in state.client_tool_ownership.items():
        via = state.sub_sessions.get(mirror.via_session_id or "")
        if mirror.answered or (
            via is not None and via.status in ("completed", "failed", "terminated")
        ):
            continue  # answered, or the child ended: whatever it waited for is moot
        entries.append(_entry(mirror.kind, call_id, mirror, mirror.owner_session_id, mirror.path))
    return entries


def _entry(
    kind: PendingInputKind,
    call_id: str,
    known: PendingClientTool | PendingApproval | ToolOwnership,
    owner: str,
    path: list[str],
) -> PendingInput:
    return PendingInput(
        kind=kind,
        tool_call_id=call_id,
        tool_name=known.tool_name,
        arguments=known.arguments,
        owner_session_id=owner,
        path=path,
        expires_in=known.expires_in,
        expires_at=known.expires_at,
    )


def interrupted_step(events: Sequence[Event]) -> StepRestarted | None:
    """The ``step_restarted`` a new run of this log owes its readers, if its last step was cut.

    A step whose ``step_started`` has no assistant message after it was cut
    off mid-stream (by a crash, an interrupt, a failure): the next run does
    it again, and its partial text must be declared void.
    """
    deltas = chars = 0
    session_id = events[0].session_id if events else ""
    for event in reversed(events):
        match event:
            case MessageAppended(message=AssistantMessage()):
                return None  # the last step finished
            case TextDelta() if event.agent_id == session_id:
                deltas += 1
                chars += len(event.delta)
            case StepStarted():
                if not deltas:
                    return None  # cut before any text: nothing to take back
                first = events[0]
                return StepRestarted(
                    agent_id=session_id,
                    agent_type=first.agent_type if isinstance(first, SessionCreated) else "",
                    step=event.step,
                    discard_from=event.seq,
                    discard_deltas=deltas,
                    discard_chars=chars,
                )
            case _:
                pass
    return None


def project_status(events: Iterable[Event]) -> StatusSnapshot:
    """Fold a session log into its protocol status (``latest_sequence`` = last seq)."""
    return status_of(project_state(events))


_CHUNKS = (
    TextDelta,
    ReasoningDelta,
    PartialOutput,
    ToolStart,
    ToolEnd,
    SubAgentStart,
    SubAgentEnd,
    OutputChunk,
    ErrorChunk,
    CustomChunk,
    InputRequired,
    StepRestarted,
)


def stream_item(event: Event) -> StreamItem | None:
    """The stream item an event contributes, or None if it is not part of the stream.

    A chunk event is itself the chunk; a ``child_chunk_forwarded`` contributes
    the child's chunk, flattened. Either way the sequence is the event's own seq.
    """
    if isinstance(event, _CHUNKS):
        return StreamItem(sequence=event.seq, chunk=event)
    if type(event) is ChildChunkForwarded:
        return StreamItem(sequence=event.seq, chunk=event.chunk)
    return None


def project_stream(events: Iterable[Event]) -> list[StreamItem]:
    """The stream of a log: every chunk, in order, with its event's seq as sequence."""
    items: list[StreamItem] = []
    for event in events:
        item = stream_item(event)
        if item is not None:
            items.append(item)
    return items
