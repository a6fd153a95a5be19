"""The gateway's middleware: error mapping, bearer auth and the body limit, per route.

Each protocol route (``routes.py``) runs its handler inside, from the outside in:

- :class:`ProtocolErrors`: an exception raised before the answer starts
  becomes the protocol's failure (``protocol_error``, ``server/edge.py``); a
  client that left mid-body is counted, not logged as an error;
- :class:`Authenticate` (not on the public routes): ``401 UNAUTHORIZED`` without
  a credential the gateway accepts, ``403 FORBIDDEN`` when the identity lacks
  the route's permission (``specs/auth.md``);
- :class:`BodyLimit`: reading a body over the limit raises ``413 PAYLOAD_TOO_LARGE``.

They sit on the routes, not around the app, so that an unknown route stays
``404`` and a wrong method ``405`` with or without a token (the app's
:data:`EXCEPTION_HANDLERS` answer those in the same shape), and the A2A and
MCP mounts keep their own refusals.
"""

from __future__ import annotations

import logging
import time

from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from helix_agents.auth import IDENTITY_KEY, Action, Gate, Identity, authorize
from helix_agents.errors import AgentServerError
from helix_agents.server.edge import protocol_error

from .responses import error_response

__all__ = [
    "CLIENT_GONE_EVERY",
    "EXCEPTION_HANDLERS",
    "Authenticate",
    "BodyLimit",
    "ProtocolErrors",
    "identity_of",
    "refusal",
]

log = logging.getLogger("helix_agents.server")

CLIENT_GONE_EVERY = 10.0
"""Seconds between two log lines about clients that left before their request's body came."""


class _ClientsGone:
    """Clients that left mid-body: one ``info`` line per :data:`CLIENT_GONE_EVERY`, counting."""

    def __init__(self) -> None:
        self.last = -CLIENT_GONE_EVERY
        self.since = 0

    def note(self, path: str) -> None:
        """A client left before its request's body on ``path`` came whole."""
        self.since += 1
        now = time.monotonic()
        if now - self.last < CLIENT_GONE_EVERY:
            return
        log.info(
            "gateway %s: a client left before its request's body came (%d since the last "
            "such line)",
            path,
            self.since,
        )
        self.last, self.since = now, 0


_clients_gone = _ClientsGone()


def refusal(request: Request, exc: Exception) -> Response:
    """The answer to ``request`` when serving it raised ``exc``: the protocol's failure."""
    if isinstance(exc, ClientDisconnect):
        # Not an error of the server's: nobody reads the answer, nothing changed.
        _clients_gone.note(request.url.path)
        return error_response(AgentServerError("INVALID_REQUEST", "client disconnected"))
    return error_response(protocol_error(exc, f"gateway {request.url.path}"))


class ProtocolErrors:
    """Route middleware: an exception raised before the answer starts is answered as a failure.

    Once the answer has started (a stream), an exception can only end it: it goes on up.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = False

        async def sending(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except Exception as exc:
            if started:
                raise
            await refusal(Request(scope, receive), exc)(scope, receive, send)


class Authenticate:
    """Route middleware: who the request is (``401`` without a credential), and the route's rule.

    The identity is kept in the scope's ``state`` (:func:`identity_of`) for the
    handler, which checks the session it touches (``Gate.session``); here
    only the permission the route needs (``read`` or ``write``: ``403``).
    """

    def __init__(self, app: ASGIApp, gate: Gate, rule: Action) -> None:
        self.app = app
        self.gate = gate
        self.rule = rule

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        identity = await self.gate.identify(Headers(scope=scope))
        authorize(identity, self.rule)
        scope.setdefault("state", {})[IDENTITY_KEY] = identity
        await self.app(scope, receive, send)


def identity_of(request: Request) -> Identity:
    """The identity :class:`Authenticate` found for ``request``."""
    identity: Identity = request.scope["state"][IDENTITY_KEY]
    return identity


class BodyLimit:
    """Route middleware: reading more than ``max_bytes`` of body raises ``PAYLOAD_TOO_LARGE``.

    A ``Content-Length`` over the limit is refused at the first read, before
    any byte of the body is waited for; a body without one (chunked) when it
    passes the limit. A route that never reads its body is never refused.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _too_large(self) -> AgentServerError:
        return AgentServerError("PAYLOAD_TOO_LARGE", f"request body over {self.max_bytes} bytes")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = Headers(scope=scope).get("content-length", "")
        # The length first: int() of over 4,300 digits raises ValueError.
        over = (
            declared.isascii()
            and declared.isdigit()
            and (
                len(declared.lstrip("0")) > len(str(self.max_bytes))
                or int(declared) > self.max_bytes
            )
        )
        size = 0

        async def limited() -> Message:
            nonlocal size
            if over:
                raise self._too_large()
            message = await receive()
            if message["type"] == "http.request":
                size += len(message.get("body", b""))
                if size > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited, send)


async def _http_error(request: Request, exc: Exception) -> Response:
    """Starlette's own refusals (no route, a wrong method), in the protocol's shape."""
    assert isinstance(exc, HTTPException)
    if exc.status_code == 405:
        # Every route at this path (``/sse`` has two, GET and POST), not only the first.
        methods = {
            method
            for route in request.app.routes
            if isinstance(route, Route) and route.matches(request.scope)[0] != Match.NONE
            for method in route.methods or ()
        }
        allowed = ", ".join(sorted(methods))
        return error_response(
            AgentServerError(
                "METHOD_NOT_ALLOWED", f"{request.method} is not allowed here (only {allowed})"
            ),
            {"Allow": allowed},
        )
    if exc.status_code == 404:
        return error_response(AgentServerError("NOT_FOUND", f"no route {request.url.path}"))
    return error_response(AgentServerError("INVALID_REQUEST", str(exc.detail)))


async def _internal_error(request: Request, exc: Exception) -> Response:
    return error_response(protocol_error(exc, f"gateway {request.url.path}"))


EXCEPTION_HANDLERS = {HTTPException: _http_error, Exception: _internal_error}
"""The app's handlers: what no route answers, and what escapes one (a mount's failure)."""
