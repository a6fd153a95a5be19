"""``GET /sessions``: the gateway's session list (``specs/http.md``), over a ``SessionCatalog``.

Query parameters: ``status``, ``agent``, ``topLevel`` (``true``/``false``),
``q`` (text search), ``metadata.KEY=VALUE`` (repeatable, one per key),
``createdAfter``/``createdBefore``/``updatedAfter``/``updatedBefore`` (epoch
seconds or ISO 8601), ``limit`` (1-500, default 50) and ``cursor`` (a
previous page's ``nextCursor``; empty, as absent: the first page). An identity bound
to a tenant lists only its tenant's sessions (``specs/auth.md``). The answer is a
:class:`~helix_agents.log.session_list.SessionListPage`.
A gateway whose target has no store of its own (it fronts another gateway)
answers ``NOT_FOUND``.
"""

from __future__ import annotations

import msgspec
from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from helix_agents.errors import AgentServerError
from helix_agents.log.search import MAX_METADATA_FILTERS, SessionQuery, parse_time
from helix_agents.log.session_list import DEFAULT_PAGE_SIZE, MAX_PAGE_SIZE

from .context import gateway_of
from .middleware import identity_of

__all__ = ["sessions"]

_encoder = msgspec.json.Encoder()

_METADATA = "metadata."
_SINGLE = (
    "status",
    "agent",
    "topLevel",
    "q",
    "createdAfter",
    "createdBefore",
    "updatedAfter",
    "updatedBefore",
    "limit",
    "cursor",
)


def _invalid(message: str) -> AgentServerError:
    return AgentServerError("INVALID_REQUEST", message)


def _query(params: QueryParams) -> SessionQuery:
    """The search part of the request: text, metadata filters and time bounds."""
    for name in _SINGLE:
        if len(params.getlist(name)) > 1:
            raise _invalid(f"{name} is given more than once")
    metadata = [
        (name[len(_METADATA) :], value)
        for name, value in params.multi_items()
        if name.startswith(_METADATA)
    ]
    if len(metadata) > MAX_METADATA_FILTERS:
        raise _invalid(f"at most {MAX_METADATA_FILTERS} metadata filters")
    text = (params.get("q") or "").strip() or None

    def when(name: str) -> float | None:
        raw = params.get(name)
        return None if raw is None else parse_time(name, raw)

    return SessionQuery.build(
        text=text,
        metadata=metadata,
        created_after=when("createdAfter"),
        created_before=when("createdBefore"),
        updated_after=when("updatedAfter"),
        updated_before=when("updatedBefore"),
    )


def _flag(name: str, raw: str | None) -> bool:
    if raw is None or raw == "false":
        return False
    if raw == "true":
        return True
    raise AgentServerError("INVALID_REQUEST", f"{name} must be true or false, not {raw!r}")


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_PAGE_SIZE
    # The length first: int() of over 4,300 digits raises ValueError (a 500).
    digits = raw.lstrip("0") or "0"
    if (
        not (raw.isascii() and raw.isdigit())
        or len(digits) > len(str(MAX_PAGE_SIZE))
        or not 1 <= int(digits) <= MAX_PAGE_SIZE
    ):
        shown = raw if len(raw) <= 40 else f"{raw[:40]}..."
        raise AgentServerError(
            "INVALID_REQUEST", f"limit must be an integer from 1 to {MAX_PAGE_SIZE}, not {shown!r}"
        )
    return int(digits)


async def sessions(request: Request) -> Response:
    """``GET /sessions``: a page of the sessions of the store (of the identity's tenant)."""
    gateway = gateway_of(request)
    catalog = gateway.catalog
    if catalog is None:
        raise AgentServerError("NOT_FOUND", "this gateway has no session store to list")
    params = request.query_params
    query = _query(params)
    page = await catalog.page(
        status=params.get("status"),
        agent_type=params.get("agent"),
        top_level=_flag("topLevel", params.get("topLevel")),
        limit=_limit(params.get("limit")),
        cursor=params.get("cursor") or None,  # empty: the first page (the schema allows it)
        query=query,
        tenant=gateway.gate.tenant_filter(identity_of(request)),
    )
    return Response(_encoder.encode(page), media_type="application/json")
