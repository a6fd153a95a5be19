"""Toolsets: sources of tools whose list is known once open (an MCP server's, say).

``define_agent(..., toolsets=[...])`` gives an agent a :class:`Toolset`; the
executor opens each once, shares it with every run and closes it on exit
(``core/runtime/toolsets.py``). This module holds the seam and the check
``define_agent`` makes; specs/mcp.md tells the whole story.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from types import TracebackType
from typing import Any, Protocol

from helix_agents.agents.tools import Tool
from helix_agents.errors import UsageError

__all__ = ["Toolset", "check_toolsets"]


class Toolset(Protocol):
    """A source of tools open for a while: entered once, shared by every run, then exited.

    The executor's hub enters and exits it in one task of its own; while it is
    open, :meth:`tools` gives its tools (it may give other tools later, when
    the source's list changes). Implementations: ``helix_agents.mcp.MCPToolset``.
    """

    @property
    def name(self) -> str:
        """A short label for errors and logs (an MCP server's command or URL)."""
        ...

    def tools(self) -> Sequence[Tool[Any]]:
        """The tools it offers now. Called only while it is open."""
        ...

    async def __aenter__(self) -> object:
        """Open it: connect, list the tools. Raises when it cannot be used."""
        ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Close it; a run that still holds one of its tools gets an error result from it."""
        ...


_TOOLSET_MEMBERS = ("tools", "__aenter__", "__aexit__")


def check_toolsets(owner: str, toolsets: Any) -> tuple[Toolset, ...]:
    """``toolsets`` as a tuple if it is a list of toolsets, each once; else :class:`UsageError`."""
    if isinstance(toolsets, str | bytes) or not isinstance(toolsets, Iterable):
        raise UsageError(f"{owner}: toolsets must be a list of toolsets, not {toolsets!r}")
    checked = tuple(toolsets)
    for toolset in checked:
        missing = [name for name in _TOOLSET_MEMBERS if not callable(getattr(toolset, name, None))]
        if missing or not isinstance(getattr(toolset, "name", None), str):
            raise UsageError(
                f"{owner}: {toolset!r} is not a toolset (it needs a name, tools(), "
                "__aenter__ and __aexit__)"
            )
    if len({id(toolset) for toolset in checked}) != len(checked):
        raise UsageError(f"{owner}: a toolset is listed twice")
    return checked
