"""The bodies of the memory routes (``GET``/``PUT``/``DELETE /memory``), for handlers and schema."""

from __future__ import annotations

from typing import Any

import msgspec

from helix_agents.memory import MemoryItem

__all__ = ["MEMORY_MODELS", "MemoryDeleted", "MemoryItems", "MemoryPutRequest"]


class MemoryPutRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``PUT /memory``: write ``value`` at ``namespace`` (``a.b``, below the caller's tenant)."""

    namespace: str
    key: str
    value: dict[str, Any]
    tenant: str | None = None
    """Another tenant's item: for an identity of every tenant only (an admin)."""


class MemoryItems(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``GET /memory``'s answer: the item asked for (none or one), or a page of a search."""

    items: list[MemoryItem]


class MemoryDeleted(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``DELETE /memory``'s answer: whether there was an item."""

    deleted: bool


MEMORY_MODELS: list[type[msgspec.Struct]] = [MemoryPutRequest, MemoryItems, MemoryDeleted]
"""The structs of the memory routes, for the document's components."""
