"""The gateway's route table: each documented route's path, method, handler and OpenAPI operation.

:data:`ENDPOINTS` is the one list both the app and its OpenAPI document are
built from (``create_http_app`` and ``openapi_document``): a route cannot be
served undocumented, nor documented unserved. Its order is the document's.
The mounts (A2A, MCP) are added after these; their own specs state them
(``specs/a2a.md``, ``specs/mcp.md``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.routing import Route

from helix_agents.server.ui import routes as ui

from . import handlers, openapi_paths as docs, sessions
from .middleware import BearerAuth, BearerCheck, BodyLimit, ProtocolErrors

__all__ = ["ENDPOINTS", "Endpoint", "routes"]


@dataclass(frozen=True)
class Endpoint:
    """One route of the protocol (or the inspector).

    Attributes:
        path: its path, below the app's mount point.
        method: ``GET`` (which answers ``HEAD`` too) or ``POST``.
        handler: ``request -> response``; it raises to refuse.
        operation: its OpenAPI operation object.
        open: served without a bearer token even when the gateway has auth.
    """

    path: str
    method: str
    handler: Callable[[Request], Awaitable[Any]]
    operation: docs.Operation
    open: bool = False

    def route(self, check: BearerCheck, max_body_bytes: int) -> Route:
        """The Starlette route, its middleware set up for one gateway."""
        middleware = [
            Middleware(ProtocolErrors),
            *([] if self.open else [Middleware(BearerAuth, check=check)]),
            Middleware(BodyLimit, max_bytes=max_body_bytes),
        ]
        return Route(self.path, self.handler, methods=[self.method], middleware=middleware)


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("/start", "POST", handlers.start, docs.START),
    Endpoint("/resume", "POST", handlers.resume, docs.RESUME),
    Endpoint("/message", "POST", handlers.message, docs.MESSAGE),
    Endpoint("/interrupt", "POST", handlers.interrupt, docs.INTERRUPT),
    Endpoint("/abort", "POST", handlers.abort, docs.ABORT),
    Endpoint("/submit-tool-result", "POST", handlers.submit_tool_result, docs.SUBMIT_TOOL_RESULT),
    Endpoint("/submit-approval", "POST", handlers.submit_approval, docs.SUBMIT_APPROVAL),
    Endpoint("/fork", "POST", handlers.fork, docs.FORK),
    Endpoint("/sse", "GET", handlers.sse, docs.sse),
    Endpoint("/sse", "POST", handlers.sse_run, docs.sse_run),
    Endpoint("/status", "GET", handlers.status, docs.status),
    Endpoint("/sessions", "GET", sessions.sessions, docs.sessions),
    Endpoint("/health", "GET", handlers.health, docs.health, open=True),
    Endpoint("/openapi.json", "GET", handlers.openapi, docs.openapi, open=True),
    # The inspector (specs/ui.md): its page holds no data.
    Endpoint("/ui", "GET", ui.page, docs.ui_operation("/ui"), open=True),
    Endpoint(
        "/ui/assets/{name}", "GET", ui.asset, docs.ui_operation("/ui/assets/{name}"), open=True
    ),
    Endpoint("/ui/diff", "GET", ui.diff_page, docs.ui_operation("/ui/diff"), open=True),
    Endpoint("/diff", "GET", ui.diff, docs.ui_operation("/diff")),
    Endpoint("/snapshot", "GET", ui.snapshot, docs.ui_operation("/snapshot")),
)
"""The documented routes, in the document's order."""


def routes(check: BearerCheck, max_body_bytes: int) -> list[Route]:
    """:data:`ENDPOINTS` as one gateway's Starlette routes."""
    return [endpoint.route(check, max_body_bytes) for endpoint in ENDPOINTS]
