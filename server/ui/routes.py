"""The inspector's handlers: the page, its assets and ``GET /snapshot`` (lists: ``/sessions``).

``create_http_app``'s route table (``server/gateway/routes.py``) serves them
next to the protocol's, behind the same middleware (bearer auth, the
``{"error", "code"}`` shape). The page and its assets
hold no data and need no token; the page sends its token (``#token=`` in its
address) on every data request. The contract is in ``specs/ui.md``.
"""

from __future__ import annotations

from importlib import resources
from typing import cast

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from helix_agents import EventStore
from helix_agents.auth import IDENTITY_KEY
from helix_agents.errors import AgentServerError
from helix_agents.log.diff import diff_logs
from helix_agents.log.pricing import Prices
from helix_agents.server.edge import checked_id

from .snapshot import take_snapshot

__all__ = ["ASSETS", "Inspector", "asset", "diff", "diff_page", "page", "snapshot", "store_of"]

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


class Inspector:
    """What the inspector's data route serves from (``app.state.inspector``).

    Args:
        store: the gateway's event store (``None``: it fronts another gateway,
            and ``/snapshot`` answers ``NOT_FOUND``).
        prices: what tokens cost, for each node's cost (``None``: the defaults).
    """

    def __init__(self, store: EventStore | None, prices: Prices | None = None) -> None:
        self.store = store
        self.prices = prices

    def needs_store(self) -> EventStore:
        """The store, or ``NOT_FOUND`` when there is none to inspect."""
        if self.store is None:
            raise AgentServerError(
                "NOT_FOUND", "this gateway has no event store to inspect (it fronts another one)"
            )
        return self.store


async def page(request: Request) -> Response:
    """``GET /ui``: the page (no auth: it holds no data)."""
    return _asset("index.html")


async def asset(request: Request) -> Response:
    """``GET /ui/assets/{name}``: the page's script or style sheet."""
    name = request.path_params["name"]
    if name not in ASSETS:
        raise AgentServerError("NOT_FOUND", f"no asset {name!r}")
    return _asset(name)


async def snapshot(request: Request) -> Response:
    """``GET /snapshot``: a session tree at a sequence of its root's log."""
    inspector: Inspector = request.app.state.inspector
    session_id = checked_id(request.query_params.get("sessionId", ""))
    identity = request.scope["state"][IDENTITY_KEY]  # the route's Authenticate
    await request.app.state.gateway.gate.session(identity, "read", session_id)
    at = _int_param(request, "at", minimum=1)
    taken = await take_snapshot(inspector.needs_store(), session_id, at, inspector.prices)
    return Response(_encoder.encode(taken), media_type="application/json")


async def diff_page(request: Request) -> Response:
    """``GET /ui/diff``: the page comparing two branches (no auth: it holds no data)."""
    return _asset("diff.html")


async def diff(request: Request) -> Response:
    """``GET /diff``: sessions ``a`` and ``b`` compared from their common prefix (a ``LogDiff``)."""
    inspector: Inspector = request.app.state.inspector
    ids = [checked_id(request.query_params.get(name, "")) for name in ("a", "b")]
    identity = request.scope["state"][IDENTITY_KEY]  # the route's Authenticate
    for session_id in ids:  # both within reach, or 404 as if missing
        await request.app.state.gateway.gate.session(identity, "read", session_id)
    store = inspector.needs_store()
    logs = []
    for session_id in ids:
        log = await store.read(session_id)
        if not log:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        logs.append(log)
    compared = diff_logs(logs[0], logs[1], prices=inspector.prices)
    return Response(_encoder.encode(compared), media_type="application/json")
