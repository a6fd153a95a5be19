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
from typing import Any, Literal

from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.routing import Route

from helix_agents.auth import Gate
from helix_agents.server.ui import routes as ui

from . import crons, handlers, memory, openapi_crons as cron_docs, openapi_paths as docs, sessions
from .middleware import Authenticate, BodyLimit, ProtocolErrors

__all__ = ["ENDPOINTS", "Endpoint", "Rule", "routes"]

Rule = Literal["public", "read", "write"]
"""Who may call a route (``specs/auth.md``): anyone (``public``: no data), an identity
that may read sessions, or one that may change them. A handler of a ``read`` or
``write`` route checks the session it touches against the identity too."""


@dataclass(frozen=True)
class Endpoint:
    """One route of the protocol (or the inspector).

    Attributes:
        path: its path, below the app's mount point.
        method: ``GET`` (which answers ``HEAD`` too), ``POST``, ``PUT`` or ``DELETE``.
        handler: ``request -> response``; it raises to refuse.
        operation: its OpenAPI operation object.
        rule: who may call it (:data:`Rule`); every route has one.
    """

    path: str
    method: str
    handler: Callable[[Request], Awaitable[Any]]
    operation: docs.Operation
    rule: Rule

    @property
    def open(self) -> bool:
        """Served without a credential even when the gateway has auth."""
        return self.rule == "public"

    def route(self, gate: Gate, max_body_bytes: int) -> Route:
        """The Starlette route, its middleware set up for one gateway."""
        rule = self.rule
        middleware = [
            Middleware(ProtocolErrors),
            *([] if rule == "public" else [Middleware(Authenticate, gate=gate, rule=rule)]),
            Middleware(BodyLimit, max_bytes=max_body_bytes),
        ]
        return Route(self.path, self.handler, methods=[self.method], middleware=middleware)


ENDPOINTS: tuple[Endpoint, ...] = (
    Endpoint("/start", "POST", handlers.start, docs.START, "write"),
    Endpoint("/resume", "POST", handlers.resume, docs.RESUME, "write"),
    Endpoint("/message", "POST", handlers.message, docs.MESSAGE, "write"),
    Endpoint("/interrupt", "POST", handlers.interrupt, docs.INTERRUPT, "write"),
    Endpoint("/abort", "POST", handlers.abort, docs.ABORT, "write"),
    Endpoint(
        "/submit-tool-result", "POST", handlers.submit_tool_result, docs.SUBMIT_TOOL_RESULT, "write"
    ),
    Endpoint("/submit-approval", "POST", handlers.submit_approval, docs.SUBMIT_APPROVAL, "write"),
    Endpoint("/fork", "POST", handlers.fork, docs.FORK, "write"),
    Endpoint("/sse", "GET", handlers.sse, docs.sse, "read"),
    Endpoint("/sse", "POST", handlers.sse_run, docs.sse_run, "write"),
    Endpoint("/status", "GET", handlers.status, docs.status, "read"),
    Endpoint("/sessions", "GET", sessions.sessions, docs.sessions, "read"),
    Endpoint("/health", "GET", handlers.health, docs.health, "public"),
    Endpoint("/openapi.json", "GET", handlers.openapi, docs.openapi, "public"),
    # The inspector (specs/ui.md): its pages hold no data; its data is a read.
    Endpoint("/ui", "GET", ui.page, docs.ui_operation("/ui"), "public"),
    Endpoint(
        "/ui/assets/{name}", "GET", ui.asset, docs.ui_operation("/ui/assets/{name}"), "public"
    ),
    Endpoint("/ui/diff", "GET", ui.diff_page, docs.ui_operation("/ui/diff"), "public"),
    Endpoint("/diff", "GET", ui.diff, docs.ui_operation("/diff"), "read"),
    Endpoint("/snapshot", "GET", ui.snapshot, docs.ui_operation("/snapshot"), "read"),
    # Memory across sessions (specs/server.md): the caller's tenant's items.
    Endpoint("/memory", "GET", memory.get_memory, memory.GET_MEMORY, "read"),
    Endpoint("/memory", "PUT", memory.put_memory, memory.PUT_MEMORY, "write"),
    Endpoint("/memory", "DELETE", memory.delete_memory, memory.DELETE_MEMORY, "write"),
    # Schedules (specs/server.md, "Schedules"): a schedule is its creator's, as a session is.
    Endpoint("/crons", "POST", crons.create_cron, cron_docs.CREATE_CRON, "write"),
    Endpoint("/crons", "GET", crons.list_crons, cron_docs.LIST_CRONS, "read"),
    Endpoint("/crons/{cronId}", "GET", crons.get_cron, cron_docs.GET_CRON, "read"),
    Endpoint("/crons/{cronId}", "DELETE", crons.delete_cron, cron_docs.DELETE_CRON, "write"),
    Endpoint("/crons/{cronId}/pause", "POST", crons.pause_cron, cron_docs.PAUSE_CRON, "write"),
    Endpoint("/crons/{cronId}/resume", "POST", crons.resume_cron, cron_docs.RESUME_CRON, "write"),
)
"""The documented routes, in the document's order."""


def routes(gate: Gate, max_body_bytes: int) -> list[Route]:
    """:data:`ENDPOINTS` as one gateway's Starlette routes."""
    return [endpoint.route(gate, max_body_bytes) for endpoint in ENDPOINTS]
