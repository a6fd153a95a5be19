"""The OpenAPI operations of the gateway's routes, one per entry of ``routes.py``'s table.

Each is built from the protocol's structs (``openapi_components.py``), then
states what the server checks that the structs do not: session ids, sequence
bounds, the ``Last-Event-ID`` format, which headers an error carries, and the
links a client follows from a started session to the routes about it. An
operation takes ``auth``: whether the server needs a bearer token (then it
declares ``security`` and a ``401``). ``openapi.py`` assembles the document.
"""

from __future__ import annotations

from typing import Any, Protocol

from helix_agents.log.search import (
    MAX_METADATA_FILTERS,
    MAX_METADATA_VALUE,
    MAX_QUERY_CHARS,
    MAX_TIME,
)
from helix_agents.log.session_list import MAX_PAGE_SIZE
from helix_agents.server.ui.openapi import ui_paths

from .openapi_components import (
    ERROR_HEADERS,
    ERRORS,
    MAX_SEQUENCE,
    SESSION_ID_QUERY,
    decimal_at_most,
    ref,
)

__all__ = [
    "ABORT",
    "INTERRUPT",
    "MESSAGE",
    "RESUME",
    "FORK",
    "START",
    "SUBMIT_APPROVAL",
    "SUBMIT_TOOL_RESULT",
    "Operation",
    "Post",
    "error_answers",
    "health",
    "json_answer",
    "json_body",
    "openapi",
    "security",
    "sessions",
    "sse",
    "sse_run",
    "status",
    "ui_operation",
]


class Operation(Protocol):
    """A route's OpenAPI operation object, for a server with or without auth."""

    def __call__(self, *, auth: bool) -> dict[str, Any]: ...


_POST_ERRORS = ("400", "401", "403", "404", "405", "409", "413", "500", "503")
_GET_ERRORS = ("400", "401", "404", "405", "500", "503")
_OPEN_ERRORS = ("405", "503")


def _json_body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": ref(name)}}}


def _errors(statuses: tuple[str, ...], *, auth: bool) -> dict[str, Any]:
    answers: dict[str, Any] = {}
    for status in statuses:
        if status in ("401", "403") and not auth:
            continue
        answer: dict[str, Any] = {
            "description": ERRORS[status],
            "content": {"application/json": {"schema": ref("ErrorBody")}},
        }
        if status in ERROR_HEADERS:
            name, description = ERROR_HEADERS[status]
            answer["headers"] = {
                name: {"description": description, "required": True, "schema": {"type": "string"}}
            }
        answers[status] = answer
    return answers


def _ok(name: str, description: str, links: dict[str, Any] | None = None) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "description": description,
        "content": {"application/json": {"schema": ref(name)}},
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
    time = {
        "anyOf": [
            {"type": "number", "minimum": -MAX_TIME, "maximum": MAX_TIME},
            {"type": "string", "format": "date-time"},
        ]
    }
    return [
        query("status", {"type": "string", "enum": statuses}, "Only sessions with this status"),
        query("agent", {"type": "string"}, "Only sessions of this agent type"),
        query("topLevel", {"type": "boolean"}, "Only sessions without a parent"),
        query(
            "q",
            {"type": "string", "maxLength": MAX_QUERY_CHARS},
            "Text search over the messages, input and output: each word (a run of letters and "
            "digits) must begin a word of the session; no word at all is no search",
        ),
        query(
            "metadata.{key}",
            {"type": "string", "maxLength": MAX_METADATA_VALUE},
            f"Repeatable, one per key (at most {MAX_METADATA_FILTERS}): metadata.KEY=VALUE keeps "
            "sessions whose metadata KEY equals VALUE",
        ),
        *(
            query(name, time, f"{what} (epoch seconds or ISO 8601; naive is UTC)")
            for name, what in (
                ("createdAfter", "Only sessions created at or after this time"),
                ("createdBefore", "Only sessions created before this time"),
                ("updatedAfter", "Only sessions whose last event is at or after this time"),
                ("updatedBefore", "Only sessions whose last event is before this time"),
            )
        ),
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


_OPEN_UI_PATHS = ("/ui", "/ui/assets/{name}", "/ui/diff")


def _ui_paths(*, auth: bool) -> dict[str, Any]:
    """The inspector's paths (``server/ui``), with this document's parameters and answers."""

    def session_query(*extra: dict[str, Any]) -> list[dict[str, Any]]:
        return [SESSION_ID_QUERY, *extra]

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


def _security(auth: bool) -> dict[str, Any]:
    return {"security": [{"bearer": []}]} if auth else {}


def security(auth: bool) -> dict[str, Any]:
    """An operation's ``security`` (a bearer token) when the server has auth."""
    return _security(auth)


def json_body(name: str) -> dict[str, Any]:
    """A required JSON request body of component ``name``."""
    return _json_body(name)


def json_answer(name: str, description: str) -> dict[str, Any]:
    """A JSON answer of component ``name``."""
    return _ok(name, description)


def error_answers(statuses: tuple[str, ...], *, auth: bool) -> dict[str, Any]:
    """The error answers of ``statuses`` (``401``/``403`` only with auth)."""
    return _errors(statuses, auth=auth)


class Post:
    """A ``POST`` operation: a JSON body in, a JSON answer out.

    Args:
        operation_id: the operation's id (links name it).
        request: the component of the body.
        response: the component of the ``200`` answer.
        summary: what it does (the ``200``'s description too).
        links: whether its answer links to the session's routes (``start``, ``resume``).
    """

    def __init__(
        self, operation_id: str, request: str, response: str, summary: str, *, links: bool = False
    ) -> None:
        self.operation_id = operation_id
        self.request = request
        self.response = response
        self.summary = summary
        self.links = links

    def __call__(self, *, auth: bool) -> dict[str, Any]:
        links = _session_links() if self.links else None
        return {
            "operationId": self.operation_id,
            "summary": self.summary,
            **_security(auth),
            "requestBody": _json_body(self.request),
            "responses": {
                "200": _ok(self.response, self.summary, links),
                **_errors(_POST_ERRORS, auth=auth),
            },
        }


START = Post(
    "start", "RemoteStartRequest", "RemoteStartResponse", "Start a session (idempotent)", links=True
)
RESUME = Post(
    "resume", "RemoteResumeRequest", "RemoteStartResponse", "Resume a session", links=True
)
MESSAGE = Post(
    "message",
    "RemoteMessageRequest",
    "RemoteMessageResponse",
    "Send a follow-up message (a new turn of a completed session; to a running or paused one, "
    "what its multitask says; idempotent per messageId)",
)
INTERRUPT = Post("interrupt", "SessionRequest", "_Ok", "Interrupt a session (soft stop)")
ABORT = Post("abort", "SessionRequest", "_Ok", "Abort a session (hard stop)")
SUBMIT_TOOL_RESULT = Post(
    "submitToolResult",
    "SubmitToolResultRequest",
    "SubmitResponse",
    "Answer a client tool call anywhere in the tree (at the root)",
)
SUBMIT_APPROVAL = Post(
    "submitApproval",
    "SubmitApprovalRequest",
    "SubmitResponse",
    "Approve or deny a gated call anywhere in the tree (at the root)",
)
FORK = Post(
    "fork",
    "ForkRequest",
    "ForkResult",
    "Fork a session (and its tree) at a sequence, with edits: a new branch, live after it",
)

_FROM_SEQUENCE = {
    "name": "fromSequence",
    "in": "query",
    "required": False,
    "schema": {"type": "integer", "minimum": 0, "maximum": MAX_SEQUENCE},
    "description": "Yield chunks with sequence > this (else the Last-Event-ID header, else 0)",
}

_LAST_EVENT_ID = {
    "name": "Last-Event-ID",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": f"^$|{decimal_at_most(MAX_SEQUENCE)}"},
    "description": (
        "The last `id:` received: a decimal from 0 to 2^63-1 (fromSequence wins); "
        "empty: none received yet, as if absent"
    ),
}

_STREAM_FORMAT = {
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


def sse(*, auth: bool) -> dict[str, Any]:
    """``GET /sse``."""
    return {
        "operationId": "sse",
        "summary": "Stream a session's chunks, then end or error",
        **_security(auth),
        "parameters": [SESSION_ID_QUERY, _FROM_SEQUENCE, _LAST_EVENT_ID, _STREAM_FORMAT],
        "responses": {
            "200": {
                "description": "the event stream",
                "content": {
                    "text/event-stream": {
                        "schema": {"oneOf": [ref("SSEEvent"), ref("FrontEndEvent")]}
                    }
                },
            },
            **_errors(_GET_ERRORS, auth=auth),
        },
    }


def sse_run(*, auth: bool) -> dict[str, Any]:
    """``POST /sse``."""
    return {
        "operationId": "sseRun",
        "summary": "A run a front end asks for (AG-UI's RunAgentInput, or useChat's "
        "{id, messages, trigger}): start, resume or answer the session, then stream "
        "that run; a known session's new message is the body's last, if the user's: "
        "without one (or with no text) it streams its current run (specs/streams.md)",
        "parameters": [
            {**_STREAM_FORMAT, "required": True, "schema": {"enum": ["ag-ui", "ai-sdk"]}},
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
                    "schema": {"anyOf": [ref("RunAgentInput"), ref("ChatRequest")]}
                }
            },
        },
        **_security(auth),
        "responses": {
            "200": {
                "description": "the run's stream",
                "content": {"text/event-stream": {"schema": ref("FrontEndEvent")}},
            },
            **_errors(_POST_ERRORS, auth=auth),
        },
    }


def status(*, auth: bool) -> dict[str, Any]:
    """``GET /status``."""
    return {
        "operationId": "status",
        "summary": "A session's status",
        **_security(auth),
        "parameters": [SESSION_ID_QUERY],
        "responses": {
            "200": _ok("RemoteStatusResponse", "the status"),
            **_errors(_GET_ERRORS, auth=auth),
        },
    }


def sessions(*, auth: bool) -> dict[str, Any]:
    """``GET /sessions``."""
    return {
        "operationId": "sessions",
        "summary": "The sessions, newest first, filtered and paged (specs/http.md)",
        **_security(auth),
        "parameters": _session_list_query(),
        "responses": {
            "200": _ok("SessionListPage", "a page of sessions"),
            **_errors(_GET_ERRORS, auth=auth),
        },
    }


def health(*, auth: bool) -> dict[str, Any]:
    """``GET /health`` (never needs auth)."""
    return {
        "operationId": "health",
        "summary": "Liveness and the agent types served (never needs auth)",
        "security": [],
        "responses": {"200": _ok("_Health", "ok"), **_errors(_OPEN_ERRORS, auth=auth)},
    }


def openapi(*, auth: bool) -> dict[str, Any]:
    """``GET /openapi.json`` (never needs auth)."""
    return {
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


def ui_operation(path: str) -> Operation:
    """The inspector's ``GET`` operation at ``path`` (``server/ui/openapi.py``)."""

    def operation(*, auth: bool) -> dict[str, Any]:
        found: dict[str, Any] = _ui_paths(auth=auth)[path]["get"]
        return found

    return operation
