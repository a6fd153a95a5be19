"""Event stores: where session logs live, chosen by URL with :func:`open_store`.

- ``memory://``: :class:`MemoryEventStore`, in-process, for tests and demos.
- ``sqlite:///relative/path.db`` or ``sqlite:////absolute/path.db``:
  :class:`SqliteEventStore`, the embedded default.
"""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import anyio

from helix_agents.errors import UsageError
from helix_agents.store import EventStore

from .memory import MemoryEventStore as MemoryEventStore
from .sqlite import SqliteEventStore as SqliteEventStore

__all__ = ["DEFAULT_STORE_URL", "MemoryEventStore", "SqliteEventStore", "open_store"]

DEFAULT_STORE_URL = "sqlite:///helix.db"
"""The store used when none is named: ``helix.db`` in the working directory."""


async def open_store(url: str = DEFAULT_STORE_URL) -> EventStore:
    """Open the event store a URL names.

    ``sqlite:`` URLs follow SQLAlchemy's convention (three slashes and a
    relative path, four for an absolute one) and accept ``?synchronous=NORMAL``.
    Raises :class:`UsageError` for an unknown scheme or a malformed URL.
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
            lambda: SqliteEventStore(path, synchronous=synchronous)  # type: ignore[arg-type]
        )
    raise UsageError(f"unknown store URL {url!r}: expected memory:// or sqlite:///PATH")
