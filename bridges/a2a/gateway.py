"""What answers the gateway's A2A routes: JSON-RPC endpoints and agent cards (specs/a2a.md).

``create_http_app`` mounts the routes (``mount.py``) when a2a-sdk is
installed, with no flag; these answer them:

- ``POST /a2a/{agentType}``: the agent's A2A endpoint (JSON-RPC, A2A 1.0, and
  0.3 method names through the SDK's compatibility layer);
- ``GET /a2a/{agentType}/.well-known/agent-card.json``: its card (404 for an
  agent the gateway does not serve);
- ``POST /a2a``: the root endpoint, for every served agent (a new context
  names its agent in ``metadata.skillId``, unless only one is served);
- ``GET /.well-known/agent-card.json``: the root card, every agent a skill.

The endpoints sit behind the gateway's auth (401 without a credential), and
an identity reaches only its tenant's tasks (``specs/auth.md``); the cards
are public. A request body over the gateway's limit is refused with
A2A's ``Invalid Request`` and changes nothing. A gateway whose target has no
event store (it fronts another gateway) serves no A2A: the tasks are folded
from the sessions' logs.
"""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.server.routes import DefaultServerCallContextBuilder
from a2a.server.routes.jsonrpc_dispatcher import JsonRpcDispatcher
from a2a.utils.errors import InvalidParamsError
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive

from helix_agents import EventStore, RemoteAgentTransport
from helix_agents.auth import IDENTITY_KEY, Gate

from .cards import ServedAgent, agent_card, root_card
from .handler import SessionRequestHandler

__all__ = ["Endpoints"]


class _Agents:
    """The agents behind a gateway's target: an ``AgentServer``'s, or a fleet's directory."""

    def __init__(self, target: object) -> None:
        self._target = target

    async def names(self) -> list[str]:
        fixed = getattr(self._target, "agent_types", None)
        if isinstance(fixed, list):
            return [str(name) for name in fixed]
        listing = getattr(self._target, "list_agent_types", None)
        if callable(listing):
            return [str(name) for name in await listing()]
        return []

    def describe(self, name: str) -> ServedAgent:
        registry = getattr(getattr(self._target, "executor", None), "registry", None)
        agent = registry.get(name) if registry is not None else None
        return ServedAgent(name, getattr(agent, "description", "") or "")

    async def served(self) -> list[ServedAgent]:
        return [self.describe(name) for name in await self.names()]

    async def choose(self, endpoint: str | None, metadata: dict[str, Any]) -> str:
        """The agent of a new context: the endpoint's, else the one its message names."""
        if endpoint is not None:
            return endpoint
        names = await self.names()
        wanted = metadata.get("skillId")
        if wanted is None and len(names) == 1:
            return names[0]
        if not isinstance(wanted, str) or wanted not in names:
            # An agent named but not served is our NOT_FOUND (a helix client reads it).
            raise InvalidParamsError(
                "name the agent of a new context in the message's metadata.skillId "
                f"(one of: {', '.join(names) or 'none'}), or use /a2a/<agent type>",
                data={"helixCode": "NOT_FOUND"} if isinstance(wanted, str) else None,
            )
        return wanted


class _ContextBuilder(DefaultServerCallContextBuilder):
    """The SDK's call context, plus the endpoint's agent type from the path."""

    def build(self, request: Request) -> ServerCallContext:
        context = super().build(request)
        context.state["agent_type"] = request.path_params.get("agent_type")
        context.state[IDENTITY_KEY] = request.scope["state"][IDENTITY_KEY]  # Endpoints.rpc's
        return context


def _rpc_error(
    status: int, code: int, message: str, headers: dict[str, str] | None = None
) -> Response:
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status, headers)


def _limited(receive: Receive, limit: int) -> Receive:
    """``receive`` that raises 413 once the body has grown over ``limit`` bytes."""
    size = 0

    async def limited() -> Message:
        nonlocal size
        message = await receive()
        if message["type"] == "http.request":
            size += len(message.get("body", b""))
            if size > limit:
                raise HTTPException(413)
        return message

    return limited


class Endpoints:
    """What answers the A2A routes of one gateway (see ``mount.py`` for the routes)."""

    def __init__(
        self,
        target: RemoteAgentTransport,
        store: EventStore,
        gate: Gate,
        max_body_bytes: int,
    ) -> None:
        self._agents = _Agents(target)
        self._gate = gate
        self._max_body_bytes = max_body_bytes
        self._bearer = gate.required
        handler = SessionRequestHandler(target, store, self._agents.choose, gate)
        self._dispatcher = JsonRpcDispatcher(
            request_handler=handler, context_builder=_ContextBuilder(), enable_v0_3_compat=True
        )

    async def rpc(self, request: Request) -> Response:
        """``POST /a2a`` and ``POST /a2a/{agent_type}``: a JSON-RPC request."""
        identity = await self._gate.identity_or_none(request.headers)
        if identity is None:
            return _rpc_error(
                401,
                -32600,
                "missing or invalid bearer token",
                {"WWW-Authenticate": 'Bearer realm="helix-agents"'},
            )
        agent_type = request.path_params.get("agent_type")
        if agent_type is not None and agent_type not in await self._agents.names():
            return _rpc_error(404, -32601, f"no agent {agent_type!r} is served here")
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_body_bytes:
            return _rpc_error(200, -32600, "Payload too large")
        request.scope.setdefault("state", {})[IDENTITY_KEY] = identity  # for _ContextBuilder
        limited = Request(request.scope, _limited(request.receive, self._max_body_bytes))
        return await self._dispatcher.handle_requests(limited)

    async def card(self, request: Request) -> Response:
        """``GET /a2a/{agent_type}/.well-known/agent-card.json``: an agent's card, or 404."""
        name = request.path_params["agent_type"]
        if name not in await self._agents.names():
            return JSONResponse(
                {"error": f"no agent {name!r} is served here", "code": "NOT_FOUND"}, 404
            )
        found = agent_card(self._agents.describe(name), _base_url(request), bearer=self._bearer)
        return JSONResponse(agent_card_to_dict(found))

    async def gateway_card(self, request: Request) -> Response:
        """``GET /.well-known/agent-card.json``: the root card, every agent a skill."""
        found = root_card(await self._agents.served(), _base_url(request), bearer=self._bearer)
        return JSONResponse(agent_card_to_dict(found))


def _base_url(request: Request) -> str:
    return str(request.base_url).rstrip("/")
