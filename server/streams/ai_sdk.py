"""A session's stream as an AI SDK UI message stream (the ``ai`` npm package, v5 protocol).

One assistant UI message (``messageId`` = the session id) holds the whole
tree: every agent's text is its own text part, its reasoning a reasoning
part, and every tool call a ``tool-<name>`` part, each tagged with
``providerMetadata.helix`` (the agent, its parent, its depth); each child is a
``data-agent`` part updated in place as it starts and ends, and an agent's
output a ``data-output`` part, updated in place as it streams. The mapping,
chunk by chunk, is in ``specs/streams.md``.
"""

from __future__ import annotations

from typing import Any

from helix_agents.events import (
    Chunk,
    CustomChunk,
    ErrorChunk,
    InputRequired,
    OutputChunk,
    PartialOutput,
    ReasoningDelta,
    StepRestarted,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.protocol import EndEvent, ErrorEvent
from helix_agents.server.streams.tree import (
    AgentNode,
    AgentTree,
    Frame,
    OpenParts,
    builtins,
    is_finish_call,
)

__all__ = ["AI_SDK_HEADERS", "AiSdkProjector"]

AI_SDK_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
    (b"x-vercel-ai-ui-message-stream", b"v1"),
]
"""The response headers of a UI message stream (``UI_MESSAGE_STREAM_HEADERS`` in ``ai``)."""


def _meta(node: AgentNode, **extra: Any) -> dict[str, Any]:
    return {"helix": {**node.describe(), **extra}}


class AiSdkProjector:
    """Turns a session's protocol stream into UI message stream parts, one chunk at a time."""

    def __init__(self, session_id: str, message_id: str | None = None) -> None:
        self.tree = AgentTree(session_id)
        self._message_id = message_id or session_id
        self._one_run = message_id is not None
        """A run a client asked for: a pause also finishes the message."""
        self._texts: dict[str, str] = {}
        """agent id -> the id of its open text part."""
        self._unopened: set[str] = set()
        """agents whose open text part a resumed reader has not been shown yet."""
        self._thoughts = OpenParts("reasoning")
        """agent id -> the id of its open reasoning part."""
        self._tools: set[str] = set()
        self._step_open = False
        self._root_used_tools = False
        self._paused = False

    def opening(self) -> list[Frame]:
        """The parts that begin the stream."""
        metadata = {"sessionId": self.tree.root_id}
        return [
            Frame({"type": "start", "messageId": self._message_id, "messageMetadata": metadata})
        ]

    def reopen(self) -> list[Frame]:
        """The parts that begin a resumed stream: ``start`` (the same message).

        A text part open at the resume point goes on in a new part (its id
        suffixed ``+``) at the agent's next text; if none comes, nothing.
        """
        for agent_id, part_id in self._texts.items():
            self._texts[agent_id] = f"{part_id}+"
            self._unopened.add(agent_id)
        self._thoughts.reopen()
        return self.opening()

    def begin(self) -> list[Frame]:
        """A new message at the resume point, the earlier parts unseen: ``start``."""
        self._texts.clear()
        self._unopened.clear()
        self._thoughts.clear()
        self._step_open = False
        self._root_used_tools = False
        return self.opening()

    @property
    def paused(self) -> bool:
        """True once the tree waits for people (until its next chunk)."""
        return self._paused

    def chunk(self, chunk: Chunk, sequence: int) -> list[Frame]:
        """The parts of one chunk."""
        self._paused = False
        node = self.tree.saw(chunk)
        if is_finish_call(chunk):
            return []  # the output chunk that follows shows it
        out: list[dict[str, Any]] = []
        root = self.tree.is_root(chunk.agent_id)
        if isinstance(chunk, TextDelta):
            if root:
                self._root_step(out, new_turn=True)
            self._end_reasoning(out, chunk.agent_id)
            part_id = self._texts.get(chunk.agent_id)
            if part_id is None or chunk.agent_id in self._unopened:
                if part_id is None:
                    part_id = f"text:{chunk.agent_id}:{sequence}"
                    self._texts[chunk.agent_id] = part_id
                self._unopened.discard(chunk.agent_id)
                out.append({"type": "text-start", "id": part_id, "providerMetadata": _meta(node)})
            out.append({"type": "text-delta", "id": part_id, "delta": chunk.delta})
        elif isinstance(chunk, ReasoningDelta):
            if root:
                self._root_step(out, new_turn=True)
            self._end_text(out, chunk.agent_id)
            part_id, opens = self._thoughts.open(chunk.agent_id, sequence)
            if opens:
                out.append(
                    {"type": "reasoning-start", "id": part_id, "providerMetadata": _meta(node)}
                )
            out.append({"type": "reasoning-delta", "id": part_id, "delta": chunk.delta})
        elif isinstance(chunk, PartialOutput):
            data = {**node.describe(), "output": builtins(chunk.output), "partial": True}
            out.append({"type": "data-output", "id": chunk.agent_id, "data": data})
        elif isinstance(chunk, ToolStart):
            if root:
                self._root_step(out, new_turn=False)
                self._root_used_tools = True
            self._end_parts(out, chunk.agent_id)
            self._tool_input(out, node, chunk.tool_call_id, chunk.tool_name, chunk.arguments)
        elif isinstance(chunk, ToolEnd):
            call_id = self.tree.call_id(chunk.agent_id, chunk.tool_call_id)
            if call_id not in self._tools:
                self._tool_input(out, node, chunk.tool_call_id, chunk.tool_name, None)
            if chunk.error is not None:
                out.append(
                    {"type": "tool-output-error", "toolCallId": call_id, "errorText": chunk.error}
                )
            else:
                out.append(
                    {"type": "tool-output-available", "toolCallId": call_id, "output": chunk.result}
                )
        elif isinstance(chunk, SubAgentStart):
            self._end_parts(out, chunk.agent_id)
            child = self.tree.started(chunk)
            data = {**child.describe(), "status": "running", "input": builtins(chunk.input)}
            out.append({"type": "data-agent", "id": child.agent_id, "data": data})
        elif isinstance(chunk, SubAgentEnd):
            self._end_parts(out, chunk.sub_agent_id)
            child = self.tree.ended(chunk)
            data = {
                **child.describe(),
                "status": "completed" if chunk.success else "failed",
                "result": builtins(chunk.result),
                "error": chunk.error,
            }
            out.append({"type": "data-agent", "id": child.agent_id, "data": data})
        elif isinstance(chunk, OutputChunk):
            data = {**node.describe(), "output": builtins(chunk.output)}
            out.append({"type": "data-output", "id": chunk.agent_id, "data": data})
        elif isinstance(chunk, ErrorChunk):
            self._end_parts(out, chunk.agent_id)
            data = {**node.describe(), "error": chunk.error, "recoverable": chunk.recoverable}
            out.append({"type": "data-error", "id": chunk.agent_id, "data": data})
        elif isinstance(chunk, CustomChunk):
            data = {**node.describe(), "name": chunk.name, "data": builtins(chunk.data)}
            out.append({"type": "data-custom", "data": data})
        elif isinstance(chunk, StepRestarted):
            self._restarted(out, node, chunk, sequence)
        elif isinstance(chunk, InputRequired) and root:
            self._end_all_texts(out)
            self._finish_step(out)
            pending = [builtins(entry) for entry in chunk.pending]
            data = {"agentId": chunk.agent_id, "pending": pending}
            out.append({"type": "data-input-required", "id": f"input:{sequence}", "data": data})
            self._paused = True
            if self._one_run:  # the client answers, then sends the next request
                out.append(
                    {
                        "type": "finish",
                        "finishReason": "tool-calls",
                        "messageMetadata": {"status": "paused"},
                    }
                )
        # A descendant's input_required is repeated in the root's list: no part of its own.
        return _frames(out, sequence)

    def end(self, event: EndEvent | ErrorEvent) -> list[Frame]:
        """The parts that end the stream."""
        out: list[dict[str, Any]] = []
        self._end_all_texts(out)
        if isinstance(event, EndEvent):
            self._finish_step(out)
            metadata = {"status": "completed", "output": builtins(event.output)}
            out.append({"type": "finish", "finishReason": "stop", "messageMetadata": metadata})
        else:
            out.append({"type": "error", "errorText": event.error})
            self._finish_step(out)
            metadata = {"status": "failed", "error": event.error, "recoverable": event.recoverable}
            out.append({"type": "finish", "finishReason": "error", "messageMetadata": metadata})
        return [Frame(data) for data in out]

    # --- helpers ------------------------------------------------------------------

    def _tool_input(
        self, out: list[dict[str, Any]], node: AgentNode, call_id: str, name: str, arguments: Any
    ) -> None:
        stream_id = self.tree.call_id(node.agent_id, call_id)
        self._tools.add(stream_id)
        out.append(
            {
                "type": "tool-input-available",
                "toolCallId": stream_id,
                "toolName": name,
                "input": builtins(arguments) if arguments is not None else {},
                "providerMetadata": _meta(node, toolCallId=call_id),
            }
        )

    def _root_step(self, out: list[dict[str, Any]], *, new_turn: bool) -> None:
        """Open the root's step; root text after the root's tool calls is its next step."""
        if self._step_open and new_turn and self._root_used_tools:
            self._end_all_texts(out)
            self._finish_step(out)
        if not self._step_open:
            out.append({"type": "start-step"})
            self._step_open = True
            self._root_used_tools = False

    def _finish_step(self, out: list[dict[str, Any]]) -> None:
        # The client forgets every open text part at finish-step: all are ended first.
        if self._step_open:
            self._end_all_texts(out)
            out.append({"type": "finish-step"})
            self._step_open = False

    def _end_text(self, out: list[dict[str, Any]], agent_id: str, **extra: Any) -> str | None:
        part_id = self._texts.pop(agent_id, None)
        if agent_id in self._unopened:
            self._unopened.discard(agent_id)  # never shown to this reader: nothing to end
            return part_id
        if part_id is not None:
            part: dict[str, Any] = {"type": "text-end", "id": part_id}
            if extra:
                part["providerMetadata"] = _meta(self.tree.nodes[agent_id], **extra)
            out.append(part)
        return part_id

    def _end_reasoning(self, out: list[dict[str, Any]], agent_id: str) -> None:
        part_id = self._thoughts.close(agent_id)
        if part_id is not None:
            out.append({"type": "reasoning-end", "id": part_id})

    def _end_parts(self, out: list[dict[str, Any]], agent_id: str) -> None:
        """End the agent's open reasoning and text parts."""
        self._end_reasoning(out, agent_id)
        self._end_text(out, agent_id)

    def _end_all_texts(self, out: list[dict[str, Any]]) -> None:
        for agent_id in list(self._thoughts.ids):
            self._end_reasoning(out, agent_id)
        for agent_id in list(self._texts):
            self._end_text(out, agent_id)

    def _restarted(
        self, out: list[dict[str, Any]], node: AgentNode, chunk: StepRestarted, sequence: int
    ) -> None:
        """The cut step's text is void: its part ends marked ``discarded``; a new part follows."""
        self._end_reasoning(out, chunk.agent_id)
        voided = self._end_text(
            out,
            chunk.agent_id,
            discarded=True,
            step=chunk.step,
            discardChars=chunk.discard_chars,
        )
        data = {
            **node.describe(),
            "step": chunk.step,
            "discardDeltas": chunk.discard_deltas,
            "discardChars": chunk.discard_chars,
            "textPartId": voided,
        }
        out.append({"type": "data-step-restarted", "id": f"restart:{sequence}", "data": data})
        if self.tree.is_root(chunk.agent_id):
            self._finish_step(out)


def _frames(parts: list[dict[str, Any]], sequence: int) -> list[Frame]:
    """The parts of one chunk, the last one carrying the chunk's sequence (its SSE id)."""
    frames = [Frame(part) for part in parts]
    if frames:
        frames[-1].sequence = sequence
    return frames
