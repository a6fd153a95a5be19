"""A2A wire helpers shared by both sides of the bridge: parts, metadata, errors.

A2A 1.0 messages are protobuf objects (``a2a.types``); JSON values travel in
them as ``google.protobuf.Value``, where every number is a double. Values
coming back from A2A go through :func:`plain`, which turns integral doubles
back into ints (``3.0`` becomes ``3``), so a helix output survives the trip.
Chunks in our extension's metadata travel as JSON text instead, exactly.

Errors: the bridge's A2A errors carry the helix protocol code in their data
(``{"helixCode": "ALREADY_ANSWERED"}``), so a helix client maps them back to
the same :class:`~helix_agents.errors.AgentServerError` (:func:`a2a_error`,
:func:`server_error`).
"""

from __future__ import annotations

import hashlib
from typing import Any

from a2a.types import Message, Part, TaskState
from a2a.utils.errors import (
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from google.protobuf import json_format, struct_pb2

from helix_agents.errors import AgentServerError, AgentServerErrorCode

__all__ = [
    "EXTENSION_URI",
    "FROM_SEQUENCE_HEADER",
    "INTERRUPTED_STATES",
    "TERMINAL_STATES",
    "a2a_error",
    "data_part",
    "helix_metadata",
    "metadata_of",
    "plain",
    "part_value",
    "safe_id",
    "server_error",
    "struct_of",
    "text_of",
    "text_part",
]

EXTENSION_URI = "https://helix-agents.dev/a2a/log/v1"
"""Our A2A extension (specs/a2a.md): log sequences and chunks in event metadata, replay."""

FROM_SEQUENCE_HEADER = "Helix-From-Sequence"
"""The extension's request header on ``SubscribeToTask``: replay the log after this sequence."""

TERMINAL_STATES = frozenset(
    {
        TaskState.TASK_STATE_COMPLETED,
        TaskState.TASK_STATE_FAILED,
        TaskState.TASK_STATE_CANCELED,
        TaskState.TASK_STATE_REJECTED,
    }
)
"""Task states no later state follows."""

INTERRUPTED_STATES = frozenset(
    {TaskState.TASK_STATE_INPUT_REQUIRED, TaskState.TASK_STATE_AUTH_REQUIRED}
)
"""Task states that wait for the client: a stream closes after them."""

_MAX_EXACT = 2**53


def plain(value: Any) -> Any:
    """``value`` from a protobuf ``Value`` with integral doubles made ints again."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= _MAX_EXACT:
        return int(value)
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


def text_part(text: str) -> Part:
    """A text part."""
    return Part(text=text)


def data_part(value: Any) -> Part:
    """A data part holding the JSON value ``value``."""
    holder = struct_pb2.Value()
    json_format.ParseDict(value, holder)
    return Part(data=holder, media_type="application/json")


def part_value(part: Part) -> Any:
    """The JSON value of a data part (ints restored)."""
    return plain(json_format.MessageToDict(part.data))


def struct_of(value: dict[str, Any]) -> struct_pb2.Struct:
    """A protobuf ``Struct`` holding ``value``."""
    holder = struct_pb2.Struct()
    holder.update(value)
    return holder


def metadata_of(metadata: struct_pb2.Struct) -> dict[str, Any]:
    """An A2A metadata object as a plain dict (ints restored)."""
    if not metadata.fields:
        return {}
    found = plain(json_format.MessageToDict(metadata))
    return found if isinstance(found, dict) else {}


def helix_metadata(metadata: struct_pb2.Struct) -> dict[str, Any]:
    """The ``helix`` entry of an A2A metadata object (empty when absent or not an object)."""
    if "helix" not in metadata.fields:
        return {}
    found = metadata_of(metadata).get("helix")
    return found if isinstance(found, dict) else {}


def text_of(message: Message) -> str:
    """The text parts of ``message``, joined by newlines."""
    return "\n".join(part.text for part in message.parts if part.WhichOneof("content") == "text")


def safe_id(raw: str, prefix: str) -> str:
    """``raw`` if it is a valid helix id, else ``prefix`` and a digest of it (stable)."""
    if raw and len(raw) <= 200 and all(c.isascii() and (c.isalnum() or c in "_-.:") for c in raw):
        return raw
    return f"{prefix}{hashlib.sha256(raw.encode()).hexdigest()[:40]}"


# --- errors --------------------------------------------------------------------------

_BY_CODE: dict[str, type[A2AError]] = {
    "NOT_FOUND": InvalidParamsError,
    "INVALID_REQUEST": InvalidParamsError,
    "ALREADY_ANSWERED": InvalidParamsError,
    "ALREADY_RUNNING": InvalidParamsError,
    "ALREADY_COMPLETED": UnsupportedOperationError,
    "SESSION_FAILED": UnsupportedOperationError,
    "PAYLOAD_TOO_LARGE": InvalidRequestError,
    "FORBIDDEN": InvalidRequestError,  # an identity that may only read (specs/auth.md)
}


def a2a_error(exc: AgentServerError, *, task: bool = False) -> A2AError:
    """The A2A error for a helix refusal; ``task``: a ``NOT_FOUND`` names a task."""
    kind: type[A2AError]
    if task and exc.code == "NOT_FOUND":
        kind = TaskNotFoundError
    else:
        kind = _BY_CODE.get(exc.code, InternalError)
    return kind(exc.message, data={"helixCode": exc.code})


_CODES: tuple[AgentServerErrorCode, ...] = (
    "NOT_FOUND",
    "ALREADY_RUNNING",
    "ALREADY_COMPLETED",
    "ALREADY_ANSWERED",
    "SESSION_FAILED",
    "INVALID_REQUEST",
    "INTERNAL_ERROR",
    "UNAUTHORIZED",
    "FORBIDDEN",
    "PAYLOAD_TOO_LARGE",
    "UNAVAILABLE",
)


def server_error(exc: A2AError) -> AgentServerError:
    """The helix refusal an A2A error stands for (our code when the peer sent one)."""
    data = exc.data if isinstance(exc.data, dict) else {}
    given = data.get("helixCode")
    code: AgentServerErrorCode
    if isinstance(given, str) and given in _CODES:
        code = next(c for c in _CODES if c == given)
    elif isinstance(exc, TaskNotFoundError):
        code = "NOT_FOUND"
    elif isinstance(exc, TaskNotCancelableError | UnsupportedOperationError):
        code = "ALREADY_COMPLETED"
    elif isinstance(exc, InvalidParamsError | InvalidRequestError | ContentTypeNotSupportedError):
        code = "INVALID_REQUEST"
    else:
        code = "INTERNAL_ERROR"
    return AgentServerError(code, exc.message)
