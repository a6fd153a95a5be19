"""``create_http_app``: the Starlette gateway speaking the HTTP+SSE protocol.

It fronts an :class:`AgentServer` in this process or any
:class:`~helix_agents.RemoteAgentTransport` (a fleet behind NATS, another
HTTP server); one code path serves both, because an ``AgentServer`` is itself
a ``RemoteAgentTransport`` (over its executor's one implementation of the
protocol). The protocol is in ``specs/http.md``.

The app is Starlette's own: the route table (``routes.py``, whose handlers
are ``handlers.py``'s and the inspector's) with its middleware
(``middleware.py``: errors, auth, body limit), the mounts (A2A, MCP), the
app's exception handlers for what no route answers, and the
:class:`~.context.Gateway` the handlers serve from on ``app.state.gateway``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import AsyncExitStack, asynccontextmanager
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import msgspec
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from helix_agents import RemoteAgentTransport
from helix_agents.auth import IDENTITY_KEY, Auth, Gate, authorize
from helix_agents.errors import UsageError
from helix_agents.log.pricing import ModelPrice, Prices
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.ui import Inspector, store_of

from . import handlers
from .context import Gateway
from .handlers import AgentDirectory
from .middleware import EXCEPTION_HANDLERS, refusal
from .openapi import openapi_document
from .routes import routes

if TYPE_CHECKING:
    from helix_agents.bridges.mcp.endpoint import MCPMount, MCPOptions

__all__ = ["DEFAULT_MAX_BODY_BYTES", "AgentDirectory", "Auth", "create_http_app"]

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""Request bodies larger than this (1 MiB) are answered 413."""


def create_http_app(
    target: AgentServer | RemoteAgentTransport,
    *,
    auth: Auth | None = None,
    heartbeat_interval: float = 15.0,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    mcp: MCPOptions | None = None,
    prices: Prices | Mapping[str, ModelPrice] | None = None,
) -> Starlette:
    """Build the Starlette app serving the protocol for ``target``.

    Args:
        target: an :class:`AgentServer` (entered in the app's lifespan unless it
            is already running) or any ``RemoteAgentTransport``.
        auth: who may call (``specs/auth.md``): an ``Authenticator`` (headers
            to an ``Identity``: ``JwtAuthenticator``, your own), ``{token:
            Identity}``, or the old forms (accepted bearer tokens, an async
            ``token -> bool`` check: each token is an identity of every
            permission). When set, every route but the public ones (``/health``,
            ``/openapi.json``, the inspector's page) needs a credential, and each
            identity reaches only its tenant's sessions unless its roles say otherwise.
        heartbeat_interval: seconds between ``:heartbeat`` comments on ``/sse``.
        max_body_bytes: larger request bodies are refused with 413.
        mcp: also serve ``target``'s agents as MCP tools at ``/mcp``
            (``helix_agents.mcp.MCPOptions``, the mcp extra; specs/mcp.md);
            ``target`` must then be an ``AgentServer``.
        prices: what tokens cost, for the inspector's cost per node: a
            ``helix_agents.log.Prices`` (by model name and by agent type), or a
            mapping of model name to ``ModelPrice``; the built-in defaults
            (``helix_agents.log.pricing.DEFAULT_PRICES``) fill the gaps.
    """
    store = store_of(target)
    inspector = Inspector(store, _prices(prices))
    server = target if isinstance(target, AgentServer) else None
    gate = Gate(auth, store)
    document = msgspec.json.encode(openapi_document(auth=auth is not None))
    gateway = Gateway(
        target, server, heartbeat_interval=heartbeat_interval, document=document, gate=gate
    )
    mcp_endpoint = _mcp_endpoint(target, mcp, gate, max_body_bytes)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            if server is not None and not server.running:
                await stack.enter_async_context(server)
            if mcp_endpoint is not None:  # its sessions start after the agents, stop before
                await stack.enter_async_context(mcp_endpoint.run())
            yield

    return GatewayApp(
        gateway,
        inspector,
        routes=[
            *routes(gate, max_body_bytes),
            *_a2a_routes(target, gate, max_body_bytes),  # specs/a2a.md
            *(mcp_endpoint.routes if mcp_endpoint is not None else ()),  # specs/mcp.md
        ],
        exception_handlers=EXCEPTION_HANDLERS,
        lifespan=lifespan,
    )


def _a2a_routes(
    target: AgentServer | RemoteAgentTransport, gate: Gate, max_body_bytes: int
) -> list[BaseRoute]:
    """The A2A routes (specs/a2a.md) when the ``a2a`` extra is installed, else none."""
    if find_spec("a2a") is None or find_spec("sse_starlette") is None:  # found, not imported
        return []
    from helix_agents.bridges.a2a.mount import a2a_routes

    return a2a_routes(target, gate=gate, max_body_bytes=max_body_bytes)


def _mcp_endpoint(
    target: AgentServer | RemoteAgentTransport,
    options: MCPOptions | None,
    gate: Gate,
    max_body_bytes: int,
) -> MCPMount | None:
    """The ``/mcp`` endpoint (specs/mcp.md) when ``options`` asks for it."""
    if options is None:
        return None
    from helix_agents.bridges.mcp.endpoint import mcp_mount  # options were built: the extra is here

    return mcp_mount(target, options, gate=gate, max_body_bytes=max_body_bytes)


class GatewayApp(Starlette):
    """The app: ``GET /sse`` goes straight to its handler, the rest through Starlette.

    A stream's every body message would otherwise pass through Starlette's
    error and exception middleware and the route's, which buy a stream
    nothing: its handler's refusals (auth, a bad id, an unknown session) come
    before the stream starts, answered here by what the route's middleware
    uses (``Gate``, ``authorize``, ``refusal``), and once it has started an error can
    only end it. ``/sse`` with another method (``POST``: a front end's run) is Starlette's.
    """

    def __init__(self, gateway: Gateway, inspector: Inspector, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.state.gateway = gateway  # the handlers' (``handlers.py``, ``sessions.py``)
        self.state.inspector = inspector  # the inspector's (``server/ui/routes.py``)
        self._gate = gateway.gate
        self.streams = gateway.streams
        """The open ``GET /sse`` streams (``serve``'s shutdown ends the idle ones at once)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and scope["method"] in ("GET", "HEAD")
            and _route_path(scope) == "/sse"
        ):
            scope["app"] = self  # as Starlette sets it: the handler reads its state
            request = Request(scope, receive)
            response: ASGIApp
            try:
                identity = await self._gate.identify(request.headers)
                authorize(identity, "read")  # the route's rule (routes.py)
                scope.setdefault("state", {})[IDENTITY_KEY] = identity
                response = await handlers.sse(request)
            except Exception as exc:
                response = refusal(request, exc)
            await response(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def _route_path(scope: Scope) -> str:
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


def _prices(prices: Prices | Mapping[str, ModelPrice] | None) -> Prices:
    if prices is None:
        return Prices()
    if isinstance(prices, Prices):
        return prices
    if isinstance(prices, Mapping):
        return Prices(prices)
    raise UsageError(
        f"create_http_app prices must be Prices or a mapping of model name to ModelPrice, "
        f"not {type(prices).__name__}"
    )
