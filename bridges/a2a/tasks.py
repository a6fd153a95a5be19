"""The A2A view of a session's log: its tasks, their snapshots, the events a stream carries.

A pure fold (:class:`SessionTasks`), no I/O. An A2A context is a helix
session; a task is a turn of it, from the run that opened it (the session's
creation, or a run after the previous task ended: a follow-up turn, or a
resume after an interrupt) through the runs that continue it (a resume after
a pause for people, a takeover after a crash) to its end. Its id is
``{session id}~{run id of its first run}``, so it is found again from the log
alone, in any process.

What each log event becomes (specs/a2a.md has the table): the session's own
text deltas are the ``response`` artifact, appended chunk by chunk (a
``step_restarted`` sends it again whole, ``append: false``); its output is the
``output`` artifact (text for a string, else data); every other chunk (tools,
children's chunks, custom ones) is a ``working`` status update; an
``input_required`` of the session's own is the ``input-required`` status, its
message listing the pending inputs; ``completed``, ``failed`` and
``interrupted``/``aborted`` are the ``completed``, ``failed`` and ``canceled``
statuses. Every event carries ``metadata.helix.sequence`` (the log position)
and, for a chunk, ``metadata.helix.chunk`` (the chunk's JSON).

A *light* fold (``SessionTasks(..., light=True)``, for a replay our
extension asks) keeps no text: no ``response`` artifact and no history in its
snapshots, each text delta's update carrying just that delta (a
``step_restarted``'s none: its chunk says what to discard). It holds a few
fields per task, whatever the session's size.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from a2a.types import (
    Artifact,
    Message,
    Part,
    Role,
    Task,
    TaskArtifactUpdateEvent,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from google.protobuf.timestamp_pb2 import Timestamp

from helix_agents.errors import UsageError
from helix_agents.events import (
    Aborted,
    ApprovalGiven,
    Chunk,
    ClientToolResultSubmitted,
    Completed,
    Event,
    Failed,
    InputRequired,
    Interrupted,
    MessageAppended,
    MessageQueued,
    OutputChunk,
    PendingInput,
    RunStarted,
    SessionCreated,
    StepRestarted,
    StepStarted,
    TextDelta,
)
from helix_agents.ids import validate_session_id
from helix_agents.log import stream_item
from helix_agents.log.streaming import RUN_ENDING_EVENTS, EndFold
from helix_agents.messages import AssistantMessage, UserMessage

from .wire import INTERRUPTED_STATES, TERMINAL_STATES, data_part, struct_of, text_part

__all__ = [
    "MESSAGE_ID_KEY",
    "StreamEvent",
    "SessionTasks",
    "TaskRecord",
    "split_task_id",
    "task_id_of",
]

StreamEvent = TaskStatusUpdateEvent | TaskArtifactUpdateEvent
"""What a task's stream carries after its first event (the task itself)."""

MESSAGE_ID_KEY = "a2a.messageId"
"""Session metadata: the A2A message id of the message that created the session."""

_SEPARATOR = "~"  # never in a session id nor in a run id
_chunk_encoder = msgspec.json.Encoder()
_end_encoder = msgspec.json.Encoder()


def task_id_of(session_id: str, run_id: str) -> str:
    """The A2A task id of the task a session's run ``run_id`` opened."""
    return f"{session_id}{_SEPARATOR}{run_id}"


def split_task_id(task_id: str) -> tuple[str, str] | None:
    """``(session id, run id)`` of a task id, or None if it cannot be one of ours."""
    session_id, separator, run_id = task_id.rpartition(_SEPARATOR)
    if not separator or not run_id:
        return None
    try:
        validate_session_id(session_id)
    except UsageError:
        return None
    return session_id, run_id


def _timestamp(ts: float) -> Timestamp:
    stamp = Timestamp()
    stamp.FromNanoseconds(int(ts * 1e9))
    return stamp


def _metadata(sequence: int, chunk: Chunk | None = None, end: str | None = None) -> dict[str, Any]:
    helix: dict[str, Any] = {"sequence": sequence}
    if chunk is not None:
        helix["chunk"] = _chunk_encoder.encode(chunk).decode()
    if end is not None:
        helix["end"] = end
    return {"helix": helix}


def _describe(entry: PendingInput) -> str:
    arguments = _chunk_encoder.encode(entry.arguments).decode()
    if entry.kind == "approval":
        return f"approve or deny {entry.tool_name}({arguments}) [toolCallId {entry.tool_call_id}]"
    return f"the result of {entry.tool_name}({arguments}) [toolCallId {entry.tool_call_id}]"


def _output_parts(output: Any) -> list[Part]:
    return [text_part(output)] if isinstance(output, str) else [data_part(output)]


@dataclass
class TaskRecord:
    """One task as folded so far: its state, artifacts, history and pending inputs."""

    id: str
    context_id: str
    run_id: str
    opened_seq: int = 0
    state: TaskState = TaskState.TASK_STATE_WORKING
    status_text: str | None = None
    status_ts: float = 0.0
    status_seq: int = 0
    response: list[str] = field(default_factory=list)
    deltas: int = 0
    """How many of the session's own text deltas the response holds (also in a light fold)."""
    output: Any = None
    has_output: bool = False
    history: list[Message] = field(default_factory=list)
    pending: list[PendingInput] = field(default_factory=list)
    recoverable: bool = False
    end: str | None = None
    """The run's ``end``/``error`` item as our protocol's stream ends it (JSON), once ended."""

    @property
    def ends(self) -> bool:
        """True when a stream of this task closes here: a final state, or waiting for input."""
        return self.state in TERMINAL_STATES or self.state in INTERRUPTED_STATES

    def status_message(self) -> Message | None:
        """The agent's message of the current status: what it waits for, or why it ended."""
        if self.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            parts = [
                text_part("Waiting for " + "; ".join(_describe(e) for e in self.pending)),
                data_part({"pendingInputs": msgspec.to_builtins(self.pending)}),
            ]
        elif self.status_text is not None:
            parts = [text_part(self.status_text)]
        else:
            return None
        return Message(
            role=Role.ROLE_AGENT,
            message_id=f"{self.id}:status:{self.status_seq}",
            context_id=self.context_id,
            task_id=self.id,
            parts=parts,
        )

    def status(self) -> TaskStatus:
        """The task's status object."""
        status = TaskStatus(state=self.state, timestamp=_timestamp(self.status_ts))
        message = self.status_message()
        if message is not None:
            status.message.CopyFrom(message)
        return status

    def response_artifact(self) -> Artifact:
        """The ``response`` artifact: the session's own streamed text so far."""
        return Artifact(
            artifact_id="response", name="response", parts=[text_part("".join(self.response))]
        )

    def output_artifact(self) -> Artifact:
        """The ``output`` artifact: the task's typed output."""
        return Artifact(artifact_id="output", name="output", parts=_output_parts(self.output))

    def snapshot(self, metadata: dict[str, Any]) -> Task:
        """The task as an A2A ``Task`` (``metadata`` joins it)."""
        artifacts = [self.response_artifact()] if self.response else []
        if self.has_output:
            artifacts.append(self.output_artifact())
        return Task(
            id=self.id,
            context_id=self.context_id,
            status=self.status(),
            artifacts=artifacts,
            history=list(self.history),
            metadata=struct_of(metadata),
        )


class SessionTasks:
    """Folds one session's log, event by event, into its A2A tasks (see the module)."""

    def __init__(self, session_id: str, *, light: bool = False) -> None:
        self.session_id = session_id
        self.light = light
        """Keep no text (see the module): for a stream that replays, not for snapshots."""
        self.agent_type = ""
        self.metadata: dict[str, str] = {}
        self.parent_session_id: str | None = None
        self.tasks: dict[str, TaskRecord] = {}
        self.current: TaskRecord | None = None
        self.last_seq = 0
        self.step_count = 0
        self._runs: dict[str, TaskRecord] = {}
        self._ends = EndFold()

    def task(self, task_id: str) -> TaskRecord | None:
        """The task ``task_id`` of this session, if the log has it."""
        return self.tasks.get(task_id)

    def snapshot(self, task: TaskRecord, extra: dict[str, Any] | None = None) -> Task:
        """``task`` as an A2A ``Task`` at this point of the log (``extra``: more helix metadata)."""
        current = self.current.id if self.current is not None else task.id
        helix = {
            "sessionId": self.session_id,
            "sequence": self.last_seq,
            "runId": task.run_id,
            "currentTaskId": current,
            "stepCount": self.step_count,
            **(extra or {}),
        }
        if task.end is not None and task.state in TERMINAL_STATES:
            helix["end"] = task.end
        return task.snapshot({"helix": helix})

    def task_of_run(self, run_id: str) -> TaskRecord | None:
        """The task run ``run_id`` belongs to (it opened or continued it)."""
        return self._runs.get(run_id)

    def apply_all(self, events: list[Event]) -> SessionTasks:
        """Apply every event of ``events`` (discarding what they would stream); returns self."""
        for event in events:
            self.apply(event)
        return self

    def apply(self, event: Event) -> list[tuple[TaskRecord, StreamEvent]]:
        """Fold ``event`` in; the stream events it contributes, each with its task."""
        self.last_seq = event.seq
        self._ends.apply(event)
        self.step_count += isinstance(event, StepStarted)
        if isinstance(event, SessionCreated):
            self.agent_type = event.agent_type
            self.metadata = dict(event.metadata)
            self.parent_session_id = event.parent_session_id
            opened = self._open(event.run_id, event)
            first_id = event.metadata.get(MESSAGE_ID_KEY)
            self._users(opened, event.messages, event.seq, first_id, event.input)
            return []
        task = self.current
        if task is None:  # not a valid log: nothing to show
            return []
        if isinstance(event, RunStarted):
            return self._run_started(task, event)
        if isinstance(event, MessageQueued):
            self._users(task, event.messages, event.seq, event.message_id)
            return []
        if isinstance(event, MessageAppended):
            message = event.message
            if isinstance(message, AssistantMessage) and message.content and not self.light:
                task.history.append(
                    self._message(task, Role.ROLE_AGENT, event.seq, message.content)
                )
            return []
        if isinstance(event, ClientToolResultSubmitted | ApprovalGiven):
            task.pending = [e for e in task.pending if e.tool_call_id != event.tool_call_id]
            return []
        if isinstance(event, Completed):
            out: list[tuple[TaskRecord, StreamEvent]] = []
            if not task.has_output:
                task.output, task.has_output = event.output, True
                out.append((task, self._output_event(task, event.seq, None)))
            return [*out, self._status(task, TaskState.TASK_STATE_COMPLETED, event, None)]
        if isinstance(event, Failed):
            task.recoverable = event.recoverable
            return [self._status(task, TaskState.TASK_STATE_FAILED, event, event.error)]
        if isinstance(event, Interrupted):
            reason = f"interrupted: {event.reason}" if event.reason else "interrupted"
            return [self._status(task, TaskState.TASK_STATE_CANCELED, event, reason)]
        if isinstance(event, Aborted):
            reason = f"aborted: {event.reason}" if event.reason else "aborted"
            return [self._status(task, TaskState.TASK_STATE_CANCELED, event, reason)]
        item = stream_item(event)
        if item is None:
            return []
        return [(task, self._chunk_event(task, item.sequence, item.chunk, event.ts))]

    # --- lifecycle ------------------------------------------------------------------

    def _open(self, run_id: str, event: Event) -> TaskRecord:
        task = TaskRecord(
            id=task_id_of(self.session_id, run_id),
            context_id=self.session_id,
            run_id=run_id,
            opened_seq=event.seq,
            status_ts=event.ts,
        )
        self.tasks[task.id] = task
        self._runs[run_id] = task
        self.current = task
        return task

    def _run_started(
        self, task: TaskRecord, event: RunStarted
    ) -> list[tuple[TaskRecord, StreamEvent]]:
        if task.state in TERMINAL_STATES:  # the previous turn ended: this run opens the next
            task = self._open(event.run_id, event)
            self._users(task, event.messages, event.seq, event.message_id)
            return []
        task.run_id, task.end = event.run_id, None
        self._runs[event.run_id] = task
        self._users(task, event.messages, event.seq, event.message_id)
        if task.state == TaskState.TASK_STATE_WORKING:
            return []
        task.pending = []
        return [self._status(task, TaskState.TASK_STATE_WORKING, event, None)]

    def _status(
        self, task: TaskRecord, state: TaskState, event: Event, text: str | None
    ) -> tuple[TaskRecord, StreamEvent]:
        task.state, task.status_text, task.status_ts, task.status_seq = (
            state,
            text,
            event.ts,
            event.seq,
        )
        if isinstance(event, RUN_ENDING_EVENTS):  # the end exactly as our stream says it
            task.end = _end_encoder.encode(self._ends.ending(event)).decode()
        update = TaskStatusUpdateEvent(
            task_id=task.id,
            context_id=task.context_id,
            status=task.status(),
            metadata=struct_of(_metadata(event.seq, end=task.end)),
        )
        return task, update

    # --- chunks ---------------------------------------------------------------------

    def _chunk_event(self, task: TaskRecord, sequence: int, chunk: Chunk, ts: float) -> StreamEvent:
        own = chunk.agent_id == self.session_id
        if own and isinstance(chunk, TextDelta):
            task.deltas += 1
            if not self.light:
                task.response.append(chunk.delta)
            return self._response_event(task, sequence, chunk, append=task.deltas > 1)
        if own and isinstance(chunk, StepRestarted):
            task.deltas = max(0, task.deltas - chunk.discard_deltas)
            del task.response[task.deltas :]
            return self._response_event(task, sequence, chunk, append=False)
        if own and isinstance(chunk, OutputChunk):
            task.output, task.has_output = chunk.output, True
            return self._output_event(task, sequence, chunk)
        if own and isinstance(chunk, InputRequired):
            task.state, task.status_text, task.status_ts, task.status_seq = (
                TaskState.TASK_STATE_INPUT_REQUIRED,
                None,
                ts,
                sequence,
            )
            task.pending = list(chunk.pending)
        return TaskStatusUpdateEvent(
            task_id=task.id,
            context_id=task.context_id,
            status=task.status(),
            metadata=struct_of(_metadata(sequence, chunk)),
        )

    def _response_event(
        self, task: TaskRecord, sequence: int, chunk: Chunk, *, append: bool
    ) -> StreamEvent:
        if isinstance(chunk, TextDelta) and (append or self.light):
            text = chunk.delta
        else:
            text = "".join(task.response)  # the whole response (none in a light fold)
        return TaskArtifactUpdateEvent(
            task_id=task.id,
            context_id=task.context_id,
            artifact=Artifact(artifact_id="response", name="response", parts=[text_part(text)]),
            append=append,
            metadata=struct_of(_metadata(sequence, chunk)),
        )

    def _output_event(self, task: TaskRecord, sequence: int, chunk: Chunk | None) -> StreamEvent:
        return TaskArtifactUpdateEvent(
            task_id=task.id,
            context_id=task.context_id,
            artifact=task.output_artifact(),
            last_chunk=True,
            metadata=struct_of(_metadata(sequence, chunk)),
        )

    # --- history --------------------------------------------------------------------

    def _message(
        self, task: TaskRecord, role: Role, seq: int, text: str, index: int = 0
    ) -> Message:
        return Message(
            role=role,
            message_id=f"{self.session_id}:{seq}:{index}",
            context_id=self.session_id,
            task_id=task.id,
            parts=[text_part(text)],
        )

    def _users(
        self,
        task: TaskRecord,
        messages: list[UserMessage],
        seq: int,
        message_id: str | None,
        data: Any = None,
    ) -> None:
        if self.light:
            return
        for index, user in enumerate(messages):
            message = self._message(task, Role.ROLE_USER, seq, user.content, index)
            if index == 0 and message_id is not None:
                message.message_id = message_id
            if index == 0 and data is not None:
                message.parts.append(data_part(data))
            task.history.append(message)
