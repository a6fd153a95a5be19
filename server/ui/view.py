"""The inspector's view of a session tree: a pure fold of the root's stream.

The inspector page (``static/app.js``) applies the same rules to the chunks it
reads from ``/sse``; ``GET /snapshot`` answers this fold of the stream items
up to a sequence, so a page that joins late, or moves its time slider, starts
from the server's fold and goes on with its own. ``specs/ui.md`` states the
rules; a browser test checks that both folds render the same page.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any, assert_never

import msgspec

from helix_agents.events import (
    CustomChunk,
    ErrorChunk,
    Event,
    InputRequired,
    MessageQueued,
    OutputChunk,
    PartialOutput,
    PendingInput,
    Principal,
    ReasoningDelta,
    RequestMade,
    RunStarted,
    SessionCreated,
    StepRestarted,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log.pricing import Cost
from helix_agents.log.state import StreamItem, UsageTotals
from helix_agents.server.streams.tree import is_finish_call

__all__ = [
    "AgentEntry",
    "AgentNode",
    "CustomEntry",
    "Decision",
    "ErrorEntry",
    "OutputEntry",
    "ReasoningEntry",
    "TextEntry",
    "ToolEntry",
    "TreeView",
    "UserEntry",
    "fold_view",
    "user_turns",
]


class UserEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="user", rename="camel"):
    """A message the user sent the root (its first input, a follow-up); ``seq``: its event's."""

    text: str
    seq: int


class TextEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="text", rename="camel"):
    """Text the agent streamed, its consecutive deltas joined."""

    text: str


class ReasoningEntry(
    msgspec.Struct, kw_only=True, tag_field="kind", tag="reasoning", rename="camel"
):
    """Reasoning (thinking) the agent streamed, its consecutive deltas joined: not its answer."""

    text: str


class ToolEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="tool", rename="camel"):
    """A tool call: its arguments, then (``done``) its result or error."""

    tool_call_id: str
    tool_name: str
    arguments: Any = None
    result: Any = None
    error: str | None = None
    done: bool = False
    seq: int = 0
    """The stream sequence of its ``tool_start`` (where the inspector's "fork here" forks)."""


class AgentEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="agent", rename="camel"):
    """Where a sub-agent started: the child node is shown here."""

    agent_id: str


class OutputEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="output", rename="camel"):
    """The agent's final output; ``partial`` while it is the output so far (not validated)."""

    output: Any = None
    partial: bool = False


class ErrorEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="error", rename="camel"):
    """An error the agent reported."""

    error: str


class CustomEntry(msgspec.Struct, kw_only=True, tag_field="kind", tag="custom", rename="camel"):
    """A custom chunk."""

    name: str
    data: Any = None


Entry = (
    UserEntry
    | TextEntry
    | ReasoningEntry
    | ToolEntry
    | AgentEntry
    | OutputEntry
    | ErrorEntry
    | CustomEntry
)


class AgentNode(msgspec.Struct, kw_only=True, rename="camel"):
    """One agent (session) of the tree, with what it streamed, in order."""

    agent_id: str
    agent_type: str
    parent_id: str | None = None
    tool_call_id: str | None = None
    status: str = "running"
    entries: list[Entry] = []
    usage: UsageTotals | None = None
    """The session's own usage (``GET /snapshot`` fills it; ``None``: its log is not here)."""
    cost: Cost | None = None
    """What its own tokens cost (``GET /snapshot`` fills it, at the server's prices;
    ``cost.usd`` is ``None`` when a call has no price; ``None``: its log is not here)."""


class Decision(msgspec.Struct, kw_only=True, rename="camel"):
    """An approval decided in the tree: what was asked, the verdict, who, when and why.

    From the root's log (``approval_given``, the request from the
    ``input_required`` that listed it); filled by ``GET /snapshot`` only.
    """

    tool_call_id: str
    tool_name: str | None = None
    arguments: Any = None
    owner_session_id: str | None = None
    approved: bool
    expired: bool = False
    reason: str | None = None
    decided_by: str | None = None
    """Who decided, as the submission said (``None``: not said, or an expiry)."""
    ts: float
    """When it was decided (the ``approval_given`` event's time, seconds since the epoch)."""
    seq: int


class TreeView(msgspec.Struct, kw_only=True, rename="camel"):
    """The whole tree as of sequence ``at``: nodes keyed by agent id, root first."""

    root_id: str
    at: int = 0
    agents: dict[str, AgentNode] = {}
    pending: list[PendingInput] = []
    decisions: list[Decision] = []
    """Approvals decided up to ``at``, oldest first (``GET /snapshot`` fills it)."""
    owner: Principal | None = None
    """Who owns the tree (``session_created.owner``; ``GET /snapshot`` fills it)."""
    requests: list[RequestMade] = []
    """Who changed the root up to ``at``, oldest first (``GET /snapshot`` fills it)."""

    def node(self, agent_id: str, agent_type: str) -> AgentNode:
        """The node of ``agent_id``, made (without a parent) the first time it is seen."""
        found = self.agents.get(agent_id)
        if found is None:
            found = self.agents[agent_id] = AgentNode(agent_id=agent_id, agent_type=agent_type)
        return found

    def apply(self, item: StreamItem) -> None:
        """Fold one stream item into the view."""
        chunk = item.chunk
        self.at = max(self.at, item.sequence)
        node = self.node(chunk.agent_id, chunk.agent_type)
        if node.status == "paused" and not isinstance(chunk, InputRequired):
            node.status = "running"  # it speaks again: it was answered
        match chunk:
            case TextDelta():
                last = node.entries[-1] if node.entries else None
                if isinstance(last, TextEntry):
                    last.text += chunk.delta
                else:
                    node.entries.append(TextEntry(text=chunk.delta))
            case ReasoningDelta():
                last = node.entries[-1] if node.entries else None
                if isinstance(last, ReasoningEntry):
                    last.text += chunk.delta
                else:
                    node.entries.append(ReasoningEntry(text=chunk.delta))
            case PartialOutput():
                last = node.entries[-1] if node.entries else None
                if isinstance(last, OutputEntry) and last.partial:
                    last.output = chunk.output  # the output so far, replaced as it grows
                else:
                    node.entries.append(OutputEntry(output=chunk.output, partial=True))
            case StepRestarted():
                _discard_text(node, chunk.discard_chars)
            case ToolStart() | ToolEnd() if is_finish_call(chunk):
                pass  # the output entry that follows shows it
            case ToolStart():
                node.entries.append(
                    ToolEntry(
                        tool_call_id=chunk.tool_call_id,
                        tool_name=chunk.tool_name,
                        arguments=chunk.arguments,
                        seq=item.sequence,
                    )
                )
                self._answered(chunk.tool_call_id)
            case ToolEnd():
                entry = _tool(node, chunk.tool_call_id)
                if entry is None:
                    entry = ToolEntry(tool_call_id=chunk.tool_call_id, tool_name=chunk.tool_name)
                    node.entries.append(entry)
                entry.result, entry.error, entry.done = chunk.result, chunk.error, True
                self._answered(chunk.tool_call_id)
            case SubAgentStart():
                child = self.node(chunk.sub_agent_id, chunk.sub_agent_type)
                child.parent_id, child.tool_call_id = chunk.agent_id, chunk.tool_call_id
                child.status = "running"
                node.entries.append(AgentEntry(agent_id=chunk.sub_agent_id))
            case SubAgentEnd():
                child = self.node(chunk.sub_agent_id, chunk.sub_agent_type)
                child.status = "completed" if chunk.success else "failed"
            case OutputChunk():
                last = node.entries[-1] if node.entries else None
                if isinstance(last, OutputEntry) and last.partial:
                    last.output, last.partial = chunk.output, False  # the output, validated
                else:
                    node.entries.append(OutputEntry(output=chunk.output))
            case ErrorChunk():
                node.entries.append(ErrorEntry(error=chunk.error))
            case CustomChunk():
                node.entries.append(CustomEntry(name=chunk.name, data=chunk.data))
            case InputRequired():
                node.status = "paused"
                if chunk.agent_id == self.root_id:
                    self.pending = list(chunk.pending)
            case _:
                assert_never(chunk)

    def said(self, seq: int, texts: Iterable[str]) -> None:
        """Fold what the user sent the root at ``seq`` (a :func:`user_turns` entry)."""
        self.at = max(self.at, seq)
        root = self.agents[self.root_id]
        root.entries.extend(UserEntry(text=text, seq=seq) for text in texts)

    def _answered(self, tool_call_id: str) -> None:
        self.pending = [entry for entry in self.pending if entry.tool_call_id != tool_call_id]


def _tool(node: AgentNode, tool_call_id: str) -> ToolEntry | None:
    for entry in reversed(node.entries):
        if isinstance(entry, ToolEntry) and entry.tool_call_id == tool_call_id:
            return entry
    return None


def _discard_text(node: AgentNode, chars: int) -> None:
    """Drop the last ``chars`` characters of the agent's text: a cut step's void output."""
    while chars > 0 and node.entries and isinstance(node.entries[-1], TextEntry):
        last = node.entries[-1]
        if len(last.text) > chars:
            last.text = last.text[: len(last.text) - chars]
            return
        chars -= len(last.text)
        node.entries.pop()


def user_turns(log: Iterable[Event]) -> list[tuple[int, list[str]]]:
    """What the user sent a session, by the seq of the event that carries it, in order.

    Its first input (``session_created``), and each follow-up: a new run's
    (``run_started``), or one that came while a run went on
    (``message_queued``, where it arrived). Messages the runtime adds itself
    (``message_appended``: a reminder, a companion's notice) are not the user's.
    """
    turns: list[tuple[int, list[str]]] = []
    for event in log:
        if isinstance(event, SessionCreated | RunStarted | MessageQueued) and event.messages:
            turns.append((event.seq, [message.content for message in event.messages]))
    return turns


def fold_view(
    root_id: str,
    root_type: str,
    items: Iterable[StreamItem],
    said: Iterable[tuple[int, list[str]]] = (),
) -> TreeView:
    """The view of ``root_id``'s tree after ``items`` (its stream, in order).

    ``said``: the root's :func:`user_turns`, each folded where its seq falls
    among the items' sequences.
    """
    view = TreeView(root_id=root_id)
    view.node(root_id, root_type)
    turns = deque(sorted(said, key=lambda turn: turn[0]))
    for item in items:
        while turns and turns[0][0] < item.sequence:
            view.said(*turns.popleft())
        view.apply(item)
    for turn in turns:
        view.said(*turn)
    return view
