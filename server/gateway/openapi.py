"""The OpenAPI document of the HTTP protocol, generated from the protocol's structs.

``python -m helix_agents.server openapi > specs/openapi.json`` writes it; a test
fails when the committed file, or the app's routes, differ from it. The app
serves it at ``GET /openapi.json`` (without ``security`` when it has no auth).
It is meant to be exactly what the server checks: session ids, sequence
bounds, the ``Last-Event-ID`` format, which headers an error carries, and the
links a client follows from a started session to the routes about it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from helix_agents.errors import HTTP_STATUS
from helix_agents.events import Chunk
from helix_agents.ids import MAX_SESSION_ID_LENGTH
from helix_agents.log.session_list import MAX_PAGE_SIZE, SessionListPage
from helix_agents.protocol import (
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
from helix_agents.server.ui.openapi import UI_MODELS, ui_paths
from helix_agents.transports.bodies import SessionRequest

__all__ = [
    "MAX_SEQUENCE",
    "TRACEPARENT_PATTERN",
    "ErrorBody",
    "decimal_at_most",
    "openapi_document",
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
    *UI_MODELS,
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

_ERRORS: dict[str, str] = {
    "400": "INVALID_REQUEST: malformed JSON, a missing or mistyped field, a bad session id or "
    "query parameter, JSON nested deeper than 64 levels",
    "401": "UNAUTHORIZED: missing or refused bearer token",
    "404": "NOT_FOUND: unknown agent type, session, route or tool call",
    "405": "METHOD_NOT_ALLOWED: `Allow` lists the methods of the route",
    "409": "ALREADY_RUNNING, ALREADY_COMPLETED, ALREADY_ANSWERED or SESSION_FAILED",
    "413": "PAYLOAD_TOO_LARGE: body over the server's limit",
    "500": "INTERNAL_ERROR: the server's trouble (the text never carries internals)",
    "503": "UNAVAILABLE: the server is at a limit; `Retry-After` says when to try again",
}

_ERROR_HEADERS: dict[str, tuple[str, str]] = {
    "401": ("WWW-Authenticate", 'The bearer challenge: `Bearer realm="helix-agents"`'),
    "405": ("Allow", "The methods the route answers, comma-separated"),
    "503": ("Retry-After", "Seconds to wait before trying again"),
}

_POST_ERRORS = ("400", "401", "404", "405", "409", "413", "500", "503")
_GET_ERRORS = ("400", "401", "404", "405", "500", "503")
_OPEN_ERRORS = ("405", "503")


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


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json_body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _errors(statuses: tuple[str, ...], *, auth: bool) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for status in statuses:
        if status == "401" and not auth:
            continue
        answer: dict[str, Any] = {
            "description": _ERRORS[status],
            "content": {"application/json": {"schema": _ref("ErrorBody")}},
        }
        if status in _ERROR_HEADERS:
            name, description = _ERROR_HEADERS[status]
            answer["headers"] = {
                name: {"description": description, "required": True, "schema": {"type": "string"}}
            }
        answers[status] = answer
    return answers


def _ok(name: str, description: str, links: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": _ref(name)}},
    }
    if links:
        answer["links"] = links
    return answer


def _session_list_query() -> list[dict[str, Any]]:
    def query(name: str, schema: dict[str, Any], description: str) -> dict[str, Any]:
        return {
            "name": name,
            "in": "query",
            "required": False,
            "schema": schema,
            "description": description,
        }

    statuses = ["running", "completed", "failed", "interrupted", "paused"]
    return [
        query("status", {"type": "string", "enum": statuses}, "Only sessions with this status"),
        query("agent", {"type": "string"}, "Only sessions of this agent type"),
        query("topLevel", {"type": "boolean"}, "Only sessions without a parent"),
        query(
            "limit",
            {"type": "integer", "minimum": 1, "maximum": MAX_PAGE_SIZE, "default": 50},
            "Sessions per page",
        ),
        query("cursor", {"type": "string"}, "A previous page's nextCursor: the page after it"),
    ]


def _session_links() -> dict[str, Any]:
    """From an answer naming a session (``start``, ``resume``) to the routes about it."""
    by_query = {"parameters": {"query.sessionId": "$response.body#/sessionId"}}
    by_body = {"requestBody": {"sessionId": "$response.body#/sessionId"}}
    return {
        "status": {"operationId": "status", **by_query},
        "sse": {"operationId": "sse", **by_query},
        "interrupt": {"operationId": "interrupt", **by_body},
        "abort": {"operationId": "abort", **by_body},
        "resume": {"operationId": "resume", **by_body},
    }


def _components() -> dict[str, Any]:
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
    for schema in components.values():
        properties = schema.get("properties", {})
        for field in _SESSION_ID_FIELDS:
            if field in properties:
                properties[field] = _as_session_id(properties[field])
        if schema.get("title") in ("RunAgentInput", "ChatRequest"):
            _front_end_run(schema)
        if schema.get("title") == "RemoteMessageRequest":
            _follow_up(properties)
        if "traceContext" in properties:
            properties["traceContext"] = _TRACE_CONTEXT
        if "ancestors" in properties:
            properties["ancestors"]["anyOf"][0]["items"] = _ref("SessionId")
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
                "contentSchema": _ref(data),
            },
        },
    }


_NOT_BLANK = (
    "[^\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a"
    "\\u2028\\u2029\\u202f\\u205f\\u3000]"
)
"""A character that is not whitespace to Python's ``str.strip`` (which the server uses)."""


def _follow_up(properties: dict[str, Any]) -> None:
    """``/message``'s body as the server checks it: a message that is not blank, an id."""
    text = {"type": "string", "pattern": _NOT_BLANK}
    item = {
        "type": "object",
        "required": ["role", "content"],
        "properties": {"role": {"enum": ["user"]}, "content": text},
    }
    properties["message"] = {"anyOf": [text, {"type": "array", "minItems": 1, "items": item}]}
    properties["messageId"] = {"anyOf": [_ref("SessionId"), {"type": "null"}], "default": None}


def _as_session_id(prop: dict[str, Any]) -> dict[str, Any]:
    """A ``string`` (or ``string | null``) property as a checked session id."""
    if "anyOf" in prop:
        branches = [
            _ref("SessionId") if branch == {"type": "string"} else branch
            for branch in prop["anyOf"]
        ]
        return {**prop, "anyOf": branches}
    return _ref("SessionId")


_SESSION_ID_QUERY: dict[str, Any] = {
    "name": "sessionId",
    "in": "query",
    "required": True,
    "schema": _ref("SessionId"),
}

_OPEN_UI_PATHS = ("/ui", "/ui/assets/{name}")


_USER_MESSAGE = {
    "type": "object",
    "required": ["role"],
    "properties": {"role": {"const": "user"}},
}


def _front_end_run(schema: dict[str, Any]) -> None:
    """A ``POST /sse`` body's checks: its session id, and something to run with.

    The server reads the body as whichever shape it fits (``server/ui_runs.py``):
    a chat needs a user message, an AG-UI run one or ``resume`` answers.
    """
    properties = schema["properties"]
    for field in ("threadId", "id"):
        if field in properties:
            properties[field] = _ref("SessionId")  # checked as a session id
    said = {"required": ["messages"], "properties": {"messages": {"contains": _USER_MESSAGE}}}
    if schema["title"] == "ChatRequest":
        schema["allOf"] = [said]
        properties["trigger"] = {
            "enum": ["submit-message"],
            "default": "submit-message",
            "description": "regenerate-message is not supported",
        }
    else:
        answers = {"required": ["resume"], "properties": {"resume": {"minItems": 1}}}
        schema["anyOf"] = [said, answers]


def _ui_paths(*, auth: bool) -> dict[str, Any]:
    """The inspector's paths (``server/ui``), with this document's parameters and answers."""

    def session_query(*extra: dict[str, Any]) -> list[dict[str, Any]]:
        return [_SESSION_ID_QUERY, *extra]

    def answers(name: str, description: str) -> dict[str, Any]:
        return {"200": _ok(name, description), **_errors(_GET_ERRORS, auth=auth)}

    paths = ui_paths(session_query, answers)
    for path, item in paths.items():
        for operation in item.values():
            if path in _OPEN_UI_PATHS:
                operation["security"] = []
                operation["responses"].update(_errors(_OPEN_ERRORS, auth=auth))
            elif auth:
                operation["security"] = [{"bearer": []}]
    return paths


def openapi_document(*, auth: bool = True) -> dict[str, Any]:
    """The protocol as an OpenAPI 3.1 document.

    Args:
        auth: the server needs a bearer token (every operation but ``/health``
            and ``/openapi.json`` declares ``security`` and a ``401``); the
            committed ``specs/openapi.json`` is the document with auth.
    """
    security: dict[str, Any] = {"security": [{"bearer": []}]} if auth else {}
    post = {
        "/start": (
            "start",
            "RemoteStartRequest",
            "RemoteStartResponse",
            "Start a session (idempotent)",
        ),
        "/resume": ("resume", "RemoteResumeRequest", "RemoteStartResponse", "Resume a session"),
        "/message": (
            "message",
            "RemoteMessageRequest",
            "RemoteMessageResponse",
            "Send a follow-up message (a new turn of a completed session; idempotent per "
            "messageId)",
        ),
        "/interrupt": ("interrupt", "SessionRequest", "_Ok", "Interrupt a session (soft stop)"),
        "/abort": ("abort", "SessionRequest", "_Ok", "Abort a session (hard stop)"),
        "/submit-tool-result": (
            "submitToolResult",
            "SubmitToolResultRequest",
            "SubmitResponse",
            "Answer a client tool call anywhere in the tree (at the root)",
        ),
        "/submit-approval": (
            "submitApproval",
            "SubmitApprovalRequest",
            "SubmitResponse",
            "Approve or deny a gated call anywhere in the tree (at the root)",
        ),
    }
    paths: dict[str, Any] = {}
    for path, (operation_id, request, response, summary) in post.items():
        links = _session_links() if path in ("/start", "/resume") else None
        paths[path] = {
            "post": {
                "operationId": operation_id,
                "summary": summary,
                **security,
                "requestBody": _json_body(request),
                "responses": {
                    "200": _ok(response, summary, links),
                    **_errors(_POST_ERRORS, auth=auth),
                },
            }
        }
    session_id = _SESSION_ID_QUERY
    from_sequence = {
        "name": "fromSequence",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE},
        "description": "Yield chunks with sequence > this (else the Last-Event-ID header, else 0)",
    }
    last_event_id = {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "schema": {"type": "string", "pattern": f"^$|{decimal_at_most(MAX_SEQUENCE)}"},
        "description": (
            "The last `id:` received: a decimal from 0 to 2^63-1 (fromSequence wins); "
            "empty: none received yet, as if absent"
        ),
    }
    stream_format = {
        "name": "format",
        "in": "query",
        "required": False,
        "schema": {"type": "string", "enum": ["helix", "ai-sdk", "ag-ui"], "default": "helix"},
        "description": (
            "helix: the protocol's stream; ai-sdk: an AI SDK UI message stream "
            "(header x-vercel-ai-ui-message-stream: v1); ag-ui: AG-UI events; "
            "each resumable by the same ids (specs/streams.md)"
        ),
    }
    paths["/sse"] = {
        "get": {
            "operationId": "sse",
            "summary": "Stream a session's chunks, then end or error",
            **security,
            "parameters": [session_id, from_sequence, last_event_id, stream_format],
            "responses": {
                "200": {
                    "description": "the event stream",
                    "content": {
                        "text/event-stream": {
                            "schema": {"oneOf": [_ref("SSEEvent"), _ref("FrontEndEvent")]}
                        }
                    },
                },
                **_errors(_GET_ERRORS, auth=auth),
            },
        },
        "post": {
            "operationId": "sseRun",
            "summary": "A run a front end asks for (AG-UI's RunAgentInput, or useChat's "
            "{id, messages, trigger}): start, resume or answer the session, then stream "
            "that run; a known session's new message is the body's last, if the user's: "
            "without one (or with no text) it streams its current run (specs/streams.md)",
            "parameters": [
                {**stream_format, "required": True, "schema": {"enum": ["ag-ui", "ai-sdk"]}},
                {
                    "name": "agentType",
                    "in": "query",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "The agent of a new session (else the body's)",
                },
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        # Either shape under either format: the server reads the one it fits.
                        "schema": {"anyOf": [_ref("RunAgentInput"), _ref("ChatRequest")]}
                    }
                },
            },
            **security,
            "responses": {
                "200": {
                    "description": "the run's stream",
                    "content": {"text/event-stream": {"schema": _ref("FrontEndEvent")}},
                },
                **_errors(_POST_ERRORS, auth=auth),
            },
        },
    }
    paths["/status"] = {
        "get": {
            "operationId": "status",
            "summary": "A session's status",
            **security,
            "parameters": [session_id],
            "responses": {
                "200": _ok("RemoteStatusResponse", "the status"),
                **_errors(_GET_ERRORS, auth=auth),
            },
        }
    }
    paths["/sessions"] = {
        "get": {
            "operationId": "sessions",
            "summary": "The sessions, newest first, filtered and paged (specs/http.md)",
            **security,
            "parameters": _session_list_query(),
            "responses": {
                "200": _ok("SessionListPage", "a page of sessions"),
                **_errors(_GET_ERRORS, auth=auth),
            },
        }
    }
    paths["/health"] = {
        "get": {
            "operationId": "health",
            "summary": "Liveness and the agent types served (never needs auth)",
            "security": [],
            "responses": {"200": _ok("_Health", "ok"), **_errors(_OPEN_ERRORS, auth=auth)},
        }
    }
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document (never needs auth)",
            "security": [],
            "responses": {
                "200": {
                    "description": "the OpenAPI document",
                    "content": {"application/json": {"schema": {"type": "object"}}},
                },
                **_errors(_OPEN_ERRORS, auth=auth),
            },
        }
    }
    paths.update(_ui_paths(auth=auth))
    schemes = {"bearer": {"type": "http", "scheme": "bearer"}} if auth else {}
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "helix-agents remote agent protocol",
            "version": "1",
            "description": "specs/http.md. Bodies nested deeper than 64 levels are refused (400).",
        },
        "paths": paths,
        "components": {"schemas": _components(), "securitySchemes": schemes},
    }
