"""Workspaces and expiring inputs on Temporal (a real dev server) when a worker dies: a
workspace's file written by a worker SIGKILLed mid-run is read by another that took over;
an entry with ``expires_in`` is answered by the workflow's durable timer, even when the
only worker died while the timer ran. The scenarios without a kill, on both durable
runtimes: ``test_durable_workspaces.py``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from temporal_server import TemporalDev

from helix_agents.events import ClientToolPending, Completed, Suspended
from helix_agents.log import project_state
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.temporal import temporal_server
from tests.integration._durable_kit import WorkerScript, held
from tests.integration._temporal_kit import (
    options_for,
    results_of,
    seqs_contiguous,
    stream_to_end,
    wait_for,
)
from tests.integration.workspace_app import agents

pytestmark = [pytest.mark.slow]


async def test_worker_killed_between_write_and_read_another_reads_the_file(
    temporal_dev: TemporalDev, tmp_path: Path
) -> None:
    """Worker A runs the write, then is SIGKILLed in the middle of ``hold``; worker B (another
    process, a provider of its own on the shared root) retries ``hold`` after the heartbeat
    timeout and reads the file A wrote."""
    db, root, marks = tmp_path / "store.db", tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    options = options_for(temporal_dev, heartbeat_timeout=2.0)
    args = ("temporal", temporal_dev.address, options.task_queue, str(db), str(root))
    env = {"HELIX_WS_MARKS": str(marks), "HELIX_WS_HOLD": "60"}
    first = WorkerScript(tmp_path / "a.log", *args, env=env)
    second = WorkerScript(tmp_path / "b.log", *args, env=env)
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        with anyio.fail_after(90):
            await first.start()
            server = temporal_server(agents, store, options)
            async with server:
                await server.start(
                    RemoteStartRequest(session_id="k1", agent_type="scribe", message="go")
                )
                await held(store, "k1")
                await first.kill()
                await second.start()
                assert await stream_to_end(server, "k1") == "done"
    except BaseException:
        print(first.output(), second.output())
        raise
    finally:
        await first.stop()
        await second.stop()
        log = await store.read("k1")
        await store.close()
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    assert sorted(path.name for path in marks.iterdir()) == ["h1.1", "h1.2"]
    pids = {(marks / name).read_text() for name in ("h1.1", "h1.2")}
    assert len(pids) == 2  # the retry ran in the other process


async def test_the_expiry_timer_outlives_the_only_worker(
    temporal_dev: TemporalDev, tmp_path: Path
) -> None:
    """The session pauses on worker A, which is SIGKILLed before the entry expires; the
    timer is Temporal's, so worker B, started after the instant, runs the expiry."""
    db, root = tmp_path / "store.db", tmp_path / "ws"
    options = options_for(temporal_dev, heartbeat_timeout=2.0)
    args = ("temporal", temporal_dev.address, options.task_queue, str(db), str(root))
    first = WorkerScript(tmp_path / "a.log", *args)
    second = WorkerScript(tmp_path / "b.log", *args)
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        with anyio.fail_after(90):
            await first.start()
            server = temporal_server(agents, store, options)
            async with server:
                await server.start(
                    RemoteStartRequest(session_id="kt", agent_type="late", message="go")
                )
                pending = await wait_for(store, "kt", lambda e: isinstance(e, ClientToolPending))
                await wait_for(store, "kt", lambda e: isinstance(e, Suspended))
                await first.kill()
                assert isinstance(pending, ClientToolPending)
                assert pending.expires_at is not None
                # No worker is left: the expiry comes from the timer, run by B.
                assert project_state(await store.read("kt")).status == "paused"
                await second.start()
                assert await stream_to_end(server, "kt") == "gave up"
    except BaseException:
        print(first.output(), second.output())
        raise
    finally:
        await first.stop()
        await second.stop()
        log = await store.read("kt")
        await store.close()
    assert seqs_contiguous(log)
    [result] = results_of(log, "p1")
    assert "no answer within 1 s" in result.message.content
    assert isinstance(log[-1], Completed)
