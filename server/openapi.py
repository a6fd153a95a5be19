"""The OpenAPI document of the HTTP protocol, generated from the protocol's structs.

``python -m helix_agents.server openapi > specs/openapi.json`` writes it; a test
fails when the committed file, or the app's routes, differ from it.
"""

from __future__ import annotations

from typing import Any

import msgspec

from helix_agents import (
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitApprovalRequest,
    SubmitResponse,
    SubmitToolResultRequest,
)

from .http_app import SessionRequest

__all__ = ["ErrorBody", "openapi_document"]


class ErrorBody(msgspec.Struct, frozen=True):
    """Every failure's body."""

    error: str
    code: str


class _Ok(msgspec.Struct, frozen=True):
    ok: bool


class _Health(msgspec.Struct, frozen=True):
    status: str
    agents: list[str]


_MODELS: list[type[msgspec.Struct]] = [
    RemoteStartRequest,
    RemoteResumeRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SessionRequest,
    SubmitToolResultRequest,
    SubmitApprovalRequest,
    SubmitResponse,
    ErrorBody,
    _Ok,
    _Health,
]

_ERRORS = {
    "400": "INVALID_REQUEST: malformed JSON, a missing or mistyped field, a bad session id",
    "401": "UNAUTHORIZED: missing or refused bearer token (when auth is configured)",
    "404": "NOT_FOUND: unknown agent type, session or route",
    "405": "METHOD_NOT_ALLOWED",
    "409": "ALREADY_RUNNING or ALREADY_COMPLETED",
    "413": "PAYLOAD_TOO_LARGE",
    "500": "INTERNAL_ERROR",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json_body(name: str) -> dict[str, Any]:
    return {"required": True, "content": {"application/json": {"schema": _ref(name)}}}


def _answers(name: str, description: str, *, media: str = "application/json") -> dict[str, Any]:
    answers: dict[str, Any] = {
        "200": {"description": description, "content": {media: {"schema": _ref(name)}}}
    }
    for status, text in _ERRORS.items():
        answers[status] = {
            "description": text,
            "content": {"application/json": {"schema": _ref("ErrorBody")}},
        }
    return answers


def _session_query(*extra: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {
            "name": "sessionId",
            "in": "query",
            "required": True,
            "schema": {"type": "string", "pattern": "^[A-Za-z0-9_.:-]{1,256}$"},
        },
        *extra,
    ]


def openapi_document() -> dict[str, Any]:
    """The protocol as an OpenAPI 3.1 document."""
    _, components = msgspec.json.schema_components(
        _MODELS, ref_template="#/components/schemas/{name}"
    )
    components["_Ok"]["title"] = "Ok"
    components["_Health"]["title"] = "Health"
    sse_stream = {
        "type": "string",
        "description": (
            "text/event-stream: `id: <seq>`, `event: chunk|end|error`, `data: <JSON>`, "
            "and `:heartbeat` comments; see specs/http.md"
        ),
    }
    components["SSEStream"] = sse_stream
    post = {
        "/start": ("RemoteStartRequest", "RemoteStartResponse", "Start a session (idempotent)"),
        "/resume": ("RemoteResumeRequest", "RemoteStartResponse", "Resume a session"),
        "/interrupt": ("SessionRequest", "_Ok", "Interrupt a session (soft stop)"),
        "/abort": ("SessionRequest", "_Ok", "Abort a session (hard stop)"),
        "/submit-tool-result": (
            "SubmitToolResultRequest",
            "SubmitResponse",
            "Answer a client tool call anywhere in the tree (at the root)",
        ),
        "/submit-approval": (
            "SubmitApprovalRequest",
            "SubmitResponse",
            "Approve or deny a gated call anywhere in the tree (at the root)",
        ),
    }
    paths: dict[str, Any] = {}
    for path, (request, response, summary) in post.items():
        paths[path] = {
            "post": {
                "summary": summary,
                "requestBody": _json_body(request),
                "responses": _answers(response, summary),
            }
        }
    from_sequence = {
        "name": "fromSequence",
        "in": "query",
        "required": False,
        "schema": {"type": "integer", "minimum": 0},
        "description": "Yield chunks with sequence > this (else the Last-Event-ID header, else 0)",
    }
    last_event_id = {
        "name": "Last-Event-ID",
        "in": "header",
        "required": False,
        "schema": {"type": "string"},
    }
    paths["/sse"] = {
        "get": {
            "summary": "Stream a session's chunks, then end or error",
            "parameters": _session_query(from_sequence, last_event_id),
            "responses": _answers("SSEStream", "the event stream", media="text/event-stream"),
        }
    }
    paths["/status"] = {
        "get": {
            "summary": "A session's status",
            "parameters": _session_query(),
            "responses": _answers("RemoteStatusResponse", "the status"),
        }
    }
    paths["/health"] = {
        "get": {
            "summary": "Liveness and the agent types served (never needs auth)",
            "responses": {
                "200": {
                    "description": "ok",
                    "content": {"application/json": {"schema": _ref("_Health")}},
                }
            },
        }
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "helix-agents remote agent protocol", "version": "1"},
        "paths": paths,
        "components": {
            "schemas": components,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }
