r"""The wire side of ``HttpRemoteAgentTransport``: bodies, SSE events and error answers.

Pure functions over bytes and ``httpx.Response``\ s (``specs/http.md``), kept
apart from the client's retry and connection logic in ``http.py``.
"""

from __future__ import annotations

from typing import TypeGuard, TypeVar, get_args

import httpx
import msgspec

from helix_agents.errors import AgentServerError, AgentServerErrorCode, TransportError
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
)

from .sse import SSEMessage

__all__ = [
    "decode",
    "encode",
    "event_of",
    "server_error",
    "start_decoder",
    "status_decoder",
]

T = TypeVar("T")


class _ErrorBody(msgspec.Struct):
    error: str
    code: str = ""


_CODES: frozenset[str] = frozenset(get_args(AgentServerErrorCode))
_CODE_BY_STATUS: dict[int, AgentServerErrorCode] = {
    400: "INVALID_REQUEST",
    401: "UNAUTHORIZED",
    403: "UNAUTHORIZED",
    404: "NOT_FOUND",
    405: "METHOD_NOT_ALLOWED",
    409: "ALREADY_RUNNING",
    413: "PAYLOAD_TOO_LARGE",
    422: "INVALID_REQUEST",
}
encode = msgspec.json.Encoder().encode
_error_decoder = msgspec.json.Decoder(_ErrorBody)
_chunk_decoder = msgspec.json.Decoder(ChunkEvent)
_end_decoder = msgspec.json.Decoder(EndEvent)
_failure_decoder = msgspec.json.Decoder(ErrorEvent)
_event_decoder: msgspec.json.Decoder[TransportEvent] = msgspec.json.Decoder(TransportEvent)
start_decoder = msgspec.json.Decoder(RemoteStartResponse)
status_decoder = msgspec.json.Decoder(RemoteStatusResponse)
submit_decoder = msgspec.json.Decoder(SubmitResponse)


def decode(response: httpx.Response, decoder: msgspec.json.Decoder[T]) -> T:
    """A successful answer's body as ``T``; :class:`TransportError` when it is not one."""
    try:
        return decoder.decode(response.content)
    except msgspec.DecodeError as exc:
        request = response.request
        raise TransportError(f"{request.method} {request.url}: unreadable answer: {exc}") from exc


def event_of(message: SSEMessage, url: str) -> TransportEvent | None:
    """The transport event a message carries; ``None`` for an event kind we do not know."""
    try:
        match message.event:
            case "chunk":
                return _chunk_decoder.decode(message.data)
            case "end":
                return _end_decoder.decode(message.data)
            case "error":
                return _failure_decoder.decode(message.data)
            case "message":
                return _event_decoder.decode(message.data)
            case _:
                return None
    except msgspec.DecodeError as exc:
        raise TransportError(f"GET {url}: unreadable {message.event!r} event: {exc}") from exc


def _is_code(value: str) -> TypeGuard[AgentServerErrorCode]:
    return value in _CODES


def server_error(response: httpx.Response) -> AgentServerError:
    """The error a non-2xx answer stands for: its ``code``, or one guessed from the status."""
    status = response.status_code
    fallback: AgentServerErrorCode = _CODE_BY_STATUS.get(
        status, "INVALID_REQUEST" if 400 <= status < 500 else "INTERNAL_ERROR"
    )
    try:
        body = _error_decoder.decode(response.content)
    except msgspec.DecodeError:
        text = _one_line(response.text)[:200]
        detail = f"HTTP {status} {response.reason_phrase}" + (f": {text}" if text else "")
        return AgentServerError(fallback, detail)
    code = body.code if _is_code(body.code) else fallback
    return AgentServerError(code, _one_line(body.error) or f"HTTP {status}")


def _one_line(text: str) -> str:
    return " ".join(text.split())
