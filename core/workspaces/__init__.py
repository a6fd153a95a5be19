"""Workspaces: named places an agent keeps files in.

``base`` (the ``Workspace`` / ``WorkspaceProvider`` seam), ``local`` and
``memory`` (providers), ``registry`` (the workspaces one session owns),
``hub`` (an executor's providers), ``tools`` (the ``workspace_*`` tools).
See ``specs/workspaces.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.workspaces.base import (
        Workspace as Workspace,
        WorkspaceEntry as WorkspaceEntry,
        WorkspaceProvider as WorkspaceProvider,
        WorkspaceRef as WorkspaceRef,
        normalize_workspace_path as normalize_workspace_path,
    )
    from helix_agents.workspaces.local import (
        LocalWorkspaceProvider as LocalWorkspaceProvider,
    )
    from helix_agents.workspaces.memory import (
        MemoryWorkspaceProvider as MemoryWorkspaceProvider,
    )
    from helix_agents.workspaces.tools import (
        WORKSPACE_TOOL_NAMES as WORKSPACE_TOOL_NAMES,
    )

_HOMES = {
    "Workspace": "helix_agents.workspaces.base",
    "WorkspaceEntry": "helix_agents.workspaces.base",
    "WorkspaceProvider": "helix_agents.workspaces.base",
    "WorkspaceRef": "helix_agents.workspaces.base",
    "normalize_workspace_path": "helix_agents.workspaces.base",
    "LocalWorkspaceProvider": "helix_agents.workspaces.local",
    "MemoryWorkspaceProvider": "helix_agents.workspaces.memory",
    "WORKSPACE_TOOL_NAMES": "helix_agents.workspaces.tools",
}
__all__ = [
    "Workspace",
    "WorkspaceEntry",
    "WorkspaceProvider",
    "WorkspaceRef",
    "normalize_workspace_path",
    "LocalWorkspaceProvider",
    "MemoryWorkspaceProvider",
    "WORKSPACE_TOOL_NAMES",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
