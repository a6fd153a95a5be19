"""``JetStreamMemoryStore``: memory items in a JetStream KV bucket.

Bucket ``HELIX_MEMORY_<stream>`` (made at first use, ``history=1``) holds a key
per item: each namespace element, then the key, base64url-encoded without
padding and prefixed (``n`` for an element, ``k`` for the key), joined by
``.`` — ``n<acme>.n<user-7>.k<language>`` — so any text fits KV's key charset
(``[-_=.A-Za-z0-9/]``) and a namespace prefix is a subject filter
(``n<acme>.n<user-7>.>``). The value is the stored item as JSON. Writes are
compare-and-set on the entry's revision (``create`` for a new key), retried
when another writer got there first, so a read-modify-write is atomic across
processes. A search asks the bucket's stream which keys are under the prefix
(the stream's state, by subject filter), reads each key's last entry, and
matches them here.

asyncio lives here only because nats-py is asyncio-only; nats-py errors never
leave this module (they become :class:`StoreError`).
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import Iterator, Sequence
from typing import Any

import anyio
import msgspec
import nats.errors
import nats.js.errors
from nats.js.client import JetStreamContext
from nats.js.kv import KeyValue

from helix_agents.errors import StoreError
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

__all__ = ["JetStreamMemoryStore", "memory_key"]

_ATTEMPTS = 20  # compare-and-set rounds lost to other writers before giving up
_decoder = msgspec.json.Decoder(StoredItem)


def _token(prefix: str, text: str) -> str:
    return prefix + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def memory_key(namespace: Sequence[str], key: str) -> str:
    """The KV key of an item (see the module)."""
    return ".".join([*(_token("n", part) for part in namespace), _token("k", key)])


@contextlib.contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except (nats.errors.Error, TimeoutError) as exc:
        raise StoreError(f"jetstream memory store: {exc!r}") from exc


class JetStreamMemoryStore:
    """A :class:`~helix_agents.memory.MemoryStore` in a JetStream KV bucket (see the module).

    Args:
        js: a JetStream context (``JetStreamEventStore.memory_store()`` uses its own).
        bucket: the KV bucket's name.
        replicas: the bucket's replicas, when this store creates it (the stream's, from
            ``JetStreamEventStore.connect``).
    """

    def __init__(self, js: JetStreamContext, bucket: str, *, replicas: int = 1) -> None:
        self._js = js
        self.bucket = bucket
        self._replicas = replicas
        self._kv: KeyValue | None = None
        self._lock = anyio.Lock()

    def __repr__(self) -> str:
        return f"<JetStreamMemoryStore bucket={self.bucket!r}>"

    async def _bucket(self) -> KeyValue:
        async with self._lock:
            if self._kv is None:
                with _translated():
                    try:
                        self._kv = await self._js.key_value(self.bucket)
                    except nats.js.errors.BucketNotFoundError:
                        self._kv = await self._js.create_key_value(
                            bucket=self.bucket, history=1, replicas=self._replicas
                        )
            return self._kv

    @staticmethod
    async def _entry(kv: KeyValue, name: str) -> tuple[StoredItem | None, int | None]:
        """The stored item and the entry's revision (None, None: no such key)."""
        try:
            entry = await kv.get(name)
        except (nats.js.errors.KeyNotFoundError, nats.js.errors.KeyDeletedError):
            return None, None
        if not entry.value:
            return None, entry.revision
        return _decoder.decode(entry.value), entry.revision

    async def get(self, namespace: Sequence[str], key: str) -> MemoryItem | None:
        """The item, or None."""
        name = memory_key(check_namespace(namespace), check_key(key))
        kv = await self._bucket()
        with _translated():
            stored, _ = await self._entry(kv, name)
        return None if stored is None else stored.item

    async def _write(
        self,
        namespace: tuple[str, ...],
        key: str,
        value: dict[str, Any] | None,
        token: str | None,
    ) -> MemoryItem | None:
        """A put (``value``) or a delete (None), compare-and-set until it lands."""
        name = memory_key(namespace, key)
        kv = await self._bucket()
        with _translated():
            for _ in range(_ATTEMPTS):
                current, revision = await self._entry(kv, name)
                now = time.time()
                result: MemoryItem | None
                if value is None:
                    new, result = plan_delete(current, token, now)
                else:
                    new, result = plan_put(current, namespace, key, value, token, now)
                if new is None:
                    return result
                data = msgspec.json.encode(new)
                try:
                    if revision is None:
                        await kv.create(name, data)
                    else:
                        await kv.update(name, data, last=revision)
                except (nats.js.errors.KeyWrongLastSequenceError, nats.js.errors.BadRequestError):
                    continue  # another writer got there first: read again
                return result
        raise StoreError(f"jetstream memory store: {name!r} kept changing ({_ATTEMPTS} attempts)")

    async def put(
        self, namespace: Sequence[str], key: str, value: dict[str, Any], *, token: str | None = None
    ) -> MemoryItem:
        """Write the item (see ``MemoryStore.put``)."""
        parts, key = check_namespace(namespace), check_key(key)
        item = await self._write(parts, key, check_value(value), token)
        assert item is not None
        return item

    async def delete(
        self, namespace: Sequence[str], key: str, *, token: str | None = None
    ) -> MemoryItem | None:
        """Delete the item (see ``MemoryStore.delete``)."""
        parts, key = check_namespace(namespace), check_key(key)
        return await self._write(parts, key, None, token)

    async def search(
        self,
        prefix: Sequence[str],
        *,
        query: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[MemoryItem]:
        """The items under ``prefix`` matching ``query`` (see ``MemoryStore.search``)."""
        head = check_namespace(prefix, allow_empty=True)
        limit, offset = check_page(limit, offset)
        terms = query_terms(query)
        kv = await self._bucket()
        subject = ".".join([*(_token("n", part) for part in head), ">"])
        found: list[MemoryItem] = []
        with _translated():
            # The keys under the prefix, from the stream's own state (a watch's "all
            # seen" marker can come before the entries on a loaded server); then each
            # key's last entry (the bucket keeps no history).
            base = f"$KV.{self.bucket}."
            info = await self._js.stream_info(f"KV_{self.bucket}", subjects_filter=base + subject)
            for name in sorted(info.state.subjects or {}):
                stored, _ = await self._entry(kv, name[len(base) :])
                item = stored.item if stored is not None else None
                if item is not None and matches(item, terms):
                    found.append(item)
        return ranked(found)[offset : offset + limit]

    async def close(self) -> None:
        """Nothing of its own to close: the connection is the event store's."""
        self._kv = None
