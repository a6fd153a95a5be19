"""Workspaces: named places an agent keeps files in, and the provider seam behind them.

An agent declares ``workspaces=[Workspace("notes", "local")]``; the executor
is wired with a provider per kind (``workspace_providers={"local": ...}``);
each run of a session opens the session's workspaces and the agent reaches
them through the auto-injected ``workspace_*`` tools (``core/workspaces/tools.py``).

A :class:`WorkspaceProvider` stores the files of every workspace of its kind,
each named by a :class:`WorkspaceRef` (the owning session and the workspace
name). The framework checks and normalises every path before a provider sees
it (:func:`normalize_workspace_path`): relative, POSIX separators, no ``..``,
no empty or ``.`` segment, no control characters. A provider still guards
what only it can see (a local provider refuses symbolic links that lead out
of its root).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Protocol

import msgspec

from helix_agents.errors import UsageError, WorkspacePathError

__all__ = [
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_WORKSPACE_BYTES",
    "MAX_PATH_LENGTH",
    "Workspace",
    "WorkspaceEntry",
    "WorkspaceProvider",
    "WorkspaceRef",
    "check_size_limits",
    "normalize_workspace_path",
    "path_in_prefix",
    "shares_files",
]

DEFAULT_MAX_FILE_BYTES = 1024 * 1024
"""Default size limit of one file written to a workspace (1 MiB)."""

DEFAULT_MAX_WORKSPACE_BYTES = 64 * 1024 * 1024
"""Default size limit of all files of one workspace together (64 MiB)."""

MAX_PATH_LENGTH = 1024
"""Longest accepted workspace path, in characters."""

_NAME = re.compile(r"[A-Za-z0-9_\-]{1,64}")
_KIND = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_MAX_SEGMENT_BYTES = 255


@dataclass(frozen=True)
class Workspace:
    """A workspace an agent declares: its ``name`` and the provider ``kind`` that stores it.

    Args:
        name: what the agent's workspace tools call it (letters, digits, ``_``,
            ``-``; at most 64 characters), unique within the agent.
        kind: the provider kind, a key of the executor's ``workspace_providers``
            (``"memory"``, ``"local"``, or your own).
        description: shown to the model in the workspace tools' description.

    Raises:
        UsageError: for an invalid name or kind.
    """

    name: str
    kind: str
    description: str = field(default="", kw_only=True)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or _NAME.fullmatch(self.name) is None:
            raise UsageError(
                f"invalid workspace name {self.name!r}: use 1-64 letters, digits, '_' or '-'"
            )
        if not isinstance(self.kind, str) or _KIND.fullmatch(self.kind) is None:
            raise UsageError(
                f"workspace {self.name!r}: invalid kind {self.kind!r}: "
                "use 1-64 letters, digits, '_', '-' or '.'"
            )
        if not isinstance(self.description, str):
            raise UsageError(f"workspace {self.name!r}: description must be a string")


class WorkspaceRef(msgspec.Struct, frozen=True, kw_only=True):
    """Which workspace a provider call is about: the owning session, the name, the kind.

    ``session_id`` is the session that declared the workspace; sessions that
    inherit it (``inherit_workspace=True`` sub-agents) use the owner's ref.
    """

    session_id: str
    name: str
    kind: str


class WorkspaceEntry(msgspec.Struct, frozen=True, kw_only=True):
    """A file in a workspace: its normalised path and its size in bytes."""

    path: str
    size: int


class WorkspaceProvider(Protocol):
    """Stores the files of the workspaces of one kind; implementations are structural.

    The executor opens a workspace before a run of its owning session (or of
    a session that inherits it) uses it and closes it when the last such run
    ends, so ``open`` and ``close`` alternate per ref. Every ``path`` is
    already normalised (see :func:`normalize_workspace_path`); ``prefix`` may
    be ``""`` (the whole workspace). Calls for different refs, and reads of
    one ref, may run concurrently.

    Errors: a missing file is :class:`~helix_agents.WorkspaceFileNotFoundError`,
    a refused path :class:`~helix_agents.WorkspacePathError`, a size limit
    :class:`~helix_agents.WorkspaceLimitError`, and a storage failure
    :class:`~helix_agents.WorkspaceFailedError`; each becomes the tool call's
    error result. A provider never raises for a ref it did not open except
    ``WorkspaceFailedError``.

    Optionally, a class attribute ``durable = True`` says that its files
    outlive the process and that every process given an equal provider reaches
    them (:func:`shares_files`); the durable runtimes (Temporal, DBOS), whose
    steps may run on any worker, take only such providers.
    """

    async def open(self, ref: WorkspaceRef) -> None:
        """Make the workspace usable (create or reattach its storage)."""
        ...

    async def close(self, ref: WorkspaceRef) -> None:
        """Release the workspace; a non-durable provider forgets its files here."""
        ...

    async def read_file(self, ref: WorkspaceRef, path: str) -> bytes:
        """The bytes of the file at ``path``."""
        ...

    async def write_file(self, ref: WorkspaceRef, path: str, data: bytes) -> None:
        """Create or replace the file at ``path`` (creating its directories), atomically."""
        ...

    async def list_files(self, ref: WorkspaceRef, prefix: str, limit: int) -> list[WorkspaceEntry]:
        """Files at or under directory ``prefix``, sorted by path, at most ``limit`` of them."""
        ...

    async def delete_file(self, ref: WorkspaceRef, path: str) -> bool:
        """Delete the file at ``path``; False if there was none."""
        ...


def normalize_workspace_path(path: object, *, allow_root: bool = False) -> str:
    """``path`` as a workspace path (``a/b.md``), or :class:`WorkspacePathError`.

    Refused: a non-string, absolute paths (``/x``, ``C:\\x``), ``..`` segments
    (traversal), backslashes, control characters, segments over 255 bytes,
    paths over :data:`MAX_PATH_LENGTH`. Empty and ``.`` segments are dropped,
    so ``./a//b`` is ``a/b``. With ``allow_root``, an empty result (the
    workspace root, for listing) is allowed.
    """
    if not isinstance(path, str):
        raise WorkspacePathError(repr(path), "a path must be a string")
    if len(path) > MAX_PATH_LENGTH:
        raise WorkspacePathError(path, f"longer than {MAX_PATH_LENGTH} characters")
    if any(ord(char) < 0x20 or ord(char) == 0x7F for char in path):
        raise WorkspacePathError(path, "it contains control characters")
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        raise WorkspacePathError(path, "it is not valid Unicode text") from None
    if "\\" in path:
        raise WorkspacePathError(path, "use '/' to separate directories, not '\\'")
    if path.startswith("/") or re.match(r"[A-Za-z]:(/|$)", path):
        raise WorkspacePathError(
            path, "absolute paths are not allowed; give a path relative to the workspace root"
        )
    segments: list[str] = []
    for segment in path.split("/"):
        if segment in ("", "."):
            continue
        if segment == "..":
            raise WorkspacePathError(path, "'..' is not allowed (it would leave the workspace)")
        if len(segment.encode("utf-8")) > _MAX_SEGMENT_BYTES:
            raise WorkspacePathError(path, f"a name is longer than {_MAX_SEGMENT_BYTES} bytes")
        segments.append(segment)
    if not segments and not allow_root:
        raise WorkspacePathError(path, "it names no file")
    return "/".join(segments)


def path_in_prefix(path: str, prefix: str) -> bool:
    """True if normalised ``path`` is ``prefix`` itself or lies under directory ``prefix``."""
    return not prefix or path == prefix or path.startswith(prefix + "/")


def check_size_limits(max_file_bytes: object, max_workspace_bytes: object) -> None:
    """Raise :class:`UsageError` unless both provider size limits are ints >= 1."""
    for label, value in (
        ("max_file_bytes", max_file_bytes),
        ("max_workspace_bytes", max_workspace_bytes),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UsageError(f"{label} must be an int >= 1, not {value!r}")


def shares_files(provider: object) -> bool:
    """Whether ``provider`` declares ``durable = True``: its files outlive a process."""
    return getattr(provider, "durable", False) is True
