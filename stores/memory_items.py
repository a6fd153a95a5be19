"""``InMemoryMemoryStore``: memory items in a dict, for tests, demos and ephemeral runs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from helix_agents.errors import StoreClosedError
from helix_agents.memory.base import (
    MemoryItem,
    StoredItem,
    check_key,
    check_namespace,
    check_page,
    check_value,
    matches,
    plan_delete,
    plan_put,
    query_terms,
    ranked,
)

__all__ = ["InMemoryMemoryStore"]


class InMemoryMemoryStore:
    """An in-process :class:`~helix_agents.memory.MemoryStore`; nothing survives the process.

    Each operation runs without awaiting, so each is atomic.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[tuple[str, ...], str], StoredItem] = {}
        self._closed = False

    def __repr__(self) -> str:
        return f"<InMemoryMemoryStore {len(self._items)} items>"

    def _ensure_open(self) -> None:
        if self._closed:
            raise StoreClosedError()

    async def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item, or None."""
        self._ensure_open()
        stored = self._items.get((check_namespace(namespace), check_key(key)))
        return None if stored is None else stored.item

    async def put(
        self, namespace: Sequence[str], key: str, value: dict[str, Any], *, token: str | None = None
    ) -> MemoryItem:
        """Write the item (see ``MemoryStore.put``)."""
        self._ensure_open()
        where = (check_namespace(namespace), check_key(key))
        plain = check_value(value)
        new, item = plan_put(self._items.get(where), *where, plain, token, time.time())
        if new is not None:
            self._items[where] = new
        return item

    async def delete(
        self, namespace: Sequence[str], key: str, *, token: str | None = None
    ) -> MemoryItem | None:
        """Delete the item (see ``MemoryStore.delete``)."""
        self._ensure_open()
        where = (check_namespace(namespace), check_key(key))
        new, was = plan_delete(self._items.get(where), token, time.time())
        if new is not None:
            self._items[where] = new
        return was

    async def search(
        self,
        prefix: Sequence[str],
        *,
        query: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """The items under ``prefix`` matching ``query`` (see ``MemoryStore.search``)."""
        self._ensure_open()
        head = check_namespace(prefix, allow_empty=True)
        limit, offset = check_page(limit, offset)
        terms = query_terms(query)
        found = [
            item
            for (namespace, _key), stored in self._items.items()
            if namespace[: len(head)] == head
            and (item := stored.item) is not None
            and matches(item, terms)
        ]
        return ranked(found)[offset : offset + limit]

    async def close(self) -> None:
        """Mark the store closed."""
        self._closed = True
