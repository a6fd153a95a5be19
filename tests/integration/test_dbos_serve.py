"""``helix-agents serve --dbos sqlite:///...`` as a real process, SIGKILLed and started again.

Embedded DBOS: the gateway's process runs the workflows, its system database
a SQLite file; a restart with the same file recovers the workflows the dead
process left pending, which complete from the log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from _serve_process import ServeProcess

from helix_agents.events import (
    ChildChunkForwarded,
    CustomChunk,
    RunStarted,
    StepRestarted,
    SubSessionFinished,
    TextDelta,
)
from helix_agents.log import project_state
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._temporal_kit import results_of, seqs_contiguous, wait_for

pytestmark = [pytest.mark.slow]

TARGET = "tests.integration.temporal_app:agents"


async def _to_end(client: HttpRemoteAgentTransport, session_id: str) -> Any:
    async for event in client.stream(session_id, 0):
        if isinstance(event, EndEvent):
            return event.output
    raise AssertionError("no end event")


def _gateway(tmp_path: Path, **env: str) -> ServeProcess:
    marks = tmp_path / "marks"
    marks.mkdir(exist_ok=True)
    return ServeProcess(
        tmp_path,
        TARGET,
        "--dbos",
        f"sqlite:///{tmp_path / 'dbos.sqlite'}",
        env={"HELIX_TEMPORAL_MARKS": str(marks), "HELIX_TEMPORAL_MARK_SECONDS": "30", **env},
    )


async def test_killed_mid_tool_a_restart_completes_the_session(tmp_path: Path) -> None:
    """SIGKILL the process running a tool; started again, DBOS recovers the workflow: the
    tool runs once more (it was cut before its result), the session completes, the log has
    no gap and no duplicate, and the result is recorded once."""
    gateway = _gateway(tmp_path)
    await gateway.start()
    store = SqliteEventStore(tmp_path / "serve.db")
    try:
        async with HttpRemoteAgentTransport(gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="k1", agent_type="marker_boss", message="go")
                )
                await wait_for(store, "k1", lambda e: isinstance(e, CustomChunk))
                await gateway.kill()
                gateway.env = {**gateway.env, "HELIX_TEMPORAL_MARK_SECONDS": "0.1"}
                await gateway.start()
                assert await _to_end(client, "k1") == "marked and done"
        log = await store.read("k1")
        assert seqs_contiguous(log)
        assert len(results_of(log, "m1")) == 1
        assert project_state(log).status == "completed"
        runs = sorted(path.name for path in (tmp_path / "marks").iterdir())
        assert runs == ["m1.1", "m1.2"]  # cut once, run again once, never after its result
    except BaseException:
        print(gateway.output())
        raise
    finally:
        await store.close()
        await gateway.stop()


async def test_killed_mid_model_stream_a_restart_streams_the_turn_again(tmp_path: Path) -> None:
    """SIGKILL the process while the model streams: the recovered step declares the partial
    text void (step_restarted) and streams the turn again; no gap, no duplicate seq."""
    gateway = _gateway(tmp_path)
    await gateway.start()
    store = SqliteEventStore(tmp_path / "serve.db")
    try:
        async with HttpRemoteAgentTransport(gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="m1", agent_type="streamer", message="go")
                )
                await wait_for(store, "m1", lambda e: isinstance(e, TextDelta))
                await gateway.kill()
                await gateway.start()
                output = await _to_end(client, "m1")
        log = await store.read("m1")
        assert seqs_contiguous(log)
        assert any(isinstance(e, StepRestarted) for e in log)
        assert output
        assert project_state(log).status == "completed"
    except BaseException:
        print(gateway.output())
        raise
    finally:
        await store.close()
        await gateway.stop()


async def test_killed_mid_remote_child_a_restart_follows_it_on(tmp_path: Path) -> None:
    """SIGKILL the process while it follows a remote child (a real ``serve`` over HTTP): the
    recovered remote-call step asks the child's status first and follows on from the seq the
    parent's log holds; the remote child is started once."""
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    remote = ServeProcess(remote_dir, "tests.integration.remote_app:agents")
    await remote.start()
    gateway = _gateway(tmp_path, HELIX_TEMPORAL_REMOTE_URL=remote.url)
    store = SqliteEventStore(tmp_path / "serve.db")
    remote_store = SqliteEventStore(remote.db)
    try:
        await gateway.start()
        async with HttpRemoteAgentTransport(gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="rk", agent_type="remote_boss", message="go")
                )
                await wait_for(store, "rk", lambda e: isinstance(e, ChildChunkForwarded))
                await gateway.kill()
                await gateway.start()
                assert await _to_end(client, "rk") == "researched"
        log = await store.read("rk")
        assert seqs_contiguous(log)
        forwarded = [e.child_seq for e in log if isinstance(e, ChildChunkForwarded)]
        assert forwarded == sorted(set(forwarded))  # each chunk once, in order
        [finished] = [e for e in log if isinstance(e, SubSessionFinished)]
        assert finished.status == "completed"
        child = await remote_store.read("rk-remote-r1")
        assert sum(isinstance(e, RunStarted) for e in child) == 1  # never started again
    except BaseException:
        print(gateway.output(), remote.output())
        raise
    finally:
        await store.close()
        await remote_store.close()
        await gateway.stop()
        await remote.terminate()
