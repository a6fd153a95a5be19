"""Shared fixtures: the anyio backend, Hypothesis profiles, and the event-store fixtures.

Every store conformance test takes ``store`` (a fresh, open store) or
``store_factory`` (opens stores of one backend at one location, so a test can
close a store and open it again). Both are parametrised over :data:`STORE_BACKENDS`.

A server-backed store (NATS JetStream) joins as one more ``pytest.param`` with
a mark (registered in pyproject), one branch in :meth:`StoreFactory.open`, and
a synchronous session-scoped server fixture that ``store_factory`` requests
with ``request.getfixturevalue`` only for that backend (a per-test stream name
then plays the part of ``location``).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from helix_agents import EventStore
from helix_agents.stores import MemoryEventStore, SqliteEventStore

# --- Hypothesis ----------------------------------------------------------------

settings.register_profile("dev", settings())
settings.register_profile(
    "ci",
    derandomize=False,
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if "CI" in os.environ else "dev"))


# --- anyio ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run async tests on asyncio (nats-py, and so the NATS store, is asyncio-only)."""
    return "asyncio"


# --- event stores --------------------------------------------------------------

STORE_BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    # pytest.param("nats", id="nats", marks=pytest.mark.nats),  # with the JetStream store
]
"""The backends every store conformance test runs against."""


class StoreFactory:
    """Opens stores of one backend, all at the same location, and closes them at teardown."""

    def __init__(self, backend: str, location: Path) -> None:
        self.backend = backend
        self.location = location
        self._opened: list[EventStore] = []

    @property
    def persistent(self) -> bool:
        """Whether a store opened again at the same location sees what earlier ones wrote."""
        return self.backend != "memory"

    async def open(self, **options: object) -> EventStore:
        """Open a store; ``options`` go to the backend's constructor (e.g. ``poll_interval``)."""
        store: EventStore
        if self.backend == "memory":
            store = MemoryEventStore(**options)
        elif self.backend == "sqlite":
            store = SqliteEventStore(self.location / "events.db", **options)  # type: ignore[arg-type]
        else:  # pragma: no cover - a backend listed in STORE_BACKENDS but not built here
            raise AssertionError(f"no factory for store backend {self.backend!r}")
        self._opened.append(store)
        return store

    async def aclose(self) -> None:
        """Close every store this factory opened (``close`` is idempotent, as tested)."""
        for store in reversed(self._opened):
            await store.close()


@pytest.fixture(params=STORE_BACKENDS)
async def store_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """A :class:`StoreFactory` for each backend, rooted in the test's ``tmp_path``."""
    factory = StoreFactory(request.param, tmp_path)
    try:
        yield factory
    finally:
        await factory.aclose()


@pytest.fixture
async def store(store_factory: StoreFactory) -> EventStore:
    """A fresh, open store of each backend; closed after the test."""
    return await store_factory.open()
