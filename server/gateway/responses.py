"""The gateway's answers: JSON bodies, and a failure in the protocol's shape (``specs/http.md``).

A failure is ``{"error": "<one line>", "code": "<CODE>"}`` with the code's
status (``helix_agents.errors.HTTP_STATUS``); ``401`` carries the bearer
challenge, ``503`` a ``Retry-After`` unless the caller gave one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec
from starlette.responses import Response

from helix_agents.errors import HTTP_STATUS, AgentServerError

__all__ = ["UNAVAILABLE_RETRY_AFTER", "error_response", "json_response"]

UNAVAILABLE_RETRY_AFTER = "2"
"""Seconds a client is told to wait after a ``503`` of an outage (the store or the fleet)."""

_encoder = msgspec.json.Encoder()


def json_response(
    payload: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``payload`` encoded as JSON (msgspec: structs by their wire names)."""
    return Response(_encoder.encode(payload), status, headers, media_type="application/json")


def error_response(error: AgentServerError, headers: Mapping[str, str] | None = None) -> Response:
    """``error`` as the protocol's failure: its status, body and headers."""
    status = HTTP_STATUS.get(error.code, 500)
    if error.code == "UNAUTHORIZED":
        headers = {**(headers or {}), "WWW-Authenticate": 'Bearer realm="helix-agents"'}
    elif error.code == "UNAVAILABLE" and not (headers and "Retry-After" in headers):
        headers = {**(headers or {}), "Retry-After": UNAVAILABLE_RETRY_AFTER}
    return json_response({"error": error.message, "code": error.code}, status, headers)
