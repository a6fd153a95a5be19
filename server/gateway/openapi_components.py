"""The components of the OpenAPI document: the protocol's structs as JSON Schemas.

The schemas are generated from the structs the server decodes and encodes,
then sharpened to exactly what the server checks (session ids, sequence
bounds, trace context, follow-up fields). ``openapi_paths.py`` builds the operations on them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from helix_agents.branches.fork import ForkRequest, ForkResult
from helix_agents.errors import HTTP_STATUS
from helix_agents.events import MULTITASK_CHOICES, Chunk
from helix_agents.ids import MAX_SESSION_ID_LENGTH
from helix_agents.log.session_list import SessionListPage
from helix_agents.protocol import (
    DECIDED_BY_MAX,
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitApprovalRequest,
    SubmitResponse,
    SubmitToolResultRequest,
)
from helix_agents.server.streams.front_end_runs import ChatRequest, RunAgentInput
from helix_agents.server.ui.openapi import UI_MODELS
from helix_agents.transports.bodies import SessionRequest

from .crons import CRON_MODELS, cron_schemas
from .memory_bodies import MEMORY_MODELS

__all__ = [
    "ERRORS",
    "ERROR_HEADERS",
    "ErrorBody",
    "MAX_SEQUENCE",
    "SESSION_ID_QUERY",
    "TRACEPARENT_PATTERN",
    "components",
    "decimal_at_most",
    "ref",
]


MAX_SEQUENCE = 2**63 - 1
"""The largest sequence a store can hold, and so the largest cursor a stream takes."""


class ErrorBody(msgspec.Struct, frozen=True):
    """Every failure's body."""

    error: str
    code: str


class _Ok(msgspec.Struct, frozen=True):
    ok: bool


class _Health(msgspec.Struct, frozen=True):
    status: str
    agents: list[str]


class SSEChunk(msgspec.Struct, frozen=True):
    """The data of an SSE ``chunk`` event (its ``id:`` is ``sequence``)."""

    chunk: Chunk
    sequence: int


class SSEEnd(msgspec.Struct, frozen=True):
    """The data of an SSE ``end`` event: the session completed."""

    output: Any
    state: dict[str, Any] | None


class SSEError(msgspec.Struct, frozen=True):
    """The data of an SSE ``error`` event: the run ended without output."""

    error: str
    recoverable: bool


_MODELS: list[type[msgspec.Struct]] = [
    RemoteStartRequest,
    RemoteResumeRequest,
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteStartResponse,
    RemoteStatusResponse,
    SessionRequest,
    SubmitToolResultRequest,
    SubmitApprovalRequest,
    SubmitResponse,
    RunAgentInput,
    ChatRequest,
    ErrorBody,
    _Ok,
    _Health,
    SSEChunk,
    SSEEnd,
    SSEError,
    SessionListPage,
    ForkRequest,
    ForkResult,
    *UI_MODELS,
    *MEMORY_MODELS,
    *CRON_MODELS,
]

_TITLES = {
    "_Ok": "Ok",
    "_Health": "Health",
}

_SESSION_ID_FIELDS = ("sessionId", "parentSessionId", "rootSessionId", "workspaceSessionId")

TRACEPARENT_PATTERN = "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-[ -~]*)?$"
"""A W3C ``traceparent`` as the server checks it (``helix_agents.tracing``)."""

_TRACE_CONTEXT: dict[str, Any] = {
    "description": "The caller's W3C trace context (specs/otel.md): empty, or a traceparent "
    "and an optional tracestate (printable ASCII; one over 512 characters is dropped)",
    "anyOf": [
        {"type": "object", "maxProperties": 0},
        {
            "type": "object",
            "required": ["traceparent"],
            "properties": {
                "traceparent": {"type": "string", "pattern": TRACEPARENT_PATTERN},
                "tracestate": {"type": "string", "pattern": "^[ -~]*$"},
            },
            "additionalProperties": False,
        },
        {"type": "null"},
    ],
    "default": None,
}

ERRORS: dict[str, str] = {
    "400": "INVALID_REQUEST: malformed JSON, a missing or mistyped field, a bad session id or "
    "query parameter, JSON nested deeper than 64 levels",
    "401": "UNAUTHORIZED: missing or refused bearer token",
    "403": "FORBIDDEN: the identity may not change sessions (a `reader`; specs/auth.md)",
    "404": "NOT_FOUND: unknown agent type, session, route or tool call; a session of another "
    "tenant is answered so too (specs/auth.md)",
    "405": "METHOD_NOT_ALLOWED: `Allow` lists the methods of the route",
    "409": "ALREADY_RUNNING, ALREADY_COMPLETED, ALREADY_ANSWERED, SESSION_FAILED or "
    "SESSION_BUSY (a message mid-run whose multitask is reject)",
    "413": "PAYLOAD_TOO_LARGE: body over the server's limit",
    "500": "INTERNAL_ERROR: the server's trouble (the text never carries internals)",
    "503": "UNAVAILABLE: the server is at a limit; `Retry-After` says when to try again",
}

ERROR_HEADERS: dict[str, tuple[str, str]] = {
    "401": ("WWW-Authenticate", 'The bearer challenge: `Bearer realm="helix-agents"`'),
    "405": ("Allow", "The methods the route answers, comma-separated"),
    "503": ("Retry-After", "Seconds to wait before trying again"),
}


def decimal_at_most(limit: int) -> str:
    """A regular expression matching the decimals from 0 to ``limit`` (leading zeros allowed)."""
    digits = str(limit)
    shorter = f"[0-9]{{1,{len(digits) - 1}}}" if len(digits) > 1 else None
    same_length = [digits]
    for index, digit in enumerate(digits):
        if digit != "0":
            rest = len(digits) - index - 1
            tail = f"[0-9]{{{rest}}}" if rest else ""
            below = "0" if digit == "1" else f"[0-{int(digit) - 1}]"
            same_length.append(f"{digits[:index]}{below}{tail}")
    branches = [*([shorter] if shorter else []), *same_length]
    return f"^0*(?:{'|'.join(branches)})$"


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def components() -> dict[str, Any]:
    _, components = msgspec.json.schema_components(
        _MODELS, ref_template="#/components/schemas/{name}"
    )
    for name, title in _TITLES.items():
        components[name]["title"] = title
    components["SessionId"] = {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_SESSION_ID_LENGTH,
        "pattern": "^[A-Za-z0-9_.:-]+$",
        "description": "A session id: 1-256 characters from A-Z a-z 0-9 _ - . :",
    }
    components["ErrorBody"]["properties"]["code"] = {"enum": sorted(HTTP_STATUS)}
    _webhooks(components)
    cron_schemas(components)  # before the loop below sharpens CronStart's session ids
    for schema in components.values():
        properties = schema.get("properties", {})
        for field in _SESSION_ID_FIELDS:
            if field in properties:
                properties[field] = _as_session_id(properties[field])
        if schema.get("title") in ("RunAgentInput", "ChatRequest"):
            _front_end_run(schema)
        if schema.get("title") in ("RemoteMessageRequest", "CronTurn"):
            _follow_up(properties)
            if schema["title"] == "CronTurn":  # each tick's message id is the tick's
                del properties["messageId"]
        if schema.get("title") == "SubmitApprovalRequest":
            properties["decidedBy"] = _DECIDED_BY
        if "traceContext" in properties:
            properties["traceContext"] = _TRACE_CONTEXT
        if "ancestors" in properties:
            properties["ancestors"]["anyOf"][0]["items"] = ref("SessionId")
    components["SSEEvent"] = {
        "title": "SSEEvent",
        "description": (
            "One event of the text/event-stream (`id:`, `event:`, `data:` fields; `:heartbeat` "
            "comments are not events). Chunks first, then at most one `end` or `error`, after "
            "which the stream ends (specs/http.md). `id` is the chunk's sequence; an `end` or "
            "`error` has none of its own (a reader keeps the last one)."
        ),
        "oneOf": [
            _sse_event("chunk", "SSEChunk", id_required=True),
            _sse_event("end", "SSEEnd", id_required=False),
            _sse_event("error", "SSEError", id_required=False),
        ],
    }
    components["FrontEndEvent"] = {
        "title": "FrontEndEvent",
        "description": (
            "One event of a front-end stream (`format=ai-sdk` or `ag-ui`, specs/streams.md): "
            "`data:` (JSON, or `[DONE]` at the end of an AI SDK stream) and an `id:`, the "
            "sequence it resumes from; no `event:` field, so its type is SSE's default, "
            "`message`, which the protocol's own stream never uses"
        ),
        "type": "object",
        "required": ["data"],
        "properties": {
            "event": {"const": "message"},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "data": {"type": "string"},
        },
    }
    return components


def _webhooks(components: dict[str, Any]) -> None:
    """What a start's ``webhook`` and a status's ``webhooks`` are (specs/server.md "Webhooks")."""
    webhook = components["Webhook"]["properties"]
    webhook["url"] |= {
        "maxLength": 2048,
        "description": "http or https; checked against the "
        "server's allow-list at the start and before each attempt",
    }
    webhook["events"] |= {
        "minItems": 1,
        "description": "which run ends are POSTed (default: all three)",
    }
    components["RemoteStartRequest"]["properties"]["webhook"]["description"] = (
        "Where the session's run ends are POSTed, signed with the server's secret (at least "
        "once, retried with backoff); a server without a webhook secret, or a URL whose host "
        "is or resolves to a loopback, private, link-local, multicast, reserved or unspecified "
        "address it does not allow, is INVALID_REQUEST (400), and nothing is written"
    )
    components["RemoteStatusResponse"]["properties"]["webhooks"]["description"] = (
        "Present only for a session started with a webhook: each delivery it owes (one per "
        "run end its webhook asks about), its attempts, whether it was delivered or given up"
    )


def _sse_event(name: str, data: str, *, id_required: bool) -> dict[str, Any]:
    """The SSE event ``name``: its ``data`` is JSON of the component ``data``."""
    return {
        "type": "object",
        "required": ["event", "data", *(["id"] if id_required else [])],
        "properties": {
            "event": {"const": name},
            "id": {"type": "string", "pattern": "^[0-9]+$"},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": ref(data),
            },
        },
    }


_NOT_BLANK = (
    "[^\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
"""A character that is not whitespace to Python's ``str.strip`` (which the server uses)."""


_DECIDED_BY = {
    "anyOf": [
        {
            "type": "string",
            "minLength": 1,
            "maxLength": DECIDED_BY_MAX,
            "pattern": (
                "^[^\\x00-\\x1f\\x7f-\\x9f]*"
                "[^\\x00-\\x20\\x7f-\\xa0\\u1680\\u2000-\\u200a"
                "\\u2028\\u2029\\u202f\\u205f\\u3000]"
                "[^\\x00-\\x1f\\x7f-\\x9f]*$"
            ),
        },
        {"type": "null"},
    ],
    "default": None,
    "description": (
        f"Who decided: 1 to {DECIDED_BY_MAX} characters, not only spaces, no control characters "
        "(`checked_decided_by`); recorded on the `approval_given` event"
    ),
}
"""``decidedBy`` as the server checks it: not blank, no control character (``Cc``)."""


def _follow_up(properties: dict[str, Any]) -> None:
    """``/message``'s body as the server checks it: a message that is not blank, an id."""
    text = {"type": "string", "pattern": _NOT_BLANK}
    item = {
        "type": "object",
        "required": ["role", "content"],
        "properties": {"role": {"enum": ["user"]}, "content": text},
    }
    properties["message"] = {"anyOf": [text, {"type": "array", "minItems": 1, "items": item}]}
    properties["messageId"] = {"anyOf": [ref("SessionId"), {"type": "null"}], "default": None}


def _as_session_id(prop: dict[str, Any]) -> dict[str, Any]:
    """A ``string`` (or ``string | null``) property as a checked session id."""
    if "anyOf" in prop:
        branches = [
            ref("SessionId") if branch == {"type": "string"} else branch for branch in prop["anyOf"]
        ]
        return {**prop, "anyOf": branches}
    return ref("SessionId")


SESSION_ID_QUERY: dict[str, Any] = {
    "name": "sessionId",
    "in": "query",
    "required": True,
    "schema": ref("SessionId"),
}

_USER_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {"role": {"const": "user"}},
}


def _front_end_run(schema: dict[str, Any]) -> None:
    """A ``POST /sse`` body's checks: its session id, and something to run with.

    The server reads the body as whichever shape it fits (``server/streams/front_end_runs.py``):
    a chat needs a user message, an AG-UI run one or ``resume`` answers.
    """
    properties = schema["properties"]
    for field in ("threadId", "id"):
        if field in properties:
            properties[field] = ref("SessionId")  # checked as a session id
    said = {"required": ["messages"], "properties": {"messages": {"contains": _USER_MESSAGE}}}
    if schema["title"] == "ChatRequest":
        schema["allOf"] = [said]
        properties["multitask"] = {  # checked as /message's (specs/server.md)
            "anyOf": [{"enum": list(MULTITASK_CHOICES)}, {"type": "null"}],
            "default": None,
        }
        properties["trigger"] = {
            "enum": ["submit-message"],
            "default": "submit-message",
            "description": "regenerate-message is not supported",
        }
    else:
        answers = {"required": ["resume"], "properties": {"resume": {"minItems": 1}}}
        schema["anyOf"] = [said, answers]
