"""What the front-end stream projections share: the agent tree a stream reveals, and frame ids.

A session's stream flattens its whole delegation tree: every chunk names the
agent that emitted it (``agentId``, a session id) and ``subagent_start``
chunks name a child and its parent. :class:`AgentTree` rebuilds the tree from
those chunks alone, so a projection works on any stream (an ``AgentServer``,
a NATS fleet, another gateway) without reading the logs of the children.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec

from helix_agents.events import Chunk, SubAgentEnd, SubAgentStart, ToolEnd, ToolStart
from helix_agents.models.base import FINISH_TOOL_NAME

__all__ = [
    "UNSENT",
    "AgentNode",
    "AgentTree",
    "Frame",
    "OpenParts",
    "builtins",
    "is_finish_call",
    "json_patch",
]


def is_finish_call(chunk: Chunk) -> bool:
    """True for the ``tool_start``/``tool_end`` of an agent's ``__finish__`` call.

    The log keeps it (it is how an agent with an output schema ends); the
    views show the ``output`` chunk that follows instead (specs/streams.md).
    """
    return isinstance(chunk, ToolStart | ToolEnd) and chunk.tool_name == FINISH_TOOL_NAME


@dataclass
class Frame:
    """One part of a projected stream: its JSON object, and the log sequence it closes, if any."""

    data: dict[str, Any]
    sequence: int | None = None


@dataclass
class AgentNode:
    """One agent of the streamed tree."""

    agent_id: str
    agent_type: str
    parent_id: str | None = None
    tool_call_id: str | None = None
    depth: int = 0
    children: list[str] = field(default_factory=list)

    def describe(self) -> dict[str, Any]:
        """The node as the projections show it (camelCase)."""
        info: dict[str, Any] = {
            "agentId": self.agent_id,
            "agentType": self.agent_type,
            "depth": self.depth,
        }
        if self.parent_id is not None:
            info["parentAgentId"] = self.parent_id
        if self.tool_call_id is not None:
            info["toolCallId"] = self.tool_call_id
        return info


class AgentTree:
    """The agents a stream has shown so far, rooted at the streamed session."""

    def __init__(self, root_id: str) -> None:
        self.root_id = root_id
        self.nodes: dict[str, AgentNode] = {root_id: AgentNode(root_id, "")}

    def saw(self, chunk: Chunk) -> AgentNode:
        """The node of the chunk's agent (created at depth 1 if no ``subagent_start`` named it)."""
        node = self.nodes.get(chunk.agent_id)
        if node is None:
            node = AgentNode(chunk.agent_id, chunk.agent_type, self.root_id, None, 1)
            self.nodes[chunk.agent_id] = node
        elif not node.agent_type:
            node.agent_type = chunk.agent_type
        return node

    def started(self, chunk: SubAgentStart) -> AgentNode:
        """Record the child a ``subagent_start`` opens; return its node."""
        parent = self.saw(chunk)
        node = AgentNode(
            chunk.sub_agent_id,
            chunk.sub_agent_type,
            parent.agent_id,
            chunk.tool_call_id,
            parent.depth + 1,
        )
        self.nodes[node.agent_id] = node
        if node.agent_id not in parent.children:
            parent.children.append(node.agent_id)
        return node

    def ended(self, chunk: SubAgentEnd) -> AgentNode:
        """The node of the child a ``subagent_end`` closes (recorded now if never started)."""
        node = self.nodes.get(chunk.sub_agent_id)
        if node is not None:
            return node
        start = SubAgentStart(
            agent_id=chunk.agent_id,
            agent_type=chunk.agent_type,
            sub_agent_id=chunk.sub_agent_id,
            sub_agent_type=chunk.sub_agent_type,
            tool_call_id=chunk.tool_call_id,
            parent_session_id=chunk.parent_session_id,
        )
        return self.started(start)

    def is_root(self, agent_id: str) -> bool:
        """True for the streamed session itself."""
        return agent_id == self.root_id

    def call_id(self, agent_id: str, tool_call_id: str) -> str:
        """A tool call's id on the projected stream, unique across the tree.

        The root's calls keep their own id (the one ``/submit-tool-result``
        takes); a descendant's is prefixed with its agent id, since two agents'
        models may pick the same call id.
        """
        return tool_call_id if self.is_root(agent_id) else f"{agent_id}:{tool_call_id}"


def builtins(value: Any) -> Any:
    """A msgspec struct (or anything) as plain JSON-ready values."""
    return msgspec.to_builtins(value)


class OpenParts:
    """The parts of one kind (reasoning) open per agent, and those a resumed reader has not seen.

    A part open at a resume point goes on in a new part (its id suffixed
    ``+``), opened at the agent's next piece: a fresh reader never saw it open.
    """

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.ids: dict[str, str] = {}
        self._unopened: set[str] = set()

    def open(self, agent_id: str, sequence: int) -> tuple[str, bool]:
        """The agent's open part id (a new one if none), and whether the reader must be told."""
        part = self.ids.get(agent_id)
        if part is None:
            part = self.ids[agent_id] = f"{self.prefix}:{agent_id}:{sequence}"
            return part, True
        if agent_id in self._unopened:
            self._unopened.discard(agent_id)
            return part, True
        return part, False

    def close(self, agent_id: str) -> str | None:
        """Forget the agent's open part: its id if the reader saw it open (an end is due)."""
        part = self.ids.pop(agent_id, None)
        if agent_id in self._unopened:
            self._unopened.discard(agent_id)  # never shown to this reader: nothing to end
            return None
        return part

    def reopen(self) -> None:
        """A resumed reader: every open part goes on in a new one at its agent's next piece."""
        for agent_id, part in self.ids.items():
            self.ids[agent_id] = f"{part}+"
            self._unopened.add(agent_id)

    def clear(self) -> None:
        """Forget every part (a new message or run, the earlier ones unseen)."""
        self.ids.clear()
        self._unopened.clear()


UNSENT: Any = object()
"""What a reader holds of a value it has not been sent (:func:`json_patch` adds it whole)."""


def json_patch(path: str, old: Any, new: Any) -> list[dict[str, Any]]:
    """The JSON Patch (RFC 6902) turning ``old`` at ``path`` into ``new`` (both JSON values).

    Objects are compared key by key and arrays item by item (a longer array
    gains items, a shorter one is replaced); any other change replaces the
    value. ``old`` :data:`UNSENT`: one ``add`` of the whole value.
    """
    if old is UNSENT:
        return [{"op": "add", "path": path, "value": new}]
    if type(old) is type(new) and old == new:
        return []
    if isinstance(old, dict) and isinstance(new, dict):
        ops: list[dict[str, Any]] = []
        for key in old:
            if key not in new:
                ops.append({"op": "remove", "path": f"{path}/{_token(key)}"})
        for key, value in new.items():
            inner = f"{path}/{_token(key)}"
            ops.extend(json_patch(inner, old.get(key, UNSENT), value))
        return ops
    if isinstance(old, list) and isinstance(new, list) and len(new) >= len(old):
        ops = []
        for index, value in enumerate(new):
            ops.extend(
                json_patch(f"{path}/{index}", old[index] if index < len(old) else UNSENT, value)
            )
        return ops
    return [{"op": "replace", "path": path, "value": new}]


def _token(key: str) -> str:
    """A JSON Pointer reference token (RFC 6901): ``~`` and ``/`` escaped."""
    return key.replace("~", "~0").replace("/", "~1")
