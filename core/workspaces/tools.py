"""The auto-injected ``workspace_*`` tools: read, write, list and delete workspace files.

An agent that has workspaces (its own, or its parent's through
``inherit_workspace``) gets four tools for each run, bound to its session's
:class:`~helix_agents.workspaces.registry.WorkspaceRegistry` and writer. They
are ordinary :class:`~helix_agents.Tool` objects: arguments validated by
pydantic, a raised error becomes the call's ``{"error": ...}`` result.
Content is UTF-8 text. A write or a delete is recorded in the session's log
(``workspace_written`` / ``workspace_deleted``) before the call's result.
Shapes: specs/workspaces.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable
from typing import Any, TypeVar

from pydantic import BaseModel, Field

from helix_agents.agents.tools import WORKSPACE_TOOL_PREFIX, Tool, ToolContext
from helix_agents.errors import WorkspaceError, WorkspaceFailedError
from helix_agents.events import WorkspaceDeleted, WorkspaceWritten
from helix_agents.runtime.writer import SessionWriter
from helix_agents.workspaces.base import normalize_workspace_path
from helix_agents.workspaces.registry import OpenWorkspace, WorkspaceRegistry

__all__ = [
    "LIST_LIMIT",
    "WORKSPACE_TOOL_NAMES",
    "WorkspaceDeleteInput",
    "WorkspaceListInput",
    "WorkspaceReadInput",
    "WorkspaceWriteInput",
    "workspace_tools",
]

T = TypeVar("T")

LIST_LIMIT = 1000
"""The most files one ``workspace_list`` call returns (``truncated`` says there were more)."""

WORKSPACE_TOOL_NAMES = tuple(
    WORKSPACE_TOOL_PREFIX + verb for verb in ("read", "write", "list", "delete")
)
"""The names of the auto-injected workspace tools."""

_PATH = (
    "A path relative to the workspace root, like 'notes/idea.md' "
    "(no leading '/', no '..'; directories are created as needed)."
)
_WORKSPACE = "Which workspace; may be left out when there is only one."


class WorkspaceReadInput(BaseModel):
    """Arguments of ``workspace_read``."""

    path: str = Field(description=_PATH)
    workspace: str | None = Field(default=None, description=_WORKSPACE)


class WorkspaceWriteInput(BaseModel):
    """Arguments of ``workspace_write``: the whole new content of the file."""

    path: str = Field(description=_PATH)
    content: str = Field(description="The file's complete new content (UTF-8 text).")
    workspace: str | None = Field(default=None, description=_WORKSPACE)


class WorkspaceListInput(BaseModel):
    """Arguments of ``workspace_list``."""

    prefix: str = Field(
        default="", description="A directory to list (recursively); empty for everything."
    )
    workspace: str | None = Field(default=None, description=_WORKSPACE)


class WorkspaceDeleteInput(BaseModel):
    """Arguments of ``workspace_delete``."""

    path: str = Field(description=_PATH)
    workspace: str | None = Field(default=None, description=_WORKSPACE)


async def _guarded(space: OpenWorkspace, call: Awaitable[T]) -> T:
    """Await a provider call; an error outside the workspace family becomes WorkspaceFailedError."""
    try:
        return await call
    except WorkspaceError:
        raise
    except Exception as exc:
        raise WorkspaceFailedError(space.name, space.kind, f"{type(exc).__name__}: {exc}") from exc


class _Toolset:
    """The tools' bodies, bound to one session's registry and writer."""

    def __init__(self, registry: WorkspaceRegistry, writer: SessionWriter) -> None:
        self.registry = registry
        self.writer = writer

    def _owner(self, space: OpenWorkspace) -> str | None:
        owner = space.ref.session_id
        return None if owner == self.writer.session_id else owner

    async def read(self, value: WorkspaceReadInput, ctx: ToolContext) -> dict[str, Any]:
        space = self.registry.resolve(value.workspace)
        path = normalize_workspace_path(value.path)
        assert space.provider is not None
        data = await _guarded(space, space.provider.read_file(space.ref, path))
        try:
            content = data.decode("utf-8")
        except UnicodeDecodeError:
            raise WorkspaceError(f"{path!r} is not UTF-8 text ({len(data)} bytes)") from None
        return {"workspace": space.name, "path": path, "content": content, "size": len(data)}

    async def write(self, value: WorkspaceWriteInput, ctx: ToolContext) -> dict[str, Any]:
        space = self.registry.resolve(value.workspace)
        path = normalize_workspace_path(value.path)
        try:
            data = value.content.encode("utf-8")
        except UnicodeEncodeError:
            raise WorkspaceError("the content is not valid Unicode text") from None
        assert space.provider is not None
        await _guarded(space, space.provider.write_file(space.ref, path, data))
        digest = hashlib.sha256(data).hexdigest()
        await self.writer.append(
            WorkspaceWritten(
                workspace=space.name,
                kind=space.kind,
                path=path,
                size=len(data),
                sha256=digest,
                owner_session_id=self._owner(space),
                tool_call_id=ctx.tool_call_id,
            )
        )
        return {"workspace": space.name, "path": path, "size": len(data), "sha256": digest}

    async def list_files(self, value: WorkspaceListInput, ctx: ToolContext) -> dict[str, Any]:
        space = self.registry.resolve(value.workspace)
        prefix = normalize_workspace_path(value.prefix, allow_root=True)
        assert space.provider is not None
        entries = await _guarded(
            space, space.provider.list_files(space.ref, prefix, LIST_LIMIT + 1)
        )
        return {
            "workspace": space.name,
            "prefix": prefix,
            "files": [{"path": entry.path, "size": entry.size} for entry in entries[:LIST_LIMIT]],
            "truncated": len(entries) > LIST_LIMIT,
        }

    async def delete(self, value: WorkspaceDeleteInput, ctx: ToolContext) -> dict[str, Any]:
        space = self.registry.resolve(value.workspace)
        path = normalize_workspace_path(value.path)
        assert space.provider is not None
        deleted = await _guarded(space, space.provider.delete_file(space.ref, path))
        if deleted:
            await self.writer.append(
                WorkspaceDeleted(
                    workspace=space.name,
                    kind=space.kind,
                    path=path,
                    owner_session_id=self._owner(space),
                    tool_call_id=ctx.tool_call_id,
                )
            )
        return {"workspace": space.name, "path": path, "deleted": deleted}


def _catalog(registry: WorkspaceRegistry) -> str:
    lines = []
    for space in registry.workspaces:
        about = f": {space.workspace.description}" if space.workspace.description else ""
        lines.append(f"'{space.name}' ({space.kind}){about}")
    return "Workspaces: " + "; ".join(lines) + "." if lines else "No workspace is available."


def workspace_tools(registry: WorkspaceRegistry, writer: SessionWriter) -> list[Tool[Any]]:
    """The four ``workspace_*`` tools for a session using ``registry`` (none if it is empty)."""
    if not registry.names() and registry.failure is None:
        return []
    toolset = _Toolset(registry, writer)
    catalog = _catalog(registry)
    read, write, list_, delete = WORKSPACE_TOOL_NAMES
    return [
        Tool(
            name=read,
            description=f"Read a UTF-8 text file from a workspace. {catalog}",
            input_schema=WorkspaceReadInput,
            execute=toolset.read,
        ),
        Tool(
            name=write,
            description=(
                f"Create or replace a UTF-8 text file in a workspace (the whole content). {catalog}"
            ),
            input_schema=WorkspaceWriteInput,
            execute=toolset.write,
        ),
        Tool(
            name=list_,
            description=f"List the files of a workspace, with their sizes. {catalog}",
            input_schema=WorkspaceListInput,
            execute=toolset.list_files,
        ),
        Tool(
            name=delete,
            description=f"Delete a file from a workspace. {catalog}",
            input_schema=WorkspaceDeleteInput,
            execute=toolset.delete,
        ),
    ]
