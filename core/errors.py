"""The exceptions helix-agents raises.

Every error derives from :class:`HelixError`::

    HelixError
    ├── StoreError                    an event store could not do what was asked
    │   ├── ConcurrencyConflict       compare-and-append lost: the log moved on
    │   ├── StoreClosedError          the store was used after close()
    │   ├── StoreUnavailableError     the store is out of reach for now (an outage): try again
    │   ├── DamagedLogError           a stored log failed its integrity check (checksum, gap...)
    │   └── DamagedStoreError         a store's storage is damaged as a whole (cannot be opened)
    ├── OwnershipLost                 another host claimed the session a run was writing
    ├── LLMError                      a model call failed (defined in helix_agents.models.base)
    ├── LogError                      a log is not a valid session log
    │   ├── EventDecodeError          bytes that do not decode to an event (also ValueError)
    │   └── CorruptLogError           events that do not form a valid log (gap, wrong session...)
    ├── TransportError                a remote agent could not be reached or failed
    │   ├── TransportTimeoutError     no answer in time (also TimeoutError)
    │   ├── StreamDropError           a stream ended without its end event
    │   └── RemoteAgentFailedError    the remote agent definitively failed
    ├── AgentServerError              a server refused a request; carries the protocol ``code``
    ├── ToolsetError                  a toolset (an MCP server's tools) will not open or is unusable
    ├── WorkspaceError                a workspace tool could not do what was asked
    │   ├── WorkspaceFailedError      a workspace is unusable: no provider, or the provider failed
    │   ├── WorkspacePathError        a path refused: absolute, ``..``, a link out (also ValueError)
    │   ├── WorkspaceLimitError       a file or a workspace over its size limit
    │   └── WorkspaceFileNotFoundError  no such file (also LookupError)
    ├── AgentRunError                 a run did not complete (``executor.run``, ``run_sync``)
    └── UsageError                    the developer called the API wrongly
        ├── InvalidSessionIdError     a session id outside the safe set (also ValueError)
        └── WorkspaceInheritanceError an inheriting sub-agent also declares its own workspaces

Errors carry their data as attributes and print as one line.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "AgentRunError",
    "AgentServerError",
    "AgentServerErrorCode",
    "ConcurrencyConflict",
    "CorruptLogError",
    "DamagedLogError",
    "DamagedStoreError",
    "EventDecodeError",
    "HTTP_STATUS",
    "HelixError",
    "InvalidSessionIdError",
    "LogError",
    "OwnershipLost",
    "RemoteAgentFailedError",
    "StoreClosedError",
    "StoreError",
    "StoreUnavailableError",
    "StreamDropError",
    "ToolsetError",
    "TransportError",
    "TransportTimeoutError",
    "UsageError",
    "WorkspaceError",
    "WorkspaceFailedError",
    "WorkspaceFileNotFoundError",
    "WorkspaceInheritanceError",
    "WorkspaceLimitError",
    "WorkspacePathError",
]


class HelixError(Exception):
    """Root of every error helix-agents raises on purpose."""


class StoreError(HelixError):
    """An event store failed to carry out an operation (I/O, a closed database...)."""


class ConcurrencyConflict(StoreError):
    """Raised by ``append`` when the session's log does not end at ``expected_seq``.

    Nothing of the rejected batch was written. Re-read the log, re-decide, and
    append again at the new position.
    """

    def __init__(self, session_id: str, expected_seq: int, actual_seq: int) -> None:
        self.session_id = session_id
        self.expected_seq = expected_seq
        self.actual_seq = actual_seq
        super().__init__(session_id, expected_seq, actual_seq)

    def __str__(self) -> str:
        return (
            f"session {self.session_id!r} ends at seq {self.actual_seq}, "
            f"not at the expected {self.expected_seq}"
        )


class StoreClosedError(StoreError):
    """Raised when a store is used after ``close()``."""

    def __str__(self) -> str:
        return "the event store is closed"


class StoreUnavailableError(StoreError):
    """Raised when the store is out of reach for now (its server down or cut off): try again.

    Nothing is known to have been written by the failed call (an append that
    may have landed says so in its message; re-read the log to know). Over
    the HTTP protocol it is ``503 UNAVAILABLE`` with ``Retry-After``, not an
    internal error: the server is fine, its store will be back.
    """


class DamagedLogError(StoreError):
    """Raised when a stored log fails its integrity check: the stored bytes were damaged.

    ``seq`` is the first seq found damaged (for a gap: the first missing one);
    ``reason`` says what was found (``"checksum mismatch"``, ``"gap"``,
    ``"undecodable event: ..."``). The message names the session and the seq,
    never where the store keeps its data. Nothing was changed; the session
    cannot be used until it is repaired or deleted (``helix-agents check``
    lists every damaged session).
    """

    def __init__(self, session_id: str, seq: int, reason: str) -> None:
        self.session_id = session_id
        self.seq = seq
        self.reason = reason
        super().__init__(session_id, seq, reason)

    def __str__(self) -> str:
        return f"session {self.session_id!r} is damaged at seq {self.seq}: {self.reason}"


class DamagedStoreError(StoreError):
    """Raised when a store's storage is damaged as a whole (a file SQLite cannot read at all).

    Unlike :class:`DamagedLogError` no single session is to blame: the store
    cannot be opened or used until its files are restored.
    """


class OwnershipLost(HelixError):
    """Raised inside a run when another host claimed its session; the run stops writing."""


class LogError(HelixError):
    """A session log, or one of its events, is not valid."""


class EventDecodeError(LogError, ValueError):
    """Raised when bytes do not decode to a known event; ``line`` is 1-based when known."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message)

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{where}{self.message}"


class CorruptLogError(LogError):
    """Raised when events do not form a valid session log (gap, wrong session, no start)."""


class TransportError(HelixError):
    """A remote agent could not be reached, or answered with a failure."""


class TransportTimeoutError(TransportError, TimeoutError):
    """Raised when a remote did not answer ``operation`` within ``timeout`` seconds on any try."""

    def __init__(self, operation: str, timeout: float) -> None:
        self.operation = operation
        self.timeout = timeout
        super().__init__(operation, timeout)

    def __str__(self) -> str:
        return f"{self.operation}: no answer within {self.timeout:g} s"


class StreamDropError(TransportError):
    """A remote stream ended without an ``end`` event; resume from ``last_sequence``."""

    def __init__(self, remote_session_id: str, last_sequence: int) -> None:
        self.remote_session_id = remote_session_id
        self.last_sequence = last_sequence
        super().__init__(remote_session_id, last_sequence)

    def __str__(self) -> str:
        return (
            f"stream of remote session {self.remote_session_id!r} dropped "
            f"after sequence {self.last_sequence}"
        )


class RemoteAgentFailedError(TransportError):
    """The remote agent definitively failed; ``remote_error`` is its error message."""

    def __init__(self, remote_session_id: str, remote_error: str) -> None:
        self.remote_session_id = remote_session_id
        self.remote_error = remote_error
        super().__init__(remote_session_id, remote_error)

    def __str__(self) -> str:
        return f"remote session {self.remote_session_id!r} failed: {self.remote_error}"


AgentServerErrorCode = Literal[
    "NOT_FOUND",
    "ALREADY_RUNNING",
    "ALREADY_COMPLETED",
    "ALREADY_ANSWERED",
    "SESSION_FAILED",
    "SESSION_BUSY",
    "INVALID_REQUEST",
    "INTERNAL_ERROR",
    "UNAUTHORIZED",
    "FORBIDDEN",
    "METHOD_NOT_ALLOWED",
    "PAYLOAD_TOO_LARGE",
    "WORKSPACE_WIRING",
    "UNAVAILABLE",
]
"""The protocol's error codes. ``UNAUTHORIZED``, ``FORBIDDEN`` (an identity whose
permissions do not reach the action; specs/auth.md), ``METHOD_NOT_ALLOWED``,
``PAYLOAD_TOO_LARGE`` and ``UNAVAILABLE`` (a server at one of its limits) are
HTTP-only; ``ALREADY_ANSWERED`` is ours (a pending input answered before with a
different value; see specs/hitl.md); ``SESSION_FAILED`` is ours too (a follow-up
message to a failed or aborted session, which can take no more turns; see
specs/http.md, ``/message``); ``SESSION_BUSY`` too (a message to a running or
paused session whose ``multitask`` is ``reject``; specs/server.md);
``WORKSPACE_WIRING`` is raised when a server or executor is built, never sent
(specs/workspaces.md)."""

HTTP_STATUS: dict[str, int] = {
    "INVALID_REQUEST": 400,
    "UNAUTHORIZED": 401,
    "FORBIDDEN": 403,
    "NOT_FOUND": 404,
    "METHOD_NOT_ALLOWED": 405,
    "ALREADY_RUNNING": 409,
    "ALREADY_COMPLETED": 409,
    "ALREADY_ANSWERED": 409,
    "SESSION_FAILED": 409,
    "SESSION_BUSY": 409,
    "PAYLOAD_TOO_LARGE": 413,
    "INTERNAL_ERROR": 500,
    "WORKSPACE_WIRING": 500,
    "UNAVAILABLE": 503,
}
"""The HTTP status of each error code."""


class AgentServerError(HelixError):
    """Raised by an agent server when it refuses a request; ``code`` is the protocol code."""

    def __init__(self, code: AgentServerErrorCode, message: str) -> None:
        self.code: AgentServerErrorCode = code
        self.message = message
        super().__init__(code, message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class ToolsetError(HelixError):
    """Raised when toolset ``toolset`` cannot be opened or offers tools an agent cannot use.

    The executor raises it on entering (a toolset of a registered agent would
    not open), from ``execute`` (a toolset of the agent it starts), and fails
    a run with it as a recoverable error when a toolset opened for that run
    fails; nothing else changes. ``toolset`` names the toolset, ``reason``
    says what is wrong.
    """

    def __init__(self, toolset: str, reason: str) -> None:
        self.toolset = toolset
        self.reason = reason
        super().__init__(toolset, reason)

    def __str__(self) -> str:
        return f"toolset {self.toolset}: {self.reason}"


class AgentRunError(HelixError):
    """Raised by ``executor.run`` and ``run_sync`` when the run ended without output.

    ``status`` is how it ended (``failed`` (aborted runs too), ``interrupted``, or
    ``paused``: waiting for a person's answer, which these one-liners cannot
    give); ``error`` is the run's error message, if any. The session's log is
    kept: ``executor.state(session_id)`` shows it, ``executor.resume`` goes on.
    ``handle.result()`` never raises this: it returns the status.
    """

    def __init__(self, session_id: str, status: str, error: str | None = None) -> None:
        self.session_id = session_id
        self.status = status
        self.error = error
        super().__init__(session_id, status, error)

    def __str__(self) -> str:
        how = f"session {self.session_id!r} ended {self.status}"
        if self.status == "paused":
            how = f"session {self.session_id!r} is paused waiting for input (answer it through "
            how += "executor.execute(...) and the handle's pending_inputs())"
        return f"{how}: {self.error}" if self.error else how


class UsageError(HelixError):
    """The API was called in a way it does not support (a developer mistake)."""


class InvalidSessionIdError(UsageError, ValueError):
    """Raised when a session id is empty, too long, or has characters outside the safe set."""

    def __init__(self, session_id: str, reason: str) -> None:
        self.session_id = session_id
        self.reason = reason
        super().__init__(session_id, reason)

    def __str__(self) -> str:
        shown = self.session_id if len(self.session_id) <= 40 else self.session_id[:37] + "..."
        return f"invalid session id {shown!r}: {self.reason}"


class WorkspaceInheritanceError(UsageError):
    """Raised when a sub-agent that inherits its parent's workspaces declares its own too.

    An inheriting child runs against its parent's workspace registry; its own
    declarations would be silently ignored, so the combination is refused:
    at definition by ``create_sub_agent_tool``, and when such a child is
    started (as ``INVALID_REQUEST`` carrying this message).
    """

    def __init__(self, agent_type: str, workspaces: list[str]) -> None:
        self.agent_type = agent_type
        self.workspaces = workspaces
        super().__init__(agent_type, workspaces)

    def __str__(self) -> str:
        names = ", ".join(repr(name) for name in self.workspaces)
        return (
            f"agent {self.agent_type!r} inherits its parent's "
            f"workspaces (inherit_workspace=True) and must not declare its own (it declares "
            f"{names}); drop inherit_workspace or the child's workspaces"
        )


class WorkspaceError(HelixError):
    """A workspace tool call could not be carried out; the tool's error result says why."""


class WorkspaceFailedError(WorkspaceError):
    """Raised at tool-call time when workspace ``workspace`` (of ``kind``) cannot be used.

    No provider of its kind is configured on the executor (soft wiring mode),
    the provider failed to open it, or the provider's storage failed.
    """

    def __init__(self, workspace: str, kind: str, reason: str) -> None:
        self.workspace = workspace
        self.kind = kind
        self.reason = reason
        super().__init__(workspace, kind, reason)

    def __str__(self) -> str:
        return f"workspace {self.workspace!r} (kind {self.kind!r}) failed: {self.reason}"


class WorkspacePathError(WorkspaceError, ValueError):
    """Raised when a workspace path is refused (absolute, ``..``, a link out of the root...)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(path, reason)

    def __str__(self) -> str:
        shown = self.path if len(self.path) <= 80 else self.path[:77] + "..."
        return f"path {shown!r} refused: {self.reason}"


class WorkspaceLimitError(WorkspaceError):
    """Raised when a write would put a file or a workspace over its size ``limit`` (bytes)."""

    def __init__(self, path: str, size: int, limit: int, *, what: str = "file") -> None:
        """``what`` is ``"file"`` or ``"workspace"`` (all its files together)."""
        self.path = path
        self.size = size
        self.limit = limit
        self.what = what
        super().__init__(path, size, limit, what)

    def __str__(self) -> str:
        return f"{self.path!r}: {self.what} size {self.size} bytes is over the {self.limit} limit"


class WorkspaceFileNotFoundError(WorkspaceError, LookupError):
    """Raised when workspace ``workspace`` has no file at ``path``."""

    def __init__(self, workspace: str, path: str) -> None:
        self.workspace = workspace
        self.path = path
        super().__init__(workspace, path)

    def __str__(self) -> str:
        return f"workspace {self.workspace!r} has no file {self.path!r}"
