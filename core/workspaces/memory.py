"""``MemoryWorkspaceProvider``: workspaces held in this process's memory (kind ``"memory"``).

A workspace's files live from ``open`` to ``close``: a run of the owning
session (and of the sub-agents that inherit it) shares them, and they are
gone when the last of those runs ends, so state is lost between invocations
(a resume starts empty), as the seeds specify for the in-memory provider.
Use it for tests, scratch space, and sibling sub-agents that share notes
within one parent run.
"""

from __future__ import annotations

from helix_agents.errors import (
    WorkspaceFailedError,
    WorkspaceFileNotFoundError,
    WorkspaceLimitError,
    WorkspacePathError,
)
from helix_agents.workspaces.base import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_WORKSPACE_BYTES,
    WorkspaceEntry,
    WorkspaceRef,
    check_size_limits,
    path_in_prefix,
)

__all__ = ["MemoryWorkspaceProvider"]


class MemoryWorkspaceProvider:
    """A :class:`~helix_agents.WorkspaceProvider` keeping files in a dict per open workspace.

    Args:
        max_file_bytes: the largest file a write may create.
        max_workspace_bytes: the most all files of one workspace may hold together.
    """

    durable = False
    """Its files live in this process only (see ``shares_files``)."""

    def __init__(
        self,
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_workspace_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES,
    ) -> None:
        check_size_limits(max_file_bytes, max_workspace_bytes)
        self.max_file_bytes = max_file_bytes
        self.max_workspace_bytes = max_workspace_bytes
        self._spaces: dict[WorkspaceRef, dict[str, bytes]] = {}

    def _files(self, ref: WorkspaceRef) -> dict[str, bytes]:
        files = self._spaces.get(ref)
        if files is None:
            raise WorkspaceFailedError(ref.name, ref.kind, "it is not open")
        return files

    def is_open(self, ref: WorkspaceRef) -> bool:
        """True between ``open`` and ``close`` of ``ref``."""
        return ref in self._spaces

    async def open(self, ref: WorkspaceRef) -> None:
        """Start an empty workspace (or keep the open one)."""
        self._spaces.setdefault(ref, {})

    async def close(self, ref: WorkspaceRef) -> None:
        """Forget the workspace and its files."""
        self._spaces.pop(ref, None)

    async def read_file(self, ref: WorkspaceRef, path: str) -> bytes:
        """The file's bytes, or :class:`WorkspaceFileNotFoundError`."""
        files = self._files(ref)
        if path not in files:
            if any(path_in_prefix(name, path) for name in files):
                raise WorkspacePathError(path, "it is a directory")
            raise WorkspaceFileNotFoundError(ref.name, path)
        return files[path]

    async def write_file(self, ref: WorkspaceRef, path: str, data: bytes) -> None:
        """Store the file, within the size limits; a path cannot be both a file and a directory."""
        files = self._files(ref)
        if len(data) > self.max_file_bytes:
            raise WorkspaceLimitError(path, len(data), self.max_file_bytes)
        parts = path.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in files:
                raise WorkspacePathError(path, f"{parent!r} is a file, not a directory")
        if path not in files and any(path_in_prefix(name, path) for name in files):
            raise WorkspacePathError(path, "it is a directory")
        total = sum(len(content) for content in files.values()) - len(files.get(path, b""))
        if total + len(data) > self.max_workspace_bytes:
            raise WorkspaceLimitError(
                path, total + len(data), self.max_workspace_bytes, what="workspace"
            )
        files[path] = bytes(data)

    async def list_files(self, ref: WorkspaceRef, prefix: str, limit: int) -> list[WorkspaceEntry]:
        """The files under ``prefix``, sorted, at most ``limit``."""
        files = self._files(ref)
        found = sorted(name for name in files if path_in_prefix(name, prefix))
        return [WorkspaceEntry(path=name, size=len(files[name])) for name in found[:limit]]

    async def delete_file(self, ref: WorkspaceRef, path: str) -> bool:
        """Delete the file; False if there was none."""
        files = self._files(ref)
        if path not in files and any(path_in_prefix(name, path) for name in files):
            raise WorkspacePathError(path, "it is a directory")
        return files.pop(path, None) is not None
