"""``a2a_routes``: the gateway's A2A routes, mounted without loading a2a-sdk.

``create_http_app`` calls this when a2a-sdk is installed. The routes are
fixed here (specs/a2a.md, "Endpoints"); what answers them (``gateway.py``,
which imports the SDK) is built on the first request that reaches one, so a
gateway that is never asked for A2A never loads the SDK, nor the
OpenTelemetry it loads when present (specs/otel.md).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, cast

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from helix_agents import EventStore, RemoteAgentTransport
from helix_agents.auth import Gate

if TYPE_CHECKING:
    from .gateway import Endpoints

__all__ = ["a2a_routes", "store_of"]


def store_of(target: object) -> EventStore | None:
    """The event store behind a gateway's target, if it has one (the A2A view reads logs)."""
    store = getattr(target, "store", None)
    if callable(getattr(store, "read", None)) and callable(getattr(store, "tail", None)):
        return cast(EventStore, store)
    return None


def a2a_routes(
    target: RemoteAgentTransport,
    *,
    gate: Gate,
    max_body_bytes: int,
) -> list[BaseRoute]:
    """The A2A routes for a gateway in front of ``target`` (none if it has no store).

    Args:
        target: the gateway's target (an ``AgentServer``, a fleet's transport).
        gate: the gateway's ``Gate``: who a request is, what it may touch (the
            cards say a token is needed when the gateway has auth).
        max_body_bytes: the gateway's body limit, for JSON-RPC requests too.
    """
    store = store_of(target)
    if store is None:
        return []
    built: list[Endpoints] = []

    def endpoints() -> Endpoints:
        if not built:  # no await before the append: one build per app
            from .gateway import Endpoints

            built.append(Endpoints(target, store, gate, max_body_bytes))
        return built[0]

    async def rpc(request: Request) -> Response:
        return await endpoints().rpc(request)

    async def card(request: Request) -> Response:
        return await endpoints().card(request)

    async def gateway_card(request: Request) -> Response:
        return await endpoints().gateway_card(request)

    return [
        Route("/.well-known/agent-card.json", gateway_card, methods=["GET"]),
        Route("/a2a", rpc, methods=["POST"]),
        Route("/a2a/{agent_type}", rpc, methods=["POST"]),
        Route("/a2a/{agent_type}/.well-known/agent-card.json", card, methods=["GET"]),
    ]
