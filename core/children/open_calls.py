"""``OpenCalls``: the calls one run has open, which its stop must close or halt.

A run owns one; its companions are handed the same object, so a blocking
companion call they follow is halted by the run's stop like any sub-agent
call, and a companion call they answer is no longer closed by it.
"""

from __future__ import annotations

from helix_agents.children.link import ChildLink
from helix_agents.messages import ToolCall

__all__ = ["OpenCalls"]


class OpenCalls:
    """Plain tool calls in flight (closed with an error on a stop) and children being followed."""

    __slots__ = ("_children", "_tools")

    def __init__(self) -> None:
        self._tools: dict[str, ToolCall] = {}
        self._children: dict[str, ChildLink] = {}

    # --- plain calls --------------------------------------------------------------------

    def open_tool(self, call: ToolCall) -> None:
        """``call`` is running: a stop now records it as stopped."""
        self._tools[call.id] = call

    def close_tool(self, call_id: str) -> None:
        """The call's result is recorded (or another owner will record it)."""
        self._tools.pop(call_id, None)

    def take_tools(self) -> list[ToolCall]:
        """The calls still open, which the caller now closes: none is left open here."""
        calls = list(self._tools.values())
        self._tools.clear()
        return calls

    # --- followed children --------------------------------------------------------------

    def follow(self, link: ChildLink) -> None:
        """The run follows ``link``'s child: a stop halts it."""
        self._children[link.session_id] = link

    def unfollow(self, link: ChildLink) -> None:
        """``link`` is done, if it is still the link followed for its child."""
        if self._children.get(link.session_id) is link:
            del self._children[link.session_id]

    def drop(self, session_id: str) -> None:
        """No link follows child ``session_id`` any more (its start failed)."""
        self._children.pop(session_id, None)

    def following(self, session_id: str) -> bool:
        """True while a call of this run follows child ``session_id``."""
        return session_id in self._children

    def children(self) -> list[ChildLink]:
        """The links followed now (a snapshot)."""
        return list(self._children.values())
