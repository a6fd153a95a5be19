"""A session's stream as AG-UI events (``@ag-ui/core`` 1.0).

The streamed session is the run's agent; each descendant is an AG-UI
subagent (``SUBAGENT_STARTED`` with ``parentSubagentRunId`` for a grandchild),
and everything a descendant emits carries its ``subagentRunId``. A tree
waiting for people ends the AG-UI run with an ``interrupt`` outcome; its
continuation is a new run on the same stream. The mapping, chunk by chunk,
is in ``specs/streams.md``.
"""

from __future__ import annotations

import datetime
from typing import Any

import msgspec

from helix_agents.events import (
    Chunk,
    CustomChunk,
    ErrorChunk,
    InputRequired,
    OutputChunk,
    PartialOutput,
    PendingInput,
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
    UNSENT,
    AgentNode,
    AgentTree,
    Frame,
    OpenParts,
    builtins,
    is_finish_call,
    json_patch,
)

__all__ = ["AG_UI_HEADERS", "AgUiProjector"]

AG_UI_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]
"""The response headers of an AG-UI event stream."""

_json = msgspec.json.Encoder()


def _text(value: Any) -> str:
    """A tool result as AG-UI message content: a string as is, anything else as JSON."""
    return value if isinstance(value, str) else _json.encode(builtins(value)).decode()


class AgUiProjector:
    """Turns a session's protocol stream into AG-UI events, one chunk at a time."""

    def __init__(self, session_id: str, run_id: str | None = None) -> None:
        self.tree = AgentTree(session_id)
        self._given_run_id = run_id
        """The client's run id (a run it asked for), used instead of ours."""
        self._runs = 1
        self._run_open = True
        self._messages: dict[str, str] = {}
        """agent id -> its open text message."""
        self._unopened: set[str] = set()
        """agents whose open message a resumed reader has not been shown yet."""
        self._last_message: dict[str, str] = {}
        self._steps: dict[str, str] = {}
        """agent id -> its open step's name."""
        self._step_counts: dict[str, int] = {}
        self._used_tools: set[str] = set()
        self._subagents: dict[str, dict[str, Any]] = {}
        """open subagents, in start order -> their SUBAGENT_STARTED event."""
        self._suspended: list[dict[str, Any]] = []
        self._tools: set[str] = set()
        self._thoughts = OpenParts("reasoning")
        """agent id -> its open reasoning span and message (one id for both)."""
        self._output_streamed = False
        """The root streamed its output (``partial_output``) in this run: state ``output``."""
        self._held_output: Any = UNSENT
        """The state ``output`` this reader holds, as the state deltas built it."""

    @property
    def _run_id(self) -> str:
        return self._given_run_id or f"{self.tree.root_id}:run-{self._runs}"

    @property
    def paused(self) -> bool:
        """True once the tree waits for people (the run ended with an interrupt)."""
        return not self._run_open

    def _run_started(self) -> dict[str, Any]:
        return {"type": "RUN_STARTED", "threadId": self.tree.root_id, "runId": self._run_id}

    def opening(self) -> list[Frame]:
        """The events that begin the stream."""
        return [Frame(self._run_started())]

    def reopen(self) -> list[Frame]:
        """The events that begin a resumed stream: what is open again, for a fresh reader.

        ``RUN_STARTED`` (same ids), each open subagent's ``SUBAGENT_STARTED``,
        each open step's ``STEP_STARTED``; a message open at the resume point
        goes on in a new message (its id suffixed ``+``) at the agent's next
        text, if any comes.
        A tree paused at the resume point gets nothing: its next chunk opens
        the next run.
        """
        self._held_output = UNSENT  # a fresh reader's state has no output yet
        if not self._run_open:
            return []
        out: list[dict[str, Any]] = [self._run_started(), *self._subagents.values()]
        for agent_id, name in self._steps.items():
            out.append(self._tag(agent_id, {"type": "STEP_STARTED", "stepName": name}))
        for agent_id, message_id in self._messages.items():
            self._messages[agent_id] = f"{message_id}+"
            self._unopened.add(agent_id)
        self._thoughts.reopen()
        return [Frame(event) for event in out]

    def begin(self) -> list[Frame]:
        """A new run at the resume point, the earlier ones unseen: ``RUN_STARTED``, and
        ``SUBAGENT_STARTED`` again for the subagents a pause left waiting."""
        self._messages.clear()
        self._unopened.clear()
        self._thoughts.clear()
        self._output_streamed, self._held_output = False, UNSENT
        self._steps.clear()
        self._used_tools.clear()
        if self._run_open:  # the run before has ended (its end is not on the stream)
            self._subagents.clear()
            self._suspended = []
        out: list[dict[str, Any]] = []
        self._next_run(out)
        return [Frame(event) for event in out]

    def chunk(self, chunk: Chunk, sequence: int) -> list[Frame]:
        """The events of one chunk."""
        node = self.tree.saw(chunk)
        if is_finish_call(chunk):
            return []  # the output chunk that follows shows it
        agent = chunk.agent_id
        out: list[dict[str, Any]] = []
        if not self._run_open:
            self._next_run(out)
        if isinstance(chunk, TextDelta):
            self._step(out, agent, new_turn=True)
            self._end_reasoning(out, agent)
            message_id = self._messages.get(agent)
            if message_id is None or agent in self._unopened:
                if message_id is None:
                    message_id = f"msg:{agent}:{sequence}"
                self._messages[agent] = self._last_message[agent] = message_id
                self._unopened.discard(agent)
                out.append(self._message_start(agent, message_id))
            out.append(
                self._tag(
                    agent,
                    {"type": "TEXT_MESSAGE_CONTENT", "messageId": message_id, "delta": chunk.delta},
                )
            )
        elif isinstance(chunk, ReasoningDelta):
            self._step(out, agent, new_turn=True)
            self._end_text(out, agent)
            reasoning_id, opens = self._thoughts.open(agent, sequence)
            if opens:
                out.append(self._tag(agent, {"type": "REASONING_START", "messageId": reasoning_id}))
                start = {"type": "REASONING_MESSAGE_START", "messageId": reasoning_id}
                out.append(self._tag(agent, {**start, "role": "reasoning"}))
            content = {"messageId": reasoning_id, "delta": chunk.delta}
            out.append(self._tag(agent, {"type": "REASONING_MESSAGE_CONTENT", **content}))
        elif isinstance(chunk, PartialOutput):
            if self.tree.is_root(agent):
                self._output_streamed = True
                self._state_output(out, chunk.output)
            else:
                value = {**node.describe(), "output": builtins(chunk.output)}
                out.append(self._custom(agent, "helix.partial_output", value))
        elif isinstance(chunk, ToolStart):
            self._step(out, agent, new_turn=False)
            self._used_tools.add(agent)
            self._end_message(out, agent)
            self._tool_call(out, node, chunk.tool_call_id, chunk.tool_name, chunk.arguments)
        elif isinstance(chunk, ToolEnd):
            call_id = self.tree.call_id(agent, chunk.tool_call_id)
            if call_id not in self._tools:
                self._tool_call(out, node, chunk.tool_call_id, chunk.tool_name, None)
            result: dict[str, Any] = {
                "type": "TOOL_CALL_RESULT",
                "messageId": f"result:{agent}:{sequence}",
                "toolCallId": call_id,
                "role": "tool",
                "content": chunk.error if chunk.error is not None else _text(chunk.result),
            }
            if chunk.error is not None:
                result["metadata"] = {"error": chunk.error}
            out.append(self._tag(agent, result))
        elif isinstance(chunk, SubAgentStart):
            self._end_message(out, agent)
            self._subagent_started(out, self.tree.started(chunk), chunk.input)
        elif isinstance(chunk, SubAgentEnd):
            child = self.tree.ended(chunk)
            if child.agent_id not in self._subagents:
                self._subagent_started(out, child, None)
            self._close_agent(out, child.agent_id)
            del self._subagents[child.agent_id]
            if chunk.success:
                finished: dict[str, Any] = {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": child.agent_id,
                    "outcome": {"type": "success"},
                }
                if chunk.result is not None:
                    finished["result"] = builtins(chunk.result)
                out.append(finished)
            else:
                out.append(
                    {
                        "type": "SUBAGENT_ERROR",
                        "subagentRunId": child.agent_id,
                        "message": chunk.error or "failed",
                    }
                )
        elif isinstance(chunk, OutputChunk):
            if self.tree.is_root(agent) and self._output_streamed:
                self._state_output(out, chunk.output)  # the state ends with the output, validated
                self._output_streamed = False
            value = {**node.describe(), "output": builtins(chunk.output)}
            out.append(self._custom(agent, "helix.output", value))
        elif isinstance(chunk, ErrorChunk):
            self._end_message(out, agent)
            value = {**node.describe(), "error": chunk.error, "recoverable": chunk.recoverable}
            out.append(self._custom(agent, "helix.error", value))
        elif isinstance(chunk, CustomChunk):
            value = {**node.describe(), "data": builtins(chunk.data)}
            out.append(self._custom(agent, chunk.name, value))
        elif isinstance(chunk, StepRestarted):
            voided = self._messages.get(agent)
            self._end_message(out, agent)
            value = {
                **node.describe(),
                "messageId": voided,
                "step": chunk.step,
                "discardDeltas": chunk.discard_deltas,
                "discardChars": chunk.discard_chars,
            }
            out.append(self._custom(agent, "helix.step_restarted", value))
            self._end_step(out, agent)
        elif isinstance(chunk, InputRequired):
            if self.tree.is_root(agent):
                self._interrupt(out, chunk.pending)
            else:
                value = {**node.describe(), "pending": [builtins(p) for p in chunk.pending]}
                out.append(self._custom(agent, "helix.input_required", value))
        frames = [Frame(event) for event in out]
        if frames:
            frames[-1].sequence = sequence
        return frames

    def end(self, event: EndEvent | ErrorEvent) -> list[Frame]:
        """The events that end the stream."""
        out: list[dict[str, Any]] = []
        if isinstance(event, ErrorEvent):
            for agent_id in [*self._thoughts.ids, *self._messages]:
                self._end_message(out, agent_id)
            code = "INTERRUPTED" if event.recoverable else "FAILED"
            out.append({"type": "RUN_ERROR", "message": event.error, "code": code})
            return [Frame(e) for e in out]
        if not self._run_open:
            self._next_run(out)
        for agent_id in reversed(list(self._subagents)):
            self._close_agent(out, agent_id)
            out.append(
                {
                    "type": "SUBAGENT_FINISHED",
                    "subagentRunId": agent_id,
                    "outcome": {"type": "success"},
                }
            )
        self._subagents.clear()
        for agent_id in [*self._thoughts.ids, *self._messages, *self._steps]:
            self._close_agent(out, agent_id)
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.tree.root_id,
            "runId": self._run_id,
            "outcome": {"type": "success"},
        }
        if event.output is not None:
            finished["result"] = builtins(event.output)
        out.append(finished)
        return [Frame(e) for e in out]

    # --- helpers ------------------------------------------------------------------

    def _tag(self, agent_id: str, event: dict[str, Any]) -> dict[str, Any]:
        """The event, attributed to its subagent unless the root emitted it."""
        if not self.tree.is_root(agent_id):
            event["subagentRunId"] = agent_id
        return event

    def _custom(self, agent_id: str, name: str, value: Any) -> dict[str, Any]:
        return self._tag(agent_id, {"type": "CUSTOM", "name": name, "value": value})

    def _message_start(self, agent_id: str, message_id: str) -> dict[str, Any]:
        event = {
            "type": "TEXT_MESSAGE_START",
            "messageId": message_id,
            "role": "assistant",
            "name": self.tree.nodes[agent_id].agent_type or agent_id,
        }
        return self._tag(agent_id, event)

    def _state_output(self, out: list[dict[str, Any]], output: Any) -> None:
        """``STATE_DELTA``: the state's ``output`` becomes ``output`` (a patch of what it held)."""
        value = builtins(output)
        delta = json_patch("/output", self._held_output, value)
        self._held_output = value
        if delta:
            out.append({"type": "STATE_DELTA", "delta": delta})

    def _end_reasoning(self, out: list[dict[str, Any]], agent_id: str) -> None:
        reasoning_id = self._thoughts.close(agent_id)
        if reasoning_id is not None:
            end = {"messageId": reasoning_id}
            out.append(self._tag(agent_id, {"type": "REASONING_MESSAGE_END", **end}))
            out.append(self._tag(agent_id, {"type": "REASONING_END", **end}))

    def _end_message(self, out: list[dict[str, Any]], agent_id: str) -> None:
        """End the agent's open reasoning and text message."""
        self._end_reasoning(out, agent_id)
        self._end_text(out, agent_id)

    def _end_text(self, out: list[dict[str, Any]], agent_id: str) -> None:
        message_id = self._messages.pop(agent_id, None)
        if agent_id in self._unopened:
            self._unopened.discard(agent_id)  # never shown to this reader: nothing to end
            return
        if message_id is not None:
            out.append(self._tag(agent_id, {"type": "TEXT_MESSAGE_END", "messageId": message_id}))

    def _step(self, out: list[dict[str, Any]], agent_id: str, *, new_turn: bool) -> None:
        """Open the agent's step; its text after its own tool calls is its next step."""
        if agent_id in self._steps and new_turn and agent_id in self._used_tools:
            self._end_message(out, agent_id)
            self._end_step(out, agent_id)
        if agent_id not in self._steps:
            count = self._step_counts.get(agent_id, 0) + 1
            self._step_counts[agent_id] = count
            self._steps[agent_id] = name = f"step-{count}"
            self._used_tools.discard(agent_id)
            out.append(self._tag(agent_id, {"type": "STEP_STARTED", "stepName": name}))

    def _end_step(self, out: list[dict[str, Any]], agent_id: str) -> None:
        name = self._steps.pop(agent_id, None)
        if name is not None:
            out.append(self._tag(agent_id, {"type": "STEP_FINISHED", "stepName": name}))

    def _close_agent(self, out: list[dict[str, Any]], agent_id: str) -> None:
        self._end_message(out, agent_id)
        self._end_step(out, agent_id)

    def _tool_call(
        self, out: list[dict[str, Any]], node: AgentNode, call_id: str, name: str, arguments: Any
    ) -> None:
        agent = node.agent_id
        stream_id = self.tree.call_id(agent, call_id)
        self._tools.add(stream_id)
        start: dict[str, Any] = {
            "type": "TOOL_CALL_START",
            "toolCallId": stream_id,
            "toolCallName": name,
        }
        parent = self._last_message.get(agent)
        if parent is not None:
            start["parentMessageId"] = parent
        args = _text(arguments if arguments is not None else {})
        out.append(self._tag(agent, start))
        out.append(
            self._tag(agent, {"type": "TOOL_CALL_ARGS", "toolCallId": stream_id, "delta": args})
        )
        out.append(self._tag(agent, {"type": "TOOL_CALL_END", "toolCallId": stream_id}))

    def _subagent_started(self, out: list[dict[str, Any]], child: AgentNode, given: Any) -> None:
        event: dict[str, Any] = {
            "type": "SUBAGENT_STARTED",
            "subagentRunId": child.agent_id,
            "name": child.agent_type,
        }
        if child.parent_id is not None and not self.tree.is_root(child.parent_id):
            event["parentSubagentRunId"] = child.parent_id
        if child.parent_id is not None and child.tool_call_id is not None:
            event["parentToolCallId"] = self.tree.call_id(child.parent_id, child.tool_call_id)
        if given is not None:
            event["metadata"] = {"input": builtins(given)}
        self._subagents[child.agent_id] = event
        out.append(event)

    def _interrupt(self, out: list[dict[str, Any]], pending: list[PendingInput]) -> None:
        """The tree waits for people: close what is open and end the run with its interrupts."""
        for agent_id in [*self._thoughts.ids, *self._messages]:
            self._end_message(out, agent_id)
        self._suspended = list(self._subagents.values())
        for agent_id in reversed(list(self._subagents)):
            self._end_step(out, agent_id)
            ids = [p.tool_call_id for p in pending if agent_id in (p.owner_session_id, *p.path)]
            outcome: dict[str, Any] = {"type": "suspended"}
            if ids:
                outcome["interruptIds"] = ids
            out.append({"type": "SUBAGENT_FINISHED", "subagentRunId": agent_id, "outcome": outcome})
        self._subagents.clear()
        self._end_step(out, self.tree.root_id)
        finished: dict[str, Any] = {
            "type": "RUN_FINISHED",
            "threadId": self.tree.root_id,
            "runId": self._run_id,
        }
        if pending:
            finished["outcome"] = {
                "type": "interrupt",
                "interrupts": [self._ask(p) for p in pending],
            }
        out.append(finished)
        self._run_open = False

    def _ask(self, entry: PendingInput) -> dict[str, Any]:
        """One pending input as an AG-UI interrupt (answered through ``/submit-*``)."""
        interrupt: dict[str, Any] = {
            "id": entry.tool_call_id,
            "reason": "tool_call" if entry.kind == "client_tool" else entry.kind,
            "toolCallId": entry.tool_call_id,
            "message": f"{entry.tool_name}: waiting for "
            + ("a result" if entry.kind == "client_tool" else "approval"),
            "metadata": {
                "kind": entry.kind,
                "toolName": entry.tool_name,
                "arguments": builtins(entry.arguments),
                "ownerSessionId": entry.owner_session_id,
                "path": list(entry.path),
            },
        }
        if not self.tree.is_root(entry.owner_session_id):
            interrupt["subagentRunId"] = entry.owner_session_id
        if entry.expires_at is not None:
            moment = datetime.datetime.fromtimestamp(entry.expires_at, datetime.UTC)
            interrupt["expiresAt"] = moment.isoformat()
        return interrupt

    def _next_run(self, out: list[dict[str, Any]]) -> None:
        """The tree goes on after a pause: a new run, its suspended subagents open again."""
        self._runs += 1
        self._run_open = True
        out.append(self._run_started())
        for event in self._suspended:
            self._subagents[event["subagentRunId"]] = event
            out.append(event)
        self._suspended = []
