"""Memory across sessions: namespaced JSON items tools read and write through ``ctx.memory``.

``base`` (the ``MemoryStore`` seam, items, limits, what a search matches),
``tools`` (``ToolMemory``: a tool's view, confined to its tenant, recorded in
its session's log). See ``specs/server.md "Memory"``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.memory.base import (
        DEFAULT_TENANT as DEFAULT_TENANT,
        MemoryItem as MemoryItem,
        MemoryStore as MemoryStore,
        memory_of as memory_of,
    )
    from helix_agents.memory.tools import ToolMemory as ToolMemory

_HOMES = {
    "DEFAULT_TENANT": "helix_agents.memory.base",
    "MemoryItem": "helix_agents.memory.base",
    "MemoryStore": "helix_agents.memory.base",
    "memory_of": "helix_agents.memory.base",
    "ToolMemory": "helix_agents.memory.tools",
}
__all__ = ["DEFAULT_TENANT", "MemoryItem", "MemoryStore", "ToolMemory", "memory_of"]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
