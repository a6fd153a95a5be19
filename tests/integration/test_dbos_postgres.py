"""DBOS on Postgres: a gateway and two workers share one queue; a worker SIGKILLed mid tool
has its workflow taken over by a live one, and the session completes from the log.

Real processes (``serve --dbos postgresql://...``, ``worker --dbos ...``), a real
private PostgreSQL cluster (``tests/postgres_cluster.py``), one SQLite store file.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import pytest
from _dbos_processes import DbosWorkerProcess
from _serve_process import ServeProcess
from postgres_cluster import PostgresCluster

from helix_agents.events import CustomChunk
from helix_agents.log import project_state
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._temporal_kit import results_of, seqs_contiguous, wait_for

pytestmark = [pytest.mark.slow]

TARGET = "tests.integration.temporal_app:agents"
_databases = itertools.count(1)


async def _to_end(client: HttpRemoteAgentTransport, session_id: str) -> Any:
    async for event in client.stream(session_id, 0):
        if isinstance(event, EndEvent):
            return event.output
    raise AssertionError("no end event")


async def test_worker_killed_mid_tool_another_worker_completes(
    postgres: PostgresCluster, tmp_path: Path
) -> None:
    """SIGKILL whichever process runs the tool: a live worker sees it silent, recovers its
    workflow, runs the cut tool once more and completes the session; no gap, no duplicate,
    one result, and the second execution ran in another process."""
    system_database = postgres.url.rsplit("/", 1)[0] + f"/dbos_kill_{next(_databases)}"
    marks = tmp_path / "marks"
    marks.mkdir()
    env = {"HELIX_TEMPORAL_MARKS": str(marks), "HELIX_TEMPORAL_MARK_SECONDS": "5"}
    gateway = ServeProcess(tmp_path, TARGET, "--dbos", system_database, env=env)
    workers = [
        DbosWorkerProcess(
            tmp_path / f"worker{n}.log",
            TARGET,
            system_database=system_database,
            db=gateway.db,
            args=("--heartbeat-timeout", "3"),
            env=env,
        )
        for n in (1, 2)
    ]
    store = SqliteEventStore(gateway.db)
    try:
        await gateway.start()
        for worker in workers:
            await worker.start()
        with anyio.fail_after(120):
            async with HttpRemoteAgentTransport(gateway.url) as client:
                await client.start(
                    RemoteStartRequest(session_id="k1", agent_type="marker_boss", message="go")
                )
            await wait_for(store, "k1", lambda e: isinstance(e, CustomChunk))
            ran = int((marks / "m1.1").read_text())
            if gateway.process is not None and ran == gateway.process.pid:
                await gateway.kill()
                await gateway.start()  # a new process: a new executor id
            else:
                [victim] = [w for w in workers if w.pid == ran]
                await victim.kill()
            async with HttpRemoteAgentTransport(gateway.url) as client:
                assert await _to_end(client, "k1") == "marked and done"
        log = await store.read("k1")
        assert seqs_contiguous(log)
        assert len(results_of(log, "m1")) == 1
        assert project_state(log).status == "completed"
        assert sorted(path.name for path in marks.iterdir()) == ["m1.1", "m1.2"]
        assert int((marks / "m1.2").read_text()) != ran
    except BaseException:
        print(gateway.output())
        for worker in workers:
            print(worker.output())
        raise
    finally:
        await store.close()
        for worker in workers:
            await worker.stop()
        await gateway.stop()
