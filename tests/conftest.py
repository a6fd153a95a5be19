"""Shared fixtures: the anyio backend, Hypothesis profiles, and the event-store fixtures.

Every store conformance test takes ``store`` (a fresh, open store) or
``store_factory`` (opens stores of one backend at one location, so a test can
close a store and open it again). Both are parametrised by ``store_backend``,
over :data:`STORE_BACKENDS` unless a module overrides that fixture.

A server-backed store (NATS JetStream) joins as one more ``pytest.param`` with
a mark (registered in pyproject), one branch in :meth:`StoreFactory.open`, and
a synchronous session-scoped server fixture that ``store_factory`` requests
with ``request.getfixturevalue`` only for that backend (a per-test stream name
then plays the part of ``location``).
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from budgets import LONG
from hypothesis import HealthCheck, settings
from nats_server import NatsServer
from postgres_cluster import PostgresCluster, postgres_bin
from temporal_server import TemporalDev

from helix_agents import EventStore
from helix_agents.stores import JetStreamEventStore, MemoryEventStore, SqliteEventStore

if TYPE_CHECKING:
    from tests.integration._durable_kit import Runtime

# --- Hypothesis ----------------------------------------------------------------

CI_EXAMPLES = 50
"""Examples of a property that names no budget, in CI's run."""
LONG_EXAMPLES = 500
"""The same, in the long run."""

# No per-example deadline in any profile: a deadline is a wall-clock
# assertion, and on a shared 2-core machine it fails tests that are correct.
# ``ci`` is what the README's test command runs; ``long`` is the run by hand
# (``HELIX_BUDGET=long``, tests/budgets.py). A test that names its own
# ``max_examples`` takes it from ``budget(ci, long)``.
settings.register_profile(
    "ci",
    deadline=None,
    max_examples=CI_EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "long",
    deadline=None,
    max_examples=LONG_EXAMPLES,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "long" if LONG else "ci"))


# --- anyio ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """Run async tests on asyncio (nats-py, and so the NATS store, is asyncio-only)."""
    return "asyncio"


# --- event stores --------------------------------------------------------------

STORE_BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("nats", id="nats", marks=pytest.mark.nats),
]
"""The backends every store conformance test runs against."""


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """One JetStream ``nats-server`` for the whole run, on a loopback ephemeral port."""
    server = NatsServer.start(tmp_path_factory.mktemp("nats-store"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def temporal_dev(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TemporalDev]:
    """One Temporal dev server (in memory, on loopback) for the run: tests/temporal_server.py."""
    server = TemporalDev(tmp_path_factory.mktemp("temporal"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


# --- the runtimes a gateway runs its sessions on ---------------------------------


@pytest.fixture(scope="session")
def dbos_system_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One DBOS system database with the queue registered, copied by each DBOS gateway."""
    from tests.integration._durable_kit import dbos_template

    return dbos_template(tmp_path_factory.mktemp("dbos-template"))


RUNTIMES = [
    pytest.param("builtin", id="builtin"),
    pytest.param("temporal", id="temporal"),
    pytest.param("dbos", id="dbos"),
]
"""The runtimes every protocol test runs against (issue 23, 27): the ``runtime`` fixture."""


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runtime:
    """Each runtime in turn: built-in, Temporal, DBOS (``tests/integration/_durable_kit.py``).

    A module narrows them with ``pytest.mark.parametrize("runtime", [...], indirect=True)``,
    and may ask for ``dbos-postgres``: DBOS on a fresh database of the ``postgres`` cluster.

    A protocol test opens its gateway's server with ``runtime.server(agents,
    store)``. The Temporal dev server (and the DBOS template) is asked for
    only by its own param, so a run of the built-in params alone starts neither.
    """
    from tests.integration._durable_kit import Runtime

    name: str = request.param
    directory = tmp_path_factory.mktemp(f"runtime-{name}")
    if name == "dbos-postgres":  # asked for by a module's own params (indirect)
        cluster: PostgresCluster = request.getfixturevalue("postgres")
        database = cluster.url.rsplit("/", 1)[0] + f"/dbos_rt_{next(_databases)}"
        return Runtime("dbos", directory, system_database=database)
    dev = request.getfixturevalue("temporal_dev") if name == "temporal" else None
    template = request.getfixturevalue("dbos_system_template") if name == "dbos" else None
    return Runtime(name, directory, dev, template)


_databases = itertools.count(1)


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresCluster]:
    """One private PostgreSQL cluster for the run (tests/postgres_cluster.py).

    Skips without Debian's binaries, unless HELIX_REQUIRE_POSTGRES=1 (CI installs them).
    """
    bin_dir = postgres_bin()
    if bin_dir is None:
        if os.environ.get("HELIX_REQUIRE_POSTGRES") == "1":
            pytest.fail("HELIX_REQUIRE_POSTGRES=1 but no PostgreSQL binaries are installed")
        pytest.skip("no PostgreSQL binaries (apt-get install postgresql)")
    # Not under pytest's 0700 temp root: the server may run as the postgres user.
    directory = Path(tempfile.mkdtemp(prefix="helix-pg-"))
    cluster = PostgresCluster(directory, bin_dir)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(directory, ignore_errors=True)


_stream_numbers = itertools.count(1)


def fresh_stream_name() -> str:
    """A stream name no other test of this run uses (a stream plays the part of a file)."""
    return f"T{os.getpid()}_{next(_stream_numbers)}"


class StoreFactory:
    """Opens stores of one backend, all at the same location, and closes them at teardown.

    For ``nats`` the location is a stream on the session's server: ``stream``.
    """

    def __init__(
        self, backend: str, location: Path, *, nats_url: str = "", stream: str = ""
    ) -> None:
        self.backend = backend
        self.location = location
        self.nats_url = nats_url
        self.stream = stream
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
        elif self.backend == "nats":
            store = await JetStreamEventStore.connect(
                self.nats_url,
                stream=self.stream,
                **options,  # type: ignore[arg-type]
            )
        else:  # pragma: no cover - a backend listed in STORE_BACKENDS but not built here
            raise AssertionError(f"no factory for store backend {self.backend!r}")
        self._opened.append(store)
        return store

    async def aclose(self) -> None:
        """Close every store this factory opened (``close`` is idempotent, as tested)."""
        for store in reversed(self._opened):
            await store.close()


@pytest.fixture(params=STORE_BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """The backend of ``store`` and ``store_factory``: each of them, unless a module narrows it.

    A module that overrides this fixture picks its backends (``tests/unit`` needs
    no server, so its conformance module keeps memory and SQLite).
    """
    return str(request.param)


@pytest.fixture
async def store_factory(
    store_backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[StoreFactory]:
    """A :class:`StoreFactory` for each backend, rooted in the test's ``tmp_path``."""
    if store_backend == "nats":
        server: NatsServer = request.getfixturevalue("nats_server")
        factory = StoreFactory("nats", tmp_path, nats_url=server.url, stream=fresh_stream_name())
    else:
        factory = StoreFactory(store_backend, tmp_path)
    try:
        yield factory
    finally:
        await factory.aclose()


@pytest.fixture
async def store(store_factory: StoreFactory) -> EventStore:
    """A fresh, open store of each backend; closed after the test."""
    return await store_factory.open()
