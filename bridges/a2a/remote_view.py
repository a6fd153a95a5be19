"""A remote A2A task seen as a helix child session: its chunks, sequences, status, output.

:class:`RemoteView` turns what one subscription (or one ``GetTask``) says
about a task into the protocol's transport events, for a reader that holds
every chunk up to ``held``. Two kinds of peer:

- **a helix peer** (its card declares our extension): every event carries
  the peer log's sequence and chunk, which are passed on as they are; a
  subscription asks the peer to replay from ``held``. Nothing is lost.
- **any other A2A agent**: chunks are made from the task's artifacts (text
  parts become ``text_delta``, other parts ``custom`` chunks named
  ``a2a_part``), and an ``input-required`` state becomes an
  ``input_required`` chunk with one pending input, a client tool
  ``a2a_input`` whose result is sent back as the next message. A sequence
  is computed from what the task holds, never from the order of delivery,
  so a reader resumes exactly from any task snapshot:
  ``episode << 40 | announcement << 32 | units``, where *units* counts the
  artifacts' characters and other parts in artifact order, *episode* the
  times the task has asked for input, and *announcement* the times the
  current request was shown (again after the parent is resumed while it
  waits). specs/a2a.md lists what this cannot carry.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
from a2a.types import Artifact, Message, Part, Role, StreamResponse, Task, TaskState
from google.protobuf.json_format import MessageToDict

from helix_agents import PendingInput, SessionStatus
from helix_agents.events import Chunk, CustomChunk, InputRequired, OutputChunk, TextDelta
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteStatusResponse,
    TransportEvent,
)

from .wire import (
    INTERRUPTED_STATES,
    TERMINAL_STATES,
    helix_metadata,
    part_value,
    text_of,
)

__all__ = ["INPUT_TOOL", "Link", "RemoteView", "output_of", "run_id_of", "status_of_task"]

INPUT_TOOL = "a2a_input"
"""The tool name of the pending input that stands for a generic peer's ``input-required``."""

_UNITS = 1 << 32
_ANNOUNCE = 1 << 40
_chunk_decoder = msgspec.json.Decoder(Chunk)
_end_decoder = msgspec.json.Decoder(EndEvent | ErrorEvent)
_pending_type = list[PendingInput]


@dataclass
class Link:
    """What a transport knows of one child session: its task, and the kind of peer."""

    session_id: str
    agent_type: str
    helix: bool
    task_id: str = ""
    ancestors: list[str] = field(default_factory=list)
    reply: Message | None = None
    """The message a peer answered with instead of a task (the child then has ended)."""
    run_id: str = ""
    """The run the last start, resume or turn answered (a helix peer's own run id)."""
    request_key: str = ""
    """What the start that made this link asked (a repeat must ask the same)."""


def _pack(episode: int, announcement: int, units: int) -> int:
    return episode * _ANNOUNCE + min(announcement, 255) * _UNITS + min(units, _UNITS - 1)


def _unpack(sequence: int) -> tuple[int, int, int]:
    return sequence // _ANNOUNCE, (sequence % _ANNOUNCE) // _UNITS, sequence % _UNITS


def _is(part: Part, kind: str) -> bool:
    found: str | None = part.WhichOneof("content")
    return found == kind


def output_of(task: Task) -> Any:
    """A finished task's output: the last data part of its ``output`` artifact (or of all
    artifacts), else their text; a text holding a JSON object is decoded.
    """
    artifacts = list(task.artifacts)
    named = [a for a in artifacts if "output" in (a.name, a.artifact_id)]
    chosen = named[-1:] or artifacts
    data = [part_value(p) for a in chosen for p in a.parts if _is(p, "data")]
    if data:
        return data[-1]
    text = "".join(p.text for a in chosen for p in a.parts if _is(p, "text"))
    if not text and task.status.HasField("message"):
        text = text_of(task.status.message)
    if text.lstrip().startswith("{"):
        try:
            return msgspec.json.decode(text)
        except msgspec.DecodeError:
            return text
    return text


def _answers_in(task: Task) -> int:
    """How many answers the task's history shows (messages we sent as answers)."""
    count = 0
    for message in task.history:
        if (
            message.role == Role.ROLE_USER
            and helix_metadata(message.metadata).get("op") == "answer"
        ):
            count += 1
    return count


class RemoteView:
    """Transport events for one reader of a remote task (see the module).

    Args:
        link: the child session and its peer.
        held: the last sequence the reader holds.
    """

    def __init__(self, link: Link, held: int) -> None:
        self.link = link
        self.held = held
        self.state: TaskState = TaskState.TASK_STATE_WORKING
        self.output: Any = None
        self.status: Message | None = None
        self.ended = False
        self._artifacts: dict[str, list[Part]] = {}
        self._episode = _unpack(held)[0]
        self._announced = _unpack(held)[1]
        self._opened = False
        self._end: TransportEvent | None = None
        """A helix peer's end of the run, exactly as its own stream ends it."""

    # --- feeding ----------------------------------------------------------------------

    def feed(self, response: StreamResponse) -> list[TransportEvent]:
        """The events one streamed item contributes (the task snapshot first).

        For a peer without our extension only the task snapshot and a message
        are read here: its updates may repeat what a snapshot showed (a2a-sdk
        servers tap the queue before they read the task), so the transport
        reads the task again on each update and feeds it to :meth:`feed_task`.
        """
        kind = response.WhichOneof("payload")
        if kind == "task":
            return self.feed_task(response.task)
        if kind == "message":
            self.link.reply = response.message
            return self.reply_events(response.message)
        if not self.link.helix:
            return []
        if kind == "artifact_update":
            return self._helix(response.artifact_update.metadata, None)
        if kind == "status_update":
            status = response.status_update
            mine = status.task_id == self.link.task_id
            return self._helix(status.metadata, status.status if mine else None)
        return []

    def feed_task(self, task: Task) -> list[TransportEvent]:
        """The events a task snapshot contributes: what the reader lacks, then the end."""
        before = self.state
        self.state = task.status.state
        self.status = task.status.message if task.status.HasField("message") else None
        if self.link.helix:
            return self._helix_task(task)
        self._artifacts = {}
        for artifact in task.artifacts:
            self._apply_artifact(artifact, append=False)
        waiting = self.state in INTERRUPTED_STATES
        counted = _answers_in(task) + (1 if waiting else 0)
        if waiting and self._opened and before not in INTERRUPTED_STATES:
            counted = max(counted, self._episode + 1)  # seen to start waiting again
        self._episode = max(self._episode, counted)
        events = self._catch_up()
        if waiting:
            events.extend(self._announce(reopened=not self._opened))
        self._opened = True
        if self.state in TERMINAL_STATES:
            self.output = output_of(task)
            events.extend(self._final())
        return events

    def reply_events(self, message: Message) -> list[TransportEvent]:
        """The events of a peer that answered with a message: its text, then the end."""
        text = text_of(message)
        events: list[TransportEvent] = []
        if text and len(text) > self.held:
            events.append(self._chunk(self._delta(text[self.held :]), len(text)))
        data = [part_value(p) for p in message.parts if _is(p, "data")]
        self.output = data[-1] if data else text
        self.state = TaskState.TASK_STATE_COMPLETED
        events.extend(self._final())
        return events

    def closed(self) -> list[TransportEvent]:
        """What is due when the peer closed the stream: the end, if the task has ended."""
        return self._final() if self.state in TERMINAL_STATES else []

    # --- helix peers --------------------------------------------------------------------

    def _helix_task(self, task: Task) -> list[TransportEvent]:
        for artifact in task.artifacts:
            if artifact.artifact_id == "output":
                values = [part_value(p) if _is(p, "data") else p.text for p in artifact.parts]
                self.output = values[0] if values else None
        self._ending(helix_metadata(task.metadata))
        return []

    def _ending(self, helix: dict[str, Any]) -> None:
        """Keep the run's end a helix peer sent (``helix.end``: its stream's own item)."""
        raw = helix.get("end")
        if isinstance(raw, str):
            self._end = _end_decoder.decode(raw)

    def _helix(self, metadata: Any, status: Any) -> list[TransportEvent]:
        helix = helix_metadata(metadata)
        self._ending(helix)
        events: list[TransportEvent] = []
        raw, sequence = helix.get("chunk"), helix.get("sequence")
        if isinstance(raw, str) and isinstance(sequence, int) and sequence > self.held:
            chunk = _chunk_decoder.decode(raw)
            if isinstance(chunk, OutputChunk) and chunk.agent_id == self.link.session_id:
                self.output = chunk.output
            events.append(self._chunk(chunk, sequence))
        if status is not None:
            self.state = status.state
            self.status = status.message if status.HasField("message") else None
            if self.state in TERMINAL_STATES:
                events.extend(self._final())
        return events

    # --- any other peer -------------------------------------------------------------------

    def _delta(self, text: str) -> TextDelta:
        return TextDelta(agent_id=self.link.session_id, agent_type=self.link.agent_type, delta=text)

    def _chunk(self, chunk: Chunk, sequence: int) -> ChunkEvent:
        self.held = sequence
        if not chunk.session_id:  # made here: its origin is the child's view, at this position
            chunk = msgspec.structs.replace(chunk, session_id=self.link.session_id, seq=sequence)
        return ChunkEvent(chunk=chunk, sequence=sequence)

    def _apply_artifact(self, artifact: Artifact, *, append: bool) -> None:
        parts = self._artifacts.setdefault(artifact.artifact_id, [])
        if not append:
            parts.clear()
        parts.extend(artifact.parts)

    def _catch_up(self) -> list[TransportEvent]:
        """The artifact units beyond what the reader holds, as chunks.

        They keep the episode the reader holds: they came before any request
        for input it has not seen yet (a task that waits streams nothing).
        """
        episode, announced, held_units = _unpack(self.held)
        events: list[TransportEvent] = []
        offset = 0
        for artifact_id, parts in self._artifacts.items():
            for part in parts:
                if _is(part, "text"):
                    end = offset + len(part.text)
                    if end > held_units:
                        delta = part.text[max(0, held_units - offset) :]
                        sequence = _pack(episode, announced, end)
                        events.append(self._chunk(self._delta(delta), sequence))
                        held_units = end
                else:
                    end = offset + 1
                    if end > held_units:
                        data = {"artifactId": artifact_id, "part": _part_json(part)}
                        custom = CustomChunk(
                            agent_id=self.link.session_id,
                            agent_type=self.link.agent_type,
                            name="a2a_part",
                            data=data,
                        )
                        events.append(self._chunk(custom, _pack(episode, announced, end)))
                        held_units = end
                offset = end
        return events

    def _announce(self, *, reopened: bool) -> list[TransportEvent]:
        """The ``input_required`` chunk of the current episode, if the reader lacks it.

        ``reopened``: the stream was opened on a task already waiting, whose
        request the reader has: it is shown again (a new announcement), as a
        helix child says again that it waits when its parent resumes it.
        """
        episode, announced, units = _unpack(self.held)
        if self._episode > episode:
            announced = 0
        elif reopened:
            announced += 1
        else:
            return []
        self._announced = announced
        entry = self.pending()[0]
        notice = InputRequired(
            agent_id=self.link.session_id, agent_type=self.link.agent_type, pending=[entry]
        )
        return [self._chunk(notice, _pack(self._episode, announced, units))]

    def pending(self) -> list[PendingInput]:
        """The pending inputs of a waiting task (one, for a generic peer)."""
        if self.state not in INTERRUPTED_STATES:
            return []
        if self.link.helix:
            return _helix_pending(self.status)
        message = self.status
        arguments: dict[str, Any] = {
            "message": text_of(message) if message is not None else "",
            "data": [part_value(p) for p in message.parts if _is(p, "data")] if message else [],
            "state": TaskState.Name(self.state),
        }
        sid = self.link.session_id
        return [
            PendingInput(
                kind="client_tool",
                tool_call_id=f"{sid}.input{self._episode}",
                tool_name=INPUT_TOOL,
                arguments=arguments,
                owner_session_id=sid,
                path=[*self.link.ancestors, sid],
            )
        ]

    @property
    def end(self) -> TransportEvent | None:
        """A helix peer's end of the run as its own stream ends it (None: not ended, or
        another peer)."""
        return self._end

    @property
    def episode(self) -> int:
        """How many times the task has asked for input."""
        return self._episode

    def _final(self) -> list[TransportEvent]:
        if self.ended:
            return []
        self.ended = True
        if self._end is not None:
            return [self._end]
        text = text_of(self.status) if self.status is not None else ""
        if self.state == TaskState.TASK_STATE_COMPLETED:
            return [EndEvent(output=self.output)]
        if self.state == TaskState.TASK_STATE_CANCELED:
            return [ErrorEvent(error=text or "interrupted: canceled", recoverable=True)]
        return [ErrorEvent(error=text or f"the A2A task {TaskState.Name(self.state)}")]


def _part_json(part: Part) -> dict[str, Any]:
    found: dict[str, Any] = MessageToDict(part)
    return found


def _helix_pending(status: Message | None) -> list[PendingInput]:
    if status is None:
        return []
    for part in status.parts:
        if _is(part, "data"):
            value = part_value(part)
            if isinstance(value, dict) and "pendingInputs" in value:
                return msgspec.convert(value["pendingInputs"], _pending_type)
    return []


_STATUS: dict[int, SessionStatus] = {
    TaskState.TASK_STATE_COMPLETED: "completed",
    TaskState.TASK_STATE_FAILED: "failed",
    TaskState.TASK_STATE_REJECTED: "failed",
    TaskState.TASK_STATE_CANCELED: "interrupted",
    TaskState.TASK_STATE_INPUT_REQUIRED: "paused",
    TaskState.TASK_STATE_AUTH_REQUIRED: "paused",
}


def run_id_of(link: Link, task: Task) -> str:
    """The run id a task stands for: a helix peer's own (``helix.runId``), else the task's id."""
    if link.helix:
        found = helix_metadata(task.metadata).get("runId")
        if isinstance(found, str) and found:
            return found
    return task.id


def status_of_task(link: Link, task: Task, held: int = 0) -> RemoteStatusResponse:
    """A remote task's status as a helix session's (``latest_sequence``: where it stands)."""
    view = RemoteView(link, held)
    view.feed_task(task)
    status = _STATUS.get(task.status.state, "running")
    if isinstance(view.end, ErrorEvent) and not view.end.recoverable:
        status = "failed"  # a helix peer's abort: canceled in A2A, failed for good in helix
    pending = view.pending()
    run_id, steps = task.id, 0
    if link.helix:
        helix = helix_metadata(task.metadata)
        latest = helix.get("sequence", 0)
        latest = latest if isinstance(latest, int) else 0
        run_id = run_id_of(link, task)
        counted = helix.get("stepCount")
        steps = counted if isinstance(counted, int) else 0
    else:
        probe = RemoteView(link, 0)
        probe.feed_task(task)
        latest = probe.held
    error = text_of(task.status.message) if status in ("failed", "interrupted") else None
    return RemoteStatusResponse(
        session_id=link.session_id,
        run_id=run_id,
        status=status,
        step_count=steps,
        is_executing=status == "running",
        stream_id=link.session_id,
        latest_sequence=latest,
        output=view.output if status == "completed" else None,
        error=error,
        suspension="client_tool" if pending else None,
        pending_inputs=pending,
        awaiting_input=bool(pending),
    )
