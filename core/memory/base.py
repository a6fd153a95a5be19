"""The ``MemoryStore`` seam: namespaced JSON items that outlive a session.

An item is addressed by a namespace (a tuple of strings, its first element the
owning tenant: ``("acme", "user-7", "prefs")``) and a key (``"language"``);
its value is a JSON object. Each write bumps the item's ``version`` (1 for a
new item); a delete leaves a tombstone, so versions never restart. Tools reach
it through ``ctx.memory`` (:class:`~helix_agents.memory.tools.ToolMemory`),
which confines them to their session's tenant and records every read and
write in the session's log (``specs/server.md "Memory"``).

Implementations (``helix_agents.stores``): ``InMemoryMemoryStore``,
``SqliteMemoryStore``, ``JetStreamMemoryStore``; each event store of
``helix_agents.stores`` offers its own (:func:`memory_of`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Protocol, runtime_checkable

import msgspec

from helix_agents.errors import UsageError

__all__ = [
    "DEFAULT_TENANT",
    "MAX_KEY_CHARS",
    "MAX_NAMESPACE_DEPTH",
    "MAX_PART_CHARS",
    "MAX_SEARCH_LIMIT",
    "MAX_VALUE_BYTES",
    "HasMemory",
    "MemoryItem",
    "MemoryStore",
    "StoredItem",
    "check_key",
    "check_namespace",
    "check_page",
    "check_value",
    "first_write",
    "plan_delete",
    "plan_put",
    "matches",
    "memory_of",
    "query_terms",
    "ranked",
]

DEFAULT_TENANT = "_"
"""The tenant of sessions (and callers) that name none: no auth, a service identity."""

MAX_NAMESPACE_DEPTH = 8
"""Elements a namespace may have, the tenant included."""

MAX_PART_CHARS = 128
"""Characters a namespace element may have."""

MAX_KEY_CHARS = 256
"""Characters a key may have."""

MAX_VALUE_BYTES = 64 * 1024
"""Bytes a value may take as JSON (it is recorded in the writing session's log too)."""

MAX_SEARCH_LIMIT = 100
"""Items one search or list may return."""


class MemoryItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """One stored item: where it is, its JSON object, when it was made and last changed."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    version: int
    created: float
    updated: float


class StoredItem(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """An item as the backends keep it: a tombstone after a delete, and its last write's token."""

    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any] | None
    version: int
    created: float
    updated: float
    deleted: bool = False
    token: str | None = None

    @property
    def item(self) -> MemoryItem | None:
        """The item a reader sees (None for a tombstone)."""
        if self.deleted or self.value is None:
            return None
        return MemoryItem(
            namespace=self.namespace,
            key=self.key,
            value=self.value,
            version=self.version,
            created=self.created,
            updated=self.updated,
        )

    def written(self, value: dict[str, Any] | None, token: str | None, now: float) -> StoredItem:
        """This item after a put of ``value`` (None: a delete) carrying ``token``."""
        created = now if self.deleted else self.created
        return StoredItem(
            namespace=self.namespace,
            key=self.key,
            value=value,
            version=self.version + 1,
            created=created,
            updated=now,
            deleted=value is None,
            token=token,
        )

    def repeats(self, token: str | None) -> bool:
        """Whether a write carrying ``token`` was this item's last (so is not made again)."""
        return token is not None and self.token == token


def first_write(
    namespace: tuple[str, ...], key: str, value: dict[str, Any], token: str | None, now: float
) -> StoredItem:
    """A new item: version 1."""
    return StoredItem(
        namespace=namespace, key=key, value=value, version=1, created=now, updated=now, token=token
    )


def plan_put(
    current: StoredItem | None,
    namespace: tuple[str, ...],
    key: str,
    value: dict[str, Any],
    token: str | None,
    now: float,
) -> tuple[StoredItem | None, MemoryItem]:
    """What a put stores (None: nothing, a repeated token) and what it returns."""
    if current is not None and not current.deleted and current.repeats(token):
        item = current.item
        assert item is not None
        return None, item
    new = (
        first_write(namespace, key, value, token, now)
        if current is None
        else current.written(value, token, now)
    )
    item = new.item
    assert item is not None
    return new, item


def plan_delete(
    current: StoredItem | None, token: str | None, now: float
) -> tuple[StoredItem | None, MemoryItem | None]:
    """What a delete stores (None: nothing, no item) and the item as it was."""
    if current is not None and current.deleted and current.repeats(token):
        # This delete was made already (a rerun): the item as it was, its value gone.
        return None, MemoryItem(
            namespace=current.namespace,
            key=current.key,
            value={},
            version=current.version - 1,
            created=current.created,
            updated=current.updated,
        )
    if current is None or current.deleted:
        return None, None
    return current.written(None, token, now), current.item


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _check_text(text: object, what: str, longest: int) -> str:
    if not isinstance(text, str) or not 1 <= len(text) <= longest:
        raise UsageError(f"{what} must be a string of 1 to {longest} characters, not {text!r}")
    if _CONTROL.search(text):
        raise UsageError(f"{what} {text!r} holds a control character")
    return text


def check_namespace(namespace: object, *, allow_empty: bool = False) -> tuple[str, ...]:
    """``namespace`` as a tuple of valid elements, else :class:`UsageError` (what is wrong).

    Each element is 1 to :data:`MAX_PART_CHARS` characters, no control one, no ``.`` (the
    separator of ``a.b.c``, the form HTTP takes); at most
    :data:`MAX_NAMESPACE_DEPTH` of them; empty only with ``allow_empty`` (a prefix).
    """
    if isinstance(namespace, str) or not isinstance(namespace, Iterable):
        raise UsageError(f"a namespace is a sequence of strings, not {namespace!r}")
    parts = tuple(namespace)
    if not parts and not allow_empty:
        raise UsageError("a namespace needs at least one element")
    if len(parts) > MAX_NAMESPACE_DEPTH:
        raise UsageError(
            f"a namespace has at most {MAX_NAMESPACE_DEPTH} elements, not {len(parts)}"
        )
    for part in parts:
        _check_text(part, "a namespace element", MAX_PART_CHARS)
        if "." in part:
            raise UsageError(f"a namespace element cannot hold '.' (it separates them): {part!r}")
    return parts


def check_key(key: object) -> str:
    """``key`` if it is 1 to :data:`MAX_KEY_CHARS` characters, none a control one."""
    return _check_text(key, "a memory key", MAX_KEY_CHARS)


def check_value(value: object) -> dict[str, Any]:
    """``value`` as plain JSON data if it is a JSON object within :data:`MAX_VALUE_BYTES`.

    Raises:
        UsageError: not a dict, not JSON-able, or too large.
    """
    if not isinstance(value, dict):
        raise UsageError(f"a memory value is a JSON object, not {type(value).__name__}")
    try:
        data = msgspec.json.encode(value)
    except (TypeError, msgspec.EncodeError) as exc:
        raise UsageError(f"a memory value must be JSON: {exc}") from None
    if len(data) > MAX_VALUE_BYTES:
        raise UsageError(
            f"a memory value takes {len(data)} bytes as JSON; the most is {MAX_VALUE_BYTES}"
        )
    plain: dict[str, Any] = msgspec.json.decode(data)
    return plain


def check_page(limit: object, offset: object) -> tuple[int, int]:
    """``(limit, offset)`` if ``1 <= limit <= MAX_SEARCH_LIMIT`` and ``offset >= 0``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise UsageError(f"limit must be an integer from 1 to {MAX_SEARCH_LIMIT}, not {limit!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise UsageError(f"offset must be an integer >= 0, not {offset!r}")
    return limit, offset


def query_terms(query: str | None) -> list[str]:
    """The lower-cased, whitespace-separated terms of a search ``query`` (none: match all)."""
    if query is None:
        return []
    if not isinstance(query, str) or len(query) > 1000:
        raise UsageError("a memory query is a string of at most 1000 characters")
    return query.lower().split()


def _texts(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield str(key)
            yield from _texts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _texts(inner)
    elif value is not None:
        yield str(value)


def matches(item: MemoryItem, terms: Sequence[str]) -> bool:
    """Whether every term is a (case-insensitive) substring of the item's key, or of a key or
    a leaf of its value (strings, numbers, booleans as text)."""
    if not terms:
        return True
    text = "\n".join([item.key, *_texts(item.value)]).lower()
    return all(term in text for term in terms)


def ranked(items: Iterable[MemoryItem]) -> list[MemoryItem]:
    """Items in a search's order: the most recently updated first, then by namespace and key."""
    return sorted(items, key=lambda item: (-item.updated, item.namespace, item.key))


class MemoryStore(Protocol):
    """A store of namespaced items (see the module). Namespaces here are absolute (tenant first).

    Every method checks its arguments (:func:`check_namespace`, :func:`check_key`,
    :func:`check_value`, :func:`check_page`) and raises :class:`UsageError`
    for bad ones, writing nothing.
    """

    async def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item, or None when there is none (or it was deleted)."""
        ...

    async def put(
        self, namespace: Sequence[str], key: str, value: dict[str, Any], *, token: str | None = None
    ) -> MemoryItem:
        """Write the item (its version + 1) and return it.

        ``token``: an idempotency key; when the item's last write carried the
        same token, nothing is written and the item is returned as it is.
        """
        ...

    async def delete(
        self, namespace: Sequence[str], key: str, *, token: str | None = None
    ) -> MemoryItem | None:
        """Delete the item; return it as it was (None: there was none, nothing written).

        A tombstone keeps its version, so a later put goes on from it. ``token``:
        as for :meth:`put` (a repeated delete returns None).
        """
        ...

    async def search(
        self,
        prefix: Sequence[str],
        *,
        query: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """The items whose namespace starts with ``prefix`` (and that match ``query``).

        :func:`matches` says what a query matches; :func:`ranked` the order.
        """
        ...

    async def close(self) -> None:
        """Release the store's resources."""
        ...


@runtime_checkable
class HasMemory(Protocol):
    """An event store with a memory store beside its logs (each of ``helix_agents.stores``)."""

    def memory_store(self) -> MemoryStore:
        """Its memory store: one per event store, closed with it."""
        ...


def memory_of(store: object) -> MemoryStore | None:
    """The memory store an event store offers (:class:`HasMemory`), else None (a read-only
    SQLite store offers none)."""
    if isinstance(store, HasMemory):
        try:
            return store.memory_store()
        except UsageError:
            return None
    return None
