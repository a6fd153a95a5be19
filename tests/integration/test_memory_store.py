"""The ``MemoryStore`` conformance suite, on each store backend's own memory store.

Memory, SQLite (a table of the event store's file) and JetStream KV (a bucket
beside the stream, on a real nats-server): each event store's
``memory_store()``. Two stores opened at one location (two SQLite connections
to one file, two NATS connections to one stream) play two hosts.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import StoreFactory

from helix_agents.errors import StoreClosedError, UsageError
from helix_agents.memory import MemoryStore, memory_of
from helix_agents.memory.base import MAX_SEARCH_LIMIT, MAX_VALUE_BYTES
from helix_agents.stores import (
    InMemoryMemoryStore,
    JetStreamMemoryStore,
    MemoryEventStore,
    SqliteEventStore,
    SqliteMemoryStore,
)
from helix_agents.stores.jetstream.memory import memory_key

NS = ("acme", "user-7", "prefs")


async def _memory(store_factory: StoreFactory) -> MemoryStore:
    memory = memory_of(await store_factory.open())
    assert memory is not None
    return memory


async def test_each_event_store_offers_its_own_kind_once(store_factory: StoreFactory) -> None:
    store = await store_factory.open()
    memory = memory_of(store)
    kinds = {
        "memory": InMemoryMemoryStore,
        "sqlite": SqliteMemoryStore,
        "nats": JetStreamMemoryStore,
    }
    assert isinstance(memory, kinds[store_factory.backend])
    assert memory_of(store) is memory  # one per event store


async def test_put_get_versions_and_timestamps(store_factory: StoreFactory) -> None:
    memory = await _memory(store_factory)
    assert await memory.get(NS, "language") is None
    first = await memory.put(NS, "language", {"lang": "fr"})
    assert (first.namespace, first.key, first.value, first.version) == (
        NS,
        "language",
        {"lang": "fr"},
        1,
    )
    assert first.created == first.updated
    second = await memory.put(NS, "language", {"lang": "de", "n": [1, 2.5, None, True]})
    assert second.version == 2
    assert second.created == first.created
    assert second.updated >= first.updated
    assert await memory.get(NS, "language") == second
    # a sibling key, and the same key under another namespace, are other items
    await memory.put(NS, "tz", {"tz": "Europe/Paris"})
    await memory.put(("acme", "user-8", "prefs"), "language", {"lang": "en"})
    got = await memory.get(NS, "language")
    assert got is not None
    assert got.value == {"lang": "de", "n": [1, 2.5, None, True]}


async def test_delete_leaves_a_tombstone_so_versions_go_on(store_factory: StoreFactory) -> None:
    memory = await _memory(store_factory)
    await memory.put(NS, "k", {"a": 1})
    await memory.put(NS, "k", {"a": 2})
    was = await memory.delete(NS, "k")
    assert was is not None
    assert was.version == 2
    assert was.value == {"a": 2}
    assert await memory.get(NS, "k") is None
    assert await memory.delete(NS, "k") is None  # nothing there: nothing written
    assert await memory.search(NS) == []
    again = await memory.put(NS, "k", {"a": 3})
    assert again.version == 4  # 1, 2, the tombstone's 3, then 4


async def test_a_repeated_token_writes_nothing(store_factory: StoreFactory) -> None:
    memory = await _memory(store_factory)
    first = await memory.put(NS, "k", {"a": 1}, token="s/call_1/0")
    repeat = await memory.put(NS, "k", {"a": 1}, token="s/call_1/0")
    assert repeat == first
    assert repeat.version == 1
    other = await memory.put(NS, "k", {"a": 2}, token="s/call_2/0")
    assert other.version == 2
    gone = await memory.delete(NS, "k", token="s/call_3/0")
    assert gone is not None
    assert gone.version == 2
    repeated = await memory.delete(NS, "k", token="s/call_3/0")  # a rerun of that delete
    assert repeated is not None
    assert repeated.version == 2
    assert (await memory.put(NS, "k", {"a": 3})).version == 4


async def test_search_by_prefix_and_terms_newest_first_in_pages(
    store_factory: StoreFactory,
) -> None:
    memory = await _memory(store_factory)
    await memory.put(("acme", "u1", "notes"), "trip", {"text": "Lyon in May", "days": 4})
    await anyio.sleep(0.01)
    await memory.put(("acme", "u1", "notes"), "food", {"likes": ["Quenelles", "cheese"]})
    await anyio.sleep(0.01)
    await memory.put(("acme", "u1", "prefs"), "language", {"lang": "fr"})
    await anyio.sleep(0.01)
    await memory.put(("acme", "u2", "notes"), "trip", {"text": "Lyon again"})
    await memory.put(("acme2", "u1", "notes"), "trip", {"text": "Lyon, other tenant"})

    def names(items: list[Any]) -> list[tuple[tuple[str, ...], str]]:
        return [(item.namespace, item.key) for item in items]

    assert names(await memory.search(("acme", "u1"))) == [
        (("acme", "u1", "prefs"), "language"),
        (("acme", "u1", "notes"), "food"),
        (("acme", "u1", "notes"), "trip"),
    ]
    # a prefix is whole elements: "acme" does not reach "acme2"
    assert len(await memory.search(("acme",), limit=100)) == 4
    assert len(await memory.search((), limit=100)) == 5
    # terms: each a case-insensitive substring of the key or of a key or leaf of the value
    assert names(await memory.search(("acme",), query="lyon")) == [
        (("acme", "u2", "notes"), "trip"),
        (("acme", "u1", "notes"), "trip"),
    ]
    assert names(await memory.search(("acme",), query="QUENELLES likes")) == [
        (("acme", "u1", "notes"), "food")
    ]
    assert names(await memory.search(("acme",), query="lyon may 4")) == [
        (("acme", "u1", "notes"), "trip")
    ]
    assert await memory.search(("acme",), query="lyon paris") == []
    # pages, with and without a query
    everything = await memory.search(("acme",), limit=100)
    assert await memory.search(("acme",), limit=2, offset=1) == everything[1:3]
    lyon = await memory.search(("acme",), query="lyon")
    assert await memory.search(("acme",), query="lyon", limit=1, offset=1) == lyon[1:]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda m: m.get((), "k"), "at least one element"),
        (lambda m: m.get("acme", "k"), "sequence of strings"),
        (lambda m: m.get(("acme", ""), "k"), "1 to 128"),
        (lambda m: m.get(("acme", "a\nb"), "k"), "control character"),
        (lambda m: m.get(("acme", "a.b"), "k"), "cannot hold '.'"),
        (lambda m: m.get(tuple("abcdefghi"), "k"), "at most 8"),
        (lambda m: m.get(NS, ""), "1 to 256"),
        (lambda m: m.put(NS, "k", ["not", "an", "object"]), "JSON object"),
        (lambda m: m.put(NS, "k", {"x": object()}), "must be JSON"),
        (lambda m: m.put(NS, "k", {"x": "y" * MAX_VALUE_BYTES}), "bytes as JSON"),
        (lambda m: m.search(NS, limit=0), "limit"),
        (lambda m: m.search(NS, limit=MAX_SEARCH_LIMIT + 1), "limit"),
        (lambda m: m.search(NS, offset=-1), "offset"),
    ],
)
async def test_bad_arguments_are_refused_and_write_nothing(
    store_factory: StoreFactory, call: Any, message: str
) -> None:
    memory = await _memory(store_factory)
    with pytest.raises(UsageError, match=message):
        await call(memory)
    assert await memory.search((), limit=100) == []


async def test_two_stores_at_one_location_share_items(store_factory: StoreFactory) -> None:
    """Two hosts (two connections to one SQLite file, or to one NATS stream) read each other's
    writes at once; concurrent writes to one item each land, one version apart."""
    if not store_factory.persistent:
        pytest.skip("a memory store lives in one process")
    one = await _memory(store_factory)
    two = await _memory(store_factory)
    assert one is not two
    await one.put(NS, "language", {"lang": "fr"})
    got = await two.get(NS, "language")
    assert got is not None
    assert got.value == {"lang": "fr"}
    async with anyio.create_task_group() as tg:
        for n in range(10):
            tg.start_soon(one.put if n % 2 else two.put, NS, "counter", {"n": n})
    final = await one.get(NS, "counter")
    assert final is not None
    assert final.version == 10


async def test_closed_store_refuses() -> None:
    store = MemoryEventStore()
    memory = memory_of(store)
    assert memory is not None
    await store.close()
    with pytest.raises(StoreClosedError):
        await memory.get(NS, "k")


def test_kv_keys_fit_the_charset_and_nest_by_prefix() -> None:
    key = memory_key(("acme corp", "ü/ser 7", "*>"), "lang.uage")
    assert all(c.isalnum() or c in "-_=." for c in key)
    assert key.count(".") == 3
    assert key.startswith(memory_key(("acme corp", "ü/ser 7"), "x").rsplit(".", 1)[0] + ".")
    # an element is not the key of the same text
    assert memory_key(("a",), "b") != memory_key(("a", "b"), "b").rsplit(".", 1)[0]


async def test_a_read_only_sqlite_store_offers_no_memory(tmp_path: Path) -> None:
    """Opened read-only, nothing may be written to the file: no memory store, no table made."""
    path = tmp_path / "ro.db"
    await SqliteEventStore(path).close()
    store = SqliteEventStore(path, read_only=True)
    try:
        assert memory_of(store) is None
    finally:
        await store.close()
    with sqlite3.connect(path) as conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "helix_memory" not in tables
