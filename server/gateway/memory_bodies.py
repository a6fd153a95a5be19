"""The bodies of the memory routes (``GET``/``PUT``/``DELETE /memory``), for handlers and schema."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from helix_agents.memory import MemoryItem
from helix_agents.memory.base import MAX_KEY_CHARS, MAX_NAMESPACE_DEPTH, MAX_PART_CHARS

__all__ = [
    "KEY_PATTERN",
    "MEMORY_MODELS",
    "NAMESPACE_PATTERN",
    "TENANT_PATTERN",
    "MemoryDeleted",
    "MemoryItems",
    "MemoryPutRequest",
]

_CHAR = "[^\\x00-\\x1f\\x7f-\\x9f]"
_PART = f"[^.\\x00-\\x1f\\x7f-\\x9f]{{1,{MAX_PART_CHARS}}}"

NAMESPACE_PATTERN = f"^({_PART}(\\.{_PART}){{0,{MAX_NAMESPACE_DEPTH - 2}}})?$"
"""A namespace below a tenant as HTTP writes it (``a.b.c``; empty: the tenant's own):
elements without ``.`` or a control character, at most the depth a tenant leaves."""

TENANT_PATTERN = f"^{_PART}$"
"""A tenant: one namespace element."""

KEY_PATTERN = f"^{_CHAR}{{1,{MAX_KEY_CHARS}}}$"
"""A key: 1-256 characters, no control one."""


class MemoryPutRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``PUT /memory``: write ``value`` at ``namespace`` (``a.b``, below the caller's tenant)."""

    namespace: Annotated[str, msgspec.Meta(pattern=NAMESPACE_PATTERN)] = ""
    key: Annotated[str, msgspec.Meta(pattern=KEY_PATTERN)]
    value: dict[str, Any]
    tenant: Annotated[str, msgspec.Meta(pattern=TENANT_PATTERN)] | None = None
    """Another tenant's item: for an identity of every tenant only (an admin)."""


class MemoryItems(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``GET /memory``'s answer: the item asked for (none or one), or a page of a search."""

    items: list[MemoryItem]


class MemoryDeleted(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """``DELETE /memory``'s answer: whether there was an item."""

    deleted: bool


MEMORY_MODELS: list[type[msgspec.Struct]] = [MemoryPutRequest, MemoryItems, MemoryDeleted]
"""The structs of the memory routes, for the document's components."""
