"""What makes a 2 s takeover silence safe on Postgres (``engines/dbos/takeover.py``, issue 34).

A real private PostgreSQL cluster (``tests/postgres_cluster.py``), the
``Takeover`` of two executors on a database of their own; no DBOS workflow is
involved (no executor is found dead while DBOS would be asked to recover it).
"""

from __future__ import annotations

import itertools
import time
from datetime import datetime

import anyio
import pytest
import sqlalchemy as sa
from postgres_cluster import PostgresCluster

from helix_agents.engines.dbos.takeover import Takeover

pytestmark = [pytest.mark.slow]

_databases = itertools.count(1)


def _database(postgres: PostgresCluster) -> str:
    """A fresh database on the cluster; its URL."""
    name = f"takeover_{next(_databases)}"
    engine = sa.create_engine(
        sa.make_url(postgres.url).set(drivername="postgresql+psycopg"),
        isolation_level="AUTOCOMMIT",
    )
    try:
        with engine.connect() as db:
            db.execute(sa.text(f"CREATE DATABASE {name}"))
    finally:
        engine.dispose()
    return postgres.url.rsplit("/", 1)[0] + f"/{name}"


def _sql(url: str, statement: str) -> list[tuple[object, ...]]:
    engine = sa.create_engine(sa.make_url(url).set(drivername="postgresql+psycopg"))
    try:
        with engine.begin() as db:
            result = db.execute(sa.text(statement))
            return [tuple(row) for row in result] if result.returns_rows else []
    finally:
        engine.dispose()


def _beat_at(url: str, executor_id: str) -> datetime:
    [(beat_at,)] = _sql(
        url, f"SELECT beat_at FROM helix_dbos_executors WHERE executor_id = '{executor_id}'"
    )
    assert isinstance(beat_at, datetime)
    return beat_at


async def test_beats_go_on_while_the_event_loop_is_blocked(postgres: PostgresCluster) -> None:
    """A step that blocks the worker's event loop longer than the silence does not make the
    worker look dead: the beats come from a thread of their own."""
    url = _database(postgres)
    takeover = Takeover(url, "blocked", dead_after=1.0)
    await takeover.first_beat()
    async with anyio.create_task_group() as tg:
        tg.start_soon(takeover.run)
        await anyio.sleep(0.5)
        before = await anyio.to_thread.run_sync(_beat_at, url, "blocked")
        # The point: the event loop stands still, and is still standing when the beat is read.
        time.sleep(3.0)  # noqa: ASYNC251
        during = _beat_at(url, "blocked")
        tg.cancel_scope.cancel()
    # Beats every 0.2 s through the 3 s the loop stood still; the last one is recent.
    assert (during - before).total_seconds() >= 2.5


async def test_a_worker_back_from_a_database_outage_judges_no_one_at_once(
    postgres: PostgresCluster,
) -> None:
    """The database was away for longer than the silence (every executor silent): a worker's
    first beat after it declares no one dead; its next one, a beat later, declares dead
    whoever is still silent."""
    url = _database(postgres)
    alive, gone = Takeover(url, "alive", 2.0), Takeover(url, "gone", 2.0)
    try:
        await alive.first_beat()
        await gone.first_beat()
        # The outage: neither could beat for 10 s.
        await anyio.to_thread.run_sync(
            _sql, url, "UPDATE helix_dbos_executors SET beat_at = now() - interval '10 seconds'"
        )
        assert await anyio.to_thread.run_sync(alive._beat) == []
        rows = await anyio.to_thread.run_sync(
            _sql, url, "SELECT executor_id FROM helix_dbos_executors ORDER BY executor_id"
        )
        assert rows == [("alive",), ("gone",)]
        # A beat later, "gone" has not beaten again: it is dead.
        assert await anyio.to_thread.run_sync(alive._beat) == ["gone"]
    finally:
        for takeover in (alive, gone):
            await anyio.to_thread.run_sync(takeover._engine.dispose)
