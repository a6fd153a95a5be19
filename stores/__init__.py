"""Event stores: where session logs live, chosen by URL with :func:`open_store`.

- ``memory://``: :class:`MemoryEventStore`, in-process, for tests and demos.
- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``:
  :class:`SqliteEventStore`, the embedded default.
- ``nats://host:4222?stream=HELIX_EVENTS&replicas=1``: :class:`JetStreamEventStore`,
  one JetStream stream with a subject per session (``specs/stores.md``);
  ``nats://a:4222,nats://b:4222?...`` lists the servers of a cluster.

Each offers a memory store beside its logs (``memory_store()``, ``helix_agents.memory``):
``InMemoryMemoryStore``, ``SqliteMemoryStore`` (a table of the same file),
``JetStreamMemoryStore`` (a KV bucket).
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import anyio

from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore

from .check import StoreCheck as StoreCheck, check_store as check_store
from .jetstream.memory import JetStreamMemoryStore as JetStreamMemoryStore
from .jetstream.store import (
    DEFAULT_STREAM,
    JetStreamEventStore as JetStreamEventStore,
    nats_servers,
)
from .memory import MemoryEventStore as MemoryEventStore
from .memory_items import InMemoryMemoryStore as InMemoryMemoryStore
from .sqlite.memory import SqliteMemoryStore as SqliteMemoryStore
from .sqlite.store import SqliteEventStore as SqliteEventStore

__all__ = [
    "DEFAULT_STORE_URL",
    "InMemoryMemoryStore",
    "JetStreamEventStore",
    "JetStreamMemoryStore",
    "MemoryEventStore",
    "SqliteEventStore",
    "SqliteMemoryStore",
    "StoreCheck",
    "check_store",
    "open_store",
]

DEFAULT_STORE_URL = "sqlite:///helix.db"
"""The store used when none is named: ``helix.db`` in the working directory."""


async def open_store(url: str = DEFAULT_STORE_URL, *, read_only: bool = False) -> EventStore:
    """Open the event store a URL names.

    ``sqlite:`` URLs follow SQLAlchemy's convention (three slashes and a
    relative path, four for an absolute one) and accept ``?synchronous=NORMAL``.
    ``nats://host:port`` URLs accept ``?stream=NAME`` (default ``HELIX_EVENTS``)
    and ``?replicas=N`` (default 1, used when the stream is created); several
    servers of one cluster are comma-separated (``nats://a:1,nats://b:2?replicas=3``).
    Raises :class:`UsageError` for an unknown scheme or a malformed URL, and
    :class:`~helix_agents.errors.StoreError` when a NATS server cannot be reached.
    ``read_only`` opens a SQLite file read-only (``SqliteEventStore(read_only=True)``:
    it must exist); other stores are opened as usual (they create nothing by reading).
    """
    parts = urlsplit(url)
    if parts.scheme == "memory":
        return MemoryEventStore()
    if parts.scheme == "sqlite":
        if parts.netloc or not parts.path.startswith("/") or len(parts.path) < 2:
            raise UsageError(
                f"bad sqlite URL {url!r}: use sqlite:///relative.db or sqlite:////absolute.db"
            )
        path = parts.path[1:]
        options = parse_qs(parts.query)
        synchronous = options.get("synchronous", ["FULL"])[-1].upper()
        if synchronous not in ("FULL", "NORMAL"):
            raise UsageError(f"bad sqlite URL {url!r}: synchronous must be FULL or NORMAL")
        return await anyio.to_thread.run_sync(
            lambda: SqliteEventStore(
                path,
                synchronous=synchronous,  # type: ignore[arg-type]
                read_only=read_only,
            )
        )
    if parts.scheme == "nats":
        return await _open_jetstream(url)
    raise UsageError(
        f"unknown store URL {url!r}: expected memory://, sqlite:///PATH or nats://HOST:PORT"
    )


async def _open_jetstream(url: str) -> JetStreamEventStore:
    # Several servers of one cluster: nats://a:1,nats://b:2?stream=...; the
    # options (after the last server) apply to the store.
    base, _, query = url.partition("?")
    servers: list[str] = []
    for item in nats_servers(base):
        parts = urlsplit(item)
        if parts.scheme != "nats" or not parts.hostname or parts.path not in ("", "/"):
            raise UsageError(f"bad nats URL {url!r}: use nats://host:port?stream=NAME&replicas=N")
        try:
            parts.port  # noqa: B018 - validates the port
        except ValueError as exc:
            raise UsageError(f"bad nats URL {url!r}: {exc}") from exc
        # nats-py takes host, port (default 4222) and any credentials from this.
        servers.append(f"nats://{parts.netloc}")
    options = parse_qs(query, keep_blank_values=True)
    unknown = set(options) - {"stream", "replicas"}
    if unknown:
        raise UsageError(f"bad nats URL {url!r}: unknown option(s) {sorted(unknown)}")
    stream = options.get("stream", [DEFAULT_STREAM])[-1]
    replicas_text = options.get("replicas", ["1"])[-1]
    if not replicas_text.isdigit():
        raise UsageError(f"bad nats URL {url!r}: replicas must be a number")
    return await JetStreamEventStore.connect(
        ",".join(servers), stream=stream, replicas=int(replicas_text)
    )
