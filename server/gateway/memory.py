"""The memory routes (specs/server.md "Memory"): a client's view of its tenant's items.

``GET /memory?namespace=a.b&key=k`` reads an item; without ``key``, a search
(``query``) or a listing of the namespace prefix, paged (``limit``, ``offset``).
``PUT /memory`` writes one, ``DELETE /memory?namespace=a.b&key=k`` deletes it.
Namespaces are written ``a.b.c`` and are below the caller's tenant (its
identity's, ``_`` without one), which is prepended, and answers name them the
same way: a caller sees and changes only its tenant's items. An identity of
every tenant (an admin) may name another with ``tenant``. These writes come
from no session, so no log records them (a tool's do).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from helix_agents.auth import Identity
from helix_agents.errors import AgentServerError, UsageError
from helix_agents.memory import DEFAULT_TENANT, MemoryStore, memory_of
from helix_agents.memory.base import (
    MAX_SEARCH_LIMIT,
    MemoryItem,
    check_key,
    check_namespace,
    check_page,
    query_terms,
)
from helix_agents.memory.tools import relative
from helix_agents.server.edge import decode
from helix_agents.server.ui import store_of

from .context import gateway_of
from .memory_bodies import (
    KEY_PATTERN,
    NAMESPACE_PATTERN,
    TENANT_PATTERN,
    MemoryDeleted,
    MemoryItems,
    MemoryPutRequest,
)
from .middleware import identity_of
from .openapi_components import ERRORS, ref
from .responses import json_response

__all__ = ["DELETE_MEMORY", "GET_MEMORY", "PUT_MEMORY", "delete_memory", "get_memory", "put_memory"]


def _store(request: Request) -> MemoryStore:
    memory = memory_of(store_of(gateway_of(request).transport))
    if memory is None:
        raise AgentServerError("NOT_FOUND", "this gateway has no memory store")
    return memory


def _tenant(identity: Identity, asked: str | None) -> str:
    own = identity.tenant if identity.tenant is not None else DEFAULT_TENANT
    if asked is None or asked == own:
        return own
    if not identity.all_tenants:
        raise AgentServerError("FORBIDDEN", "only an identity of every tenant may name a tenant")
    return check_namespace([asked])[0]


def _namespace(tenant: str, dotted: str | None) -> tuple[str, ...]:
    """``tenant`` then the elements of ``a.b.c`` (none: the tenant's own namespace)."""
    return check_namespace([tenant, *([] if not dotted else dotted.split("."))])


def _int(raw: str | None, name: str, default: int) -> int:
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 9:
        raise UsageError(f"{name} must be an integer from 0 to 999999999, not {raw[:20]!r}")
    return int(raw)


def _refused(exc: UsageError) -> AgentServerError:
    return AgentServerError("INVALID_REQUEST", str(exc))


def _shown(items: list[MemoryItem]) -> MemoryItems:
    return MemoryItems(items=[relative(item) for item in items])


async def get_memory(request: Request) -> Response:
    """``GET /memory``: an item (``key``), or a search or listing under ``namespace``."""
    params = request.query_params
    memory = _store(request)
    tenant = _tenant(identity_of(request), params.get("tenant"))
    try:
        # Every parameter is checked, whichever the request uses.
        namespace = _namespace(tenant, params.get("namespace"))
        query = params.get("query") or None
        query_terms(query)
        limit, offset = check_page(
            _int(params.get("limit"), "limit", 10), _int(params.get("offset"), "offset", 0)
        )
        key = params.get("key")
        if key is not None:
            item = await memory.get(namespace, key)
            return json_response(_shown([] if item is None else [item]))
        items = await memory.search(namespace, query=query, limit=limit, offset=offset)
    except UsageError as exc:
        raise _refused(exc) from None
    return json_response(_shown(items))


async def put_memory(request: Request) -> Response:
    """``PUT /memory``: write an item; the answer is the item as written."""
    body = decode(await request.body(), MemoryPutRequest)
    memory = _store(request)
    tenant = _tenant(identity_of(request), body.tenant)
    try:
        item = await memory.put(_namespace(tenant, body.namespace), check_key(body.key), body.value)
    except UsageError as exc:
        raise _refused(exc) from None
    return json_response(relative(item))


async def delete_memory(request: Request) -> Response:
    """``DELETE /memory``: delete an item; whether there was one."""
    params = request.query_params
    memory = _store(request)
    tenant = _tenant(identity_of(request), params.get("tenant"))
    try:
        namespace = _namespace(tenant, params.get("namespace"))
        was = await memory.delete(namespace, check_key(params.get("key")))
    except UsageError as exc:
        raise _refused(exc) from None
    return json_response(MemoryDeleted(deleted=was is not None))


# --- their OpenAPI operations ------------------------------------------------------


def _query(
    name: str, schema: dict[str, Any], description: str, *, required: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "required": required,
        "schema": schema,
        "description": description,
    }


def _namespace_query(what: str) -> dict[str, Any]:
    return _query(
        "namespace",
        {"type": "string", "pattern": NAMESPACE_PATTERN},
        f"The namespace below the caller's tenant, its elements joined by '.' (a.b.c); {what}",
    )


_TENANT = _query(
    "tenant",
    {"type": "string", "pattern": TENANT_PATTERN},
    "Another tenant (an identity of every tenant only)",
)


def _answers(name: str, description: str, statuses: tuple[str, ...], auth: bool) -> Any:
    answers: dict[str, Any] = {
        "200": {"description": description, "content": {"application/json": {"schema": ref(name)}}}
    }
    for status in statuses:
        if status in ("401", "403") and not auth:
            continue
        answers[status] = {
            "description": ERRORS[status],
            "content": {"application/json": {"schema": ref("ErrorBody")}},
        }
    return answers


def _security(auth: bool) -> dict[str, Any]:
    return {"security": [{"bearer": []}]} if auth else {}


_KEY = {"type": "string", "pattern": KEY_PATTERN}
_PAGE = f"Items per page (default 10, at most {MAX_SEARCH_LIMIT})"
_STATUSES = ("400", "401", "403", "404", "405", "413", "500", "503")


def GET_MEMORY(*, auth: bool) -> dict[str, Any]:
    """``GET /memory``."""
    return {
        "operationId": "getMemory",
        "summary": "An item of the caller's tenant's memory, or a search of it (newest first)",
        **_security(auth),
        "parameters": [
            _namespace_query("a search's prefix (empty: every item of the tenant)"),
            _query("key", _KEY, "The item's key: read that one item (else a search)"),
            _query("query", {"type": "string", "maxLength": 1000}, "Terms every item holds"),
            _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_SEARCH_LIMIT}, _PAGE),
            _query("offset", {"type": "integer", "minimum": 0, "maximum": 10**9 - 1}, "Skipped"),
            _TENANT,
        ],
        "responses": _answers("MemoryItems", "the item (none or one), or a page", _STATUSES, auth),
    }


def PUT_MEMORY(*, auth: bool) -> dict[str, Any]:
    """``PUT /memory``."""
    return {
        "operationId": "putMemory",
        "summary": "Write an item of the caller's tenant's memory (its version + 1)",
        **_security(auth),
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": ref("MemoryPutRequest")}},
        },
        "responses": _answers("MemoryItem", "the item written", _STATUSES, auth),
    }


def DELETE_MEMORY(*, auth: bool) -> dict[str, Any]:
    """``DELETE /memory``."""
    return {
        "operationId": "deleteMemory",
        "summary": "Delete an item of the caller's tenant's memory",
        **_security(auth),
        "parameters": [
            _namespace_query("the item's (empty: the tenant's own)"),
            _query("key", _KEY, "The item's key", required=True),
            _TENANT,
        ],
        "responses": _answers("MemoryDeleted", "whether there was an item", _STATUSES, auth),
    }
