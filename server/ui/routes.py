"""The inspector's routes: the page, its assets and ``GET /snapshot`` (it lists with ``/sessions``).

``create_http_app`` adds them next to the protocol's routes, through its own
guard (bearer auth, the ``{"error", "code"}`` shape). The page and its assets
hold no data and need no token; the page sends its token (``#token=`` in its
address) on every data request. The contract is in ``specs/ui.md``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any, Protocol, cast

import msgspec
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from helix_agents import EventStore
from helix_agents.errors import AgentServerError
from helix_agents.log.pricing import Prices
from helix_agents.server.edge import checked_id

from .snapshot import take_snapshot

__all__ = ["ASSETS", "Guard", "store_of", "ui_routes"]

_MEDIA = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}

_STATIC = resources.files(__package__ or "helix_agents.server.ui") / "static"

ASSETS = frozenset(
    entry.name
    for entry in _STATIC.iterdir()
    if entry.is_file() and entry.name.endswith((".js", ".css"))
)
"""The files the page loads from ``/ui/assets/``, shipped in the package (the page is ``/ui``)."""

_encoder = msgspec.json.Encoder()


class Guard(Protocol):
    """How ``create_http_app`` wraps a handler: auth (unless ``open_``) and error mapping."""

    def __call__(
        self, handler: Callable[[Request], Awaitable[Response]], *, open_: bool = False
    ) -> Callable[[Request], Awaitable[Any]]: ...


def store_of(target: object) -> EventStore | None:
    """The event store behind a gateway's target (an ``AgentServer``, a NATS fleet), if any."""
    store = getattr(target, "store", None)
    if callable(getattr(store, "read", None)) and callable(getattr(store, "list_sessions", None)):
        return cast(EventStore, store)
    return None


def _asset(name: str) -> Response:
    media = next(media for suffix, media in _MEDIA.items() if name.endswith(suffix))
    body = (_STATIC / name).read_bytes()
    return Response(body, media_type=media, headers={"cache-control": "no-cache"})


def _int_param(request: Request, name: str, *, minimum: int) -> int | None:
    raw = request.query_params.get(name)
    if raw is None:
        return None
    # The length first: int() of over 4,300 digits raises ValueError (a 500).
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 19 or int(raw) < minimum:
        raise AgentServerError(
            "INVALID_REQUEST", f"{name} must be an integer from {minimum}, not {raw!r}"
        )
    return int(raw)


def ui_routes(store: EventStore | None, guard: Guard, prices: Prices | None = None) -> list[Route]:
    """The inspector's routes for a gateway over ``store`` (``None``: no data routes answer).

    ``prices`` prices each node's tokens in ``GET /snapshot`` (``None``: the defaults).
    """

    def needs_store() -> EventStore:
        if store is None:
            raise AgentServerError(
                "NOT_FOUND", "this gateway has no event store to inspect (it fronts another one)"
            )
        return store

    async def page(request: Request) -> Response:
        return _asset("index.html")

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in ASSETS:
            raise AgentServerError("NOT_FOUND", f"no asset {name!r}")
        return _asset(name)

    async def snapshot(request: Request) -> Response:
        session_id = checked_id(request.query_params.get("sessionId", ""))
        at = _int_param(request, "at", minimum=1)
        taken = await take_snapshot(needs_store(), session_id, at, prices)
        return Response(_encoder.encode(taken), media_type="application/json")

    return [
        Route("/ui", guard(page, open_=True), methods=["GET"]),
        Route("/ui/assets/{name}", guard(asset, open_=True), methods=["GET"]),
        Route("/snapshot", guard(snapshot), methods=["GET"]),
    ]
