"""``LocalWorkspaceProvider``: workspaces as directories on this machine (kind ``"local"``).

Each workspace is the directory ``<root>/<owner session>/<workspace name>``,
so its files outlive the process: a session resumed after a restart, by a new
executor on the same store and root, finds what it wrote.

Containment. Paths reach the provider already normalised (relative, no
``..``). The provider then resolves symbolic links and refuses any path that
resolves outside the workspace directory, and walks the resolved path one
directory at a time with ``O_NOFOLLOW`` relative to the directory before it,
so a link swapped in after the check is refused too, never followed. Listing
never follows links; a FIFO or device file is refused, never opened
blocking. A cancelled read or listing is abandoned, not waited for (it
changes nothing). Writes go to a temporary file that is synced and renamed over the
target, so a crash leaves the old file or the new one, never half of one.

Limits: the size of one file (``max_file_bytes``; reads of larger files,
put there by something else, are refused too) and of a whole workspace
(``max_workspace_bytes``, checked under a per-workspace lock in this
process; processes sharing a root do not coordinate it).
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import stat
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import anyio.to_thread

from helix_agents.errors import (
    UsageError,
    WorkspaceError,
    WorkspaceFailedError,
    WorkspaceFileNotFoundError,
    WorkspaceLimitError,
    WorkspacePathError,
)
from helix_agents.ids import encode_session_token
from helix_agents.workspaces.base import (
    DEFAULT_MAX_FILE_BYTES,
    DEFAULT_MAX_WORKSPACE_BYTES,
    WorkspaceEntry,
    WorkspaceRef,
    check_size_limits,
)

__all__ = ["LocalWorkspaceProvider", "session_directory_name"]

_TEMP_PREFIX = ".helix-tmp-"
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_MAX_DIR_NAME = 120


def session_directory_name(session_id: str) -> str:
    """The directory name of a session's workspaces: its id with ``.`` and ``_`` escaped.

    Escaping (``_`` -> ``__``, ``.`` -> ``_d``) keeps the mapping one-to-one
    and makes ``.`` and ``..`` impossible; an id whose escaped form is long
    is cut and suffixed with a digest of the whole id (file names are
    limited to 255 bytes).
    """
    token = encode_session_token(session_id)
    if len(token) <= _MAX_DIR_NAME:
        return token
    digest = hashlib.sha256(session_id.encode()).hexdigest()[:32]
    return f"{token[:64]}-{digest}"


def _resolve(base: str, path: str) -> list[str]:
    """The segments of ``path`` under ``base`` after resolving links; refuse a way out."""
    target = os.path.realpath(os.path.join(base, path))
    if target == base:
        raise WorkspacePathError(path, "it resolves to the workspace's root directory")
    if not target.startswith(base + os.sep):
        raise WorkspacePathError(path, "it leads out of the workspace (through a symbolic link)")
    return os.path.relpath(target, base).split(os.sep)


@contextmanager
def _directory(base: str, segments: list[str], *, create: bool) -> Iterator[int]:
    """A descriptor of the directory holding the last segment, opened without following links."""
    fd = os.open(base, _DIR_FLAGS)
    try:
        for segment in segments[:-1]:
            try:
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with suppress(FileExistsError):  # made concurrently: open it below
                    os.mkdir(segment, dir_fd=fd)
                child = os.open(segment, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _translate(ref: WorkspaceRef, path: str, exc: OSError) -> WorkspaceError:
    """A filesystem error as the workspace error the model reads."""
    if exc.errno == errno.ENOENT:
        return WorkspaceFileNotFoundError(ref.name, path)
    if exc.errno == errno.ELOOP:
        return WorkspacePathError(path, "a symbolic link is in the way; links are not followed")
    if exc.errno == errno.ENOTDIR:
        return WorkspacePathError(path, "a directory on its way is a file")
    if exc.errno == errno.EISDIR:
        return WorkspacePathError(path, "it is a directory")
    return WorkspaceFailedError(ref.name, ref.kind, exc.strerror or str(exc))


def _walk(directory: str, relative: str) -> Iterator[WorkspaceEntry]:
    """Every regular file under ``directory`` (not following links), paths relative to the base."""
    try:
        entries = list(os.scandir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        name = f"{relative}/{entry.name}" if relative else entry.name
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(entry.path, name)
        elif entry.is_file(follow_symlinks=False) and not entry.name.startswith(_TEMP_PREFIX):
            yield WorkspaceEntry(path=name, size=entry.stat(follow_symlinks=False).st_size)


class LocalWorkspaceProvider:
    """A :class:`~helix_agents.WorkspaceProvider` storing each workspace in a directory.

    Args:
        root: the directory holding every session's workspaces (created on
            first use). Give each deployment its own.
        max_file_bytes: the largest file a write may create or a read may return.
        max_workspace_bytes: the most all files of one workspace may hold together.

    Raises:
        UsageError: for a bad limit, or on a system without ``dir_fd`` support.
    """

    durable = True
    """Its files outlive the process: a durable runtime's workers sharing ``root`` (one
    host, or a shared file system) each reach them (see ``shares_files``)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        max_workspace_bytes: int = DEFAULT_MAX_WORKSPACE_BYTES,
    ) -> None:
        check_size_limits(max_file_bytes, max_workspace_bytes)
        if os.open not in os.supports_dir_fd or not _NOFOLLOW:
            raise UsageError("LocalWorkspaceProvider needs a POSIX system (dir_fd, O_NOFOLLOW)")
        self.root = Path(root).absolute()
        self.max_file_bytes = max_file_bytes
        self.max_workspace_bytes = max_workspace_bytes
        self._locks: dict[WorkspaceRef, anyio.Lock] = {}

    def directory(self, ref: WorkspaceRef) -> Path:
        """Where workspace ``ref`` keeps its files."""
        return self.root / session_directory_name(ref.session_id) / ref.name

    def _opened(self, ref: WorkspaceRef) -> tuple[str, anyio.Lock]:
        """The real path of an open workspace's directory, and its write lock."""
        lock = self._locks.get(ref)
        if lock is None:
            raise WorkspaceFailedError(ref.name, ref.kind, "it is not open")
        return os.path.realpath(self.directory(ref)), lock

    async def open(self, ref: WorkspaceRef) -> None:
        """Create the workspace's directory if needed (existing files are kept)."""

        def make() -> None:
            directory = self.directory(ref)
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise WorkspaceFailedError(ref.name, ref.kind, str(exc)) from exc
            for part in (directory.parent, directory):
                if part.is_symlink() or not part.is_dir():
                    raise WorkspaceFailedError(
                        ref.name, ref.kind, f"{part} is not a plain directory"
                    )

        await anyio.to_thread.run_sync(make)
        self._locks.setdefault(ref, anyio.Lock(fast_acquire=True))

    async def close(self, ref: WorkspaceRef) -> None:
        """Stop serving the workspace; its files stay on disk."""
        self._locks.pop(ref, None)

    async def read_file(self, ref: WorkspaceRef, path: str) -> bytes:
        """The file's bytes (a regular file, within ``max_file_bytes``)."""
        base, _ = self._opened(ref)

        def read() -> bytes:
            segments = _resolve(base, path)
            try:
                with _directory(base, segments, create=False) as parent:
                    fd = os.open(segments[-1], os.O_RDONLY | _NOFOLLOW | _NONBLOCK, dir_fd=parent)
                    try:
                        info = os.fstat(fd)
                        if not stat.S_ISREG(info.st_mode):
                            raise WorkspacePathError(path, "it is not a regular file")
                        if info.st_size > self.max_file_bytes:
                            raise WorkspaceLimitError(path, info.st_size, self.max_file_bytes)
                        chunks: list[bytes] = []
                        held = 0
                        while chunk := os.read(fd, 65536):
                            held += len(chunk)
                            if held > self.max_file_bytes:  # it grew while we read
                                raise WorkspaceLimitError(path, held, self.max_file_bytes)
                            chunks.append(chunk)
                        return b"".join(chunks)
                    finally:
                        os.close(fd)
            except OSError as exc:
                raise _translate(ref, path, exc) from exc

        return await anyio.to_thread.run_sync(read, abandon_on_cancel=True)

    async def write_file(self, ref: WorkspaceRef, path: str, data: bytes) -> None:
        """Replace the file atomically (temporary file, fsync, rename), within the limits."""
        if len(data) > self.max_file_bytes:
            raise WorkspaceLimitError(path, len(data), self.max_file_bytes)
        base, lock = self._opened(ref)

        def write() -> None:
            segments = _resolve(base, path)
            try:
                used = sum(entry.size for entry in _walk(base, ""))
                with _directory(base, segments, create=True) as parent:
                    name = segments[-1]
                    try:
                        old = os.stat(name, dir_fd=parent, follow_symlinks=False)
                    except FileNotFoundError:
                        old = None
                    if old is not None and not stat.S_ISREG(old.st_mode):
                        raise WorkspacePathError(path, "it is not a regular file")
                    total = used - (old.st_size if old is not None else 0) + len(data)
                    if total > self.max_workspace_bytes:
                        raise WorkspaceLimitError(
                            path, total, self.max_workspace_bytes, what="workspace"
                        )
                    temp = f"{_TEMP_PREFIX}{uuid.uuid4().hex}"
                    fd = os.open(
                        temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=parent
                    )
                    try:
                        try:
                            view = memoryview(data)
                            while view:
                                view = view[os.write(fd, view) :]
                            os.fsync(fd)
                        finally:
                            os.close(fd)
                        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
                    except BaseException:
                        with suppress(OSError):
                            os.unlink(temp, dir_fd=parent)
                        raise
                    os.fsync(parent)
            except OSError as exc:
                raise _translate(ref, path, exc) from exc

        async with lock:
            await anyio.to_thread.run_sync(write)

    async def list_files(self, ref: WorkspaceRef, prefix: str, limit: int) -> list[WorkspaceEntry]:
        """Regular files under directory ``prefix`` (links are not followed), sorted."""
        base, _ = self._opened(ref)

        def listing() -> list[WorkspaceEntry]:
            if not prefix:
                found = _walk(base, "")
            else:
                segments = _resolve(base, prefix)
                start = os.path.join(base, *segments)
                try:
                    info = os.lstat(start)
                except OSError:
                    return []
                if stat.S_ISREG(info.st_mode):
                    return [WorkspaceEntry(path="/".join(segments), size=info.st_size)]
                found = _walk(start, "/".join(segments))
            return heapq.nsmallest(limit, found, key=lambda entry: entry.path)

        return await anyio.to_thread.run_sync(listing, abandon_on_cancel=True)

    async def delete_file(self, ref: WorkspaceRef, path: str) -> bool:
        """Delete the file; False if there was none. Directories are refused."""
        base, lock = self._opened(ref)

        def delete() -> bool:
            segments = _resolve(base, path)
            try:
                with _directory(base, segments, create=False) as parent:
                    try:
                        info = os.stat(segments[-1], dir_fd=parent, follow_symlinks=False)
                    except FileNotFoundError:
                        return False
                    if stat.S_ISDIR(info.st_mode):
                        raise WorkspacePathError(path, "it is a directory")
                    os.unlink(segments[-1], dir_fd=parent)
                    os.fsync(parent)
                    return True
            except FileNotFoundError:
                return False  # a directory on its way does not exist
            except OSError as exc:
                raise _translate(ref, path, exc) from exc

        async with lock:
            return await anyio.to_thread.run_sync(delete)
