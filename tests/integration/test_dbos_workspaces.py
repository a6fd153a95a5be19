"""Workspaces and expiring inputs on DBOS when a process dies: a workspace's file written
before the process that wrote it was SIGKILLed is read after (SQLite: the restarted
process recovers the workflow; Postgres: another process takes it over); an entry with
``expires_in`` is answered when the paused workflow's durable ``recv`` timeout ends, even
when the process died while it waited. The scenarios without a kill, on both durable
runtimes: ``test_durable_workspaces.py``.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from postgres_cluster import PostgresCluster

from helix_agents.events import Event, Suspended
from helix_agents.log import project_state
from helix_agents.stores import SqliteEventStore
from tests.integration._durable_kit import WorkerScript, held
from tests.integration._temporal_kit import results_of, seqs_contiguous, wait_for

pytestmark = [pytest.mark.slow]

_databases = itertools.count(1)


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dbos.sqlite'}"


def _postgres(postgres: PostgresCluster) -> str:
    return postgres.url.rsplit("/", 1)[0] + f"/dbos_ws_{next(_databases)}"


async def _killed_then_taken_over(
    tmp_path: Path, system_database: str, session_id: str, agent_type: str, *, mid_hold: bool
) -> tuple[list[Event], Any]:
    """Process A starts the session and is SIGKILLed (mid ``hold``, or once paused); process B
    (the same command) recovers or takes over the workflow and follows it to the end."""
    db, root, marks = tmp_path / "store.db", tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    args = ("dbos", system_database, str(db), str(root), session_id, agent_type)
    env = {"HELIX_WS_MARKS": str(marks), "HELIX_WS_HOLD": "60"}
    first = WorkerScript(tmp_path / "a.log", *args, env=env)
    second = WorkerScript(tmp_path / "b.log", *args, env=env)
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        with anyio.fail_after(120):
            await first.start()
            if mid_hold:
                await held(store, session_id)
            else:
                await wait_for(store, session_id, lambda e: isinstance(e, Suspended))
            await first.kill()
            assert project_state(await store.read(session_id)).status in ("running", "paused")
            await second.start()
            assert await second.wait() == 0
        log = list(await store.read(session_id))
    except BaseException:
        print(first.output(), second.output())
        raise
    finally:
        await first.stop()
        await second.stop()
        await store.close()
    said = [line for line in second.output().splitlines() if line.startswith("output: ")]
    return log, json.loads(said[-1].removeprefix("output: "))


@pytest.mark.parametrize("engine_db", ["sqlite", "postgres"])
async def test_process_killed_between_write_and_read_the_next_reads_the_file(
    engine_db: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Process A runs the write and is SIGKILLed in the middle of ``hold``; process B (a
    restart on SQLite; another executor taking A's workflows over on Postgres) runs ``hold``
    again and reads the file A wrote."""
    url = (
        _sqlite(tmp_path)
        if engine_db == "sqlite"
        else _postgres(request.getfixturevalue("postgres"))
    )
    log, output = await _killed_then_taken_over(tmp_path, url, "k1", "scribe", mid_hold=True)
    assert output == "done"
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    marks = tmp_path / "marks"
    assert sorted(path.name for path in marks.iterdir()) == ["h1.1", "h1.2"]
    assert len({(marks / name).read_text() for name in ("h1.1", "h1.2")}) == 2


async def test_the_expiry_wait_outlives_the_process(tmp_path: Path) -> None:
    """The session pauses; its process is SIGKILLed before the entry expires; the restarted
    process recovers the workflow, whose recorded ``recv`` deadline has passed: it answers
    the entry as expired and the run ends as on the built-in runtime."""
    log, output = await _killed_then_taken_over(
        tmp_path, _sqlite(tmp_path), "kt", "late", mid_hold=False
    )
    assert output == "gave up"
    assert seqs_contiguous(log)
    [result] = results_of(log, "p1")
    assert "no answer within 1 s" in result.message.content
    assert project_state(log).status == "completed"
