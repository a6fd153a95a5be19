"""The remote-agent protocol's messages (camelCase on the wire), shared by every transport.

Requests and responses of ``start``, ``resume``, ``status`` and
``submit-tool-result``, and the three stream events: ``chunk`` (with its
sequence), ``end`` (output and state) and ``error`` (message, recoverable).
"""

from __future__ import annotations

import unicodedata
from typing import Any, Literal, cast

import msgspec

from helix_agents.errors import AgentServerError, UsageError
from helix_agents.events import (
    MULTITASK_CHOICES,
    Chunk,
    Multitask,
    PendingInput,
    Principal,
    SuspensionReason,
    Webhook,
)
from helix_agents.ids import SessionId, validate_session_id
from helix_agents.log.state import RunProblem, SessionStatus, UsageTotals
from helix_agents.messages import UserMessage
from helix_agents.webhooks.outbox import WebhookStatus

__all__ = [
    "ChunkEvent",
    "EndEvent",
    "ErrorEvent",
    "RemoteMessageRequest",
    "RemoteMessageResponse",
    "RemoteResumeRequest",
    "RemoteStartRequest",
    "RemoteStartResponse",
    "RemoteStatusResponse",
    "StoreWait",
    "SubmitApprovalRequest",
    "SubmitResponse",
    "SubmitToolResultRequest",
    "TransportEvent",
    "DECIDED_BY_MAX",
    "checked_decided_by",
    "checked_from_sequence",
    "checked_message_id",
    "checked_messages",
    "checked_multitask",
    "checked_session_id",
    "message_from_input",
]


class _Wire(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Shared configuration of the protocol messages."""


class RemoteStartRequest(_Wire, frozen=True):
    """Start (idempotently) session ``session_id`` running agent ``agent_type``."""

    session_id: str
    agent_type: str
    message: str | list[UserMessage]
    state: dict[str, Any] | None = None
    metadata: dict[str, str] | None = None
    parent_session_id: str | None = None
    root_session_id: str | None = None
    input: Any = None
    parent_tool_call_id: str | None = None
    ancestors: list[str] | None = None
    """Session ids from the root to the parent (root first): the path of pending inputs."""
    workspace_session_id: str | None = None
    """Use this session's workspaces (a sub-agent with ``inherit_workspace``); see
    specs/workspaces.md for when a server accepts it."""
    trace_context: dict[str, str] | None = None
    """The caller's W3C trace context (``traceparent``, ``tracestate``): the session's
    runs are traced as its children (specs/otel.md)."""
    strict: bool | msgspec.UnsetType = msgspec.UNSET
    """Fail each run at its first problem (a tool error, an unknown tool, a failed child,
    a rejected output) instead of showing it to the model; children inherit it. False is kept
    unset (absent on the wire), so a request to a server that does not know it is unchanged."""

    owner: Principal | None = None
    """Who owns the new session (specs/auth.md); a gateway with identities sets or checks
    it from the caller's identity. None: no owner."""

    webhook: Webhook | msgspec.UnsetType | None = msgspec.UNSET
    """Where the session's run ends are POSTed, signed (specs/server.md "Webhooks"): a server
    with a webhook secret checks the URL against its allow-list and records it on
    ``session_created``. Unset (absent on the wire) or None: no webhook."""

    def __post_init__(self) -> None:
        if self.strict is False:
            msgspec.structs.force_setattr(self, "strict", msgspec.UNSET)
        if self.webhook is None:
            msgspec.structs.force_setattr(self, "webhook", msgspec.UNSET)


class RemoteResumeRequest(_Wire, frozen=True):
    """Resume an interrupted or paused session, optionally with a new message."""

    session_id: str
    message: str | list[UserMessage] | None = None


class RemoteMessageRequest(_Wire, frozen=True):
    """A follow-up message for session ``session_id`` (``send_message``).

    A completed session takes it as a new turn (its conversation and state
    kept); an interrupted one resumes with it; a running or paused one queues
    it for its run's next step. ``message_id`` makes it idempotent: a repeat
    with the same id changes nothing and answers the same run.
    """

    session_id: str
    message: str | list[UserMessage]
    message_id: str | None = None
    multitask: Multitask | None = None
    """What the message does to a running or paused session (``steer``, ``enqueue``,
    ``interrupt``, ``rollback``, ``reject``; specs/server.md); None: the agent's default."""


class RemoteMessageResponse(_Wire, frozen=True):
    """Where a follow-up message went: the run it started or, with ``queued``, joined."""

    session_id: str
    stream_id: str
    run_id: str
    queued: bool = False
    multitask: Multitask | None = None
    """With ``queued``: the choice the message took (the request's, or its agent's)."""


class RemoteStartResponse(_Wire, frozen=True):
    """The ids of a started or resumed session; ``stream_id`` is the session id."""

    session_id: str
    stream_id: str
    run_id: str


class StoreWait(_Wire, frozen=True):
    """What a running session waits for: its store, unreachable (``/status``'s ``waiting``)."""

    since: float
    """When the wait began, in seconds since the epoch (as events' ``ts``)."""
    reason: Literal["store_unavailable"] = "store_unavailable"
    message: str = ""


class RemoteStatusResponse(_Wire, frozen=True):
    """A session's status; ``latest_sequence`` is its log's last seq."""

    session_id: str
    run_id: str
    status: SessionStatus
    step_count: int
    is_executing: bool
    stream_id: str
    latest_sequence: int
    output: Any = None
    state: dict[str, Any] | None = None
    error: str | None = None
    suspension: SuspensionReason | None = None
    pending_client_tool_call_ids: list[str] = []
    pending_inputs: list[PendingInput] = []
    awaiting_input: bool = False
    awaiting_client_tool: bool = False
    """Seed 003's name: paused with an open client tool in the session's tree."""
    pending_client_tool_calls: list[PendingInput] = []
    """Seed 003's name: the open client-tool entries of ``pending_inputs``."""
    usage: UsageTotals | None = None
    """The session's own usage (not its children's): a parent's usage rollup reads a
    remote child's here."""
    local_sub_session_ids: list[str] = []
    """The session's children whose logs this server holds (ask it for their status):
    how a parent's usage rollup reaches a remote child's own sub-agents."""
    run_from_sequence: int = 0
    """The ``fromSequence`` that reads the current (last) run only: the log's seq before
    its ``run_started``, 0 for the first run (it began with the session)."""
    problems: list[RunProblem] = []
    """What went wrong in the current turn that the model was shown (tool errors, unknown
    tools, failed children, rejected outputs): a completed run may have some."""
    waiting: StoreWait | msgspec.UnsetType = msgspec.UNSET
    """Present only while the session's run, executing here, waits for its store to come
    back (an outage being waited out): since when, and why. The rest of the answer is
    then the run's state as of its last stored event."""
    webhooks: list[WebhookStatus] | msgspec.UnsetType = msgspec.UNSET
    """Present only for a session started with a webhook: each delivery it owes (one per
    run end its webhook asks about), its attempts, and whether it was delivered."""


class SubmitToolResultRequest(_Wire, frozen=True):
    """A client tool's result (or error) for ``tool_call_id``, submitted at the root."""

    session_id: str
    tool_call_id: str
    result: Any = None
    error: str | None = None


class SubmitApprovalRequest(_Wire, frozen=True):
    """A person's decision on the approval entry ``tool_call_id``, submitted at the root."""

    session_id: str
    tool_call_id: str
    approved: bool
    reason: str | None = None
    decided_by: str | None = None
    """Who decided (a person's name or id; at most :data:`DECIDED_BY_MAX` characters, no
    control characters), recorded on the ``approval_given`` event; ``None``: not said."""


class SubmitResponse(_Wire, frozen=True):
    """The answer to a submission; ``resumed``: the owner got every answer and runs again."""

    ok: bool = True
    resumed: bool = False


class ChunkEvent(_Wire, frozen=True, tag="chunk", tag_field="type"):
    """A stream chunk and its sequence (the seq of the log event holding it)."""

    chunk: Chunk
    sequence: int


class EndEvent(_Wire, frozen=True, tag="end", tag_field="type"):
    """The session completed: its output and custom state. The stream ends."""

    output: Any = None
    state: dict[str, Any] | None = None


class ErrorEvent(_Wire, frozen=True, tag="error", tag_field="type"):
    """The run ended without output (failed, aborted, interrupted). The stream ends."""

    error: str
    recoverable: bool = False


TransportEvent = ChunkEvent | EndEvent | ErrorEvent
"""What a stream yields."""

_MESSAGE_FIELDS = ("message", "query", "text", "content")


def message_from_input(value: Any) -> str:
    """The user message for a sub-agent's input: no field is ever dropped (specs/runtime.md).

    The first of ``message``, ``query``, ``text``, ``content`` that holds a
    string is the message when no other field has a value (absent or null);
    otherwise the message is the whole input as compact JSON.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        for key in _MESSAGE_FIELDS:
            candidate = value.get(key)
            if isinstance(candidate, str):
                others = [v for k, v in value.items() if k != key and v is not None]
                return msgspec.json.encode(value).decode() if others else candidate
    return msgspec.json.encode(value).decode()


def checked_session_id(session_id: object) -> SessionId:
    """``session_id`` if valid, else the protocol's ``INVALID_REQUEST`` error."""
    try:
        return validate_session_id(session_id)
    except UsageError as exc:
        raise AgentServerError("INVALID_REQUEST", str(exc)) from exc


def checked_message_id(message_id: object) -> str:
    """``message_id`` if it is a valid id (as a session id), else ``INVALID_REQUEST``."""
    try:
        return validate_session_id(message_id)
    except UsageError as exc:
        raise AgentServerError(
            "INVALID_REQUEST", str(exc).replace("session id", "message id", 1)
        ) from exc


def checked_multitask(multitask: object) -> Multitask | None:
    """``multitask`` if it is None or a :data:`~helix_agents.events.Multitask`, else
    ``INVALID_REQUEST``."""
    if multitask is None or multitask in MULTITASK_CHOICES:
        return cast("Multitask | None", multitask)
    raise AgentServerError(
        "INVALID_REQUEST",
        f"multitask must be one of {', '.join(MULTITASK_CHOICES)}, not {multitask!r}",
    )


def checked_messages(message: object) -> list[UserMessage]:
    """A follow-up's message as user messages, else ``INVALID_REQUEST`` (empty text included)."""
    if isinstance(message, str):
        messages = [UserMessage(content=message)]
    elif isinstance(message, list) and all(isinstance(m, UserMessage) for m in message):
        messages = list(message)
    else:
        raise AgentServerError(
            "INVALID_REQUEST", "message must be a string or a list of user messages"
        )
    if not messages or any(not m.content.strip() for m in messages):
        raise AgentServerError("INVALID_REQUEST", "message must be non-empty")
    return messages


DECIDED_BY_MAX = 200
"""The longest ``decidedBy`` an approval may carry, in characters."""


def checked_decided_by(decided_by: object) -> str | None:
    """``decided_by`` if it is ``None`` or a fit name, else the protocol's ``INVALID_REQUEST``.

    A fit name is a string of 1 to :data:`DECIDED_BY_MAX` characters, not only
    spaces, without control characters (so it prints on one line in a log or a page).
    """
    if decided_by is None:
        return None
    if not isinstance(decided_by, str):
        raise AgentServerError(
            "INVALID_REQUEST", f"decidedBy must be a string, not {type(decided_by).__name__}"
        )
    if not decided_by.strip():
        raise AgentServerError("INVALID_REQUEST", "decidedBy must not be empty")
    if len(decided_by) > DECIDED_BY_MAX:
        raise AgentServerError(
            "INVALID_REQUEST", f"decidedBy is longer than {DECIDED_BY_MAX} characters"
        )
    if any(unicodedata.category(char) == "Cc" for char in decided_by):
        raise AgentServerError("INVALID_REQUEST", "decidedBy must not hold control characters")
    return decided_by


def checked_from_sequence(from_sequence: object) -> int:
    """``from_sequence`` if it is an int >= 0, else the protocol's ``INVALID_REQUEST`` error."""
    if isinstance(from_sequence, bool) or not isinstance(from_sequence, int) or from_sequence < 0:
        raise AgentServerError(
            "INVALID_REQUEST", f"fromSequence must be an integer >= 0, not {from_sequence!r}"
        )
    return from_sequence
