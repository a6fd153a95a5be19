"""``helix-agents serve --temporal`` and ``helix-agents worker`` as real processes.

The gateway and the workers are subprocesses sharing a SQLite store and a
task queue on a real Temporal dev server; the test talks HTTP through the
project's own client (``HttpRemoteAgentTransport``) and reads the store.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from temporal_server import TemporalDev, fresh_task_queue

from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ChildChunkForwarded,
    CustomChunk,
    Interrupted,
    RunStarted,
    StepRestarted,
    SubSessionFinished,
    TextDelta,
    ToolStart,
)
from helix_agents.log import project_state
from helix_agents.protocol import (
    EndEvent,
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
)
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import WorkerProcess
from tests.integration._serve_process import ServeProcess
from tests.integration._temporal_kit import (
    RECOVERY_BOUND,
    first_chunks_after,
    results_of,
    seqs_contiguous,
    wait_for,
)

pytestmark = [pytest.mark.slow]

TARGET = "tests.integration.temporal_app:agents"


class Deployment:
    """A gateway (``serve --temporal``) and workers on one store and task queue."""

    def __init__(self, directory: Path, dev: TemporalDev, marks: Path) -> None:
        self.directory = directory
        self.db = directory / "serve.db"
        self.queue = fresh_task_queue()
        self.dev = dev
        self.env = {"HELIX_TEMPORAL_MARKS": str(marks)}
        self.gateway = ServeProcess(
            directory, TARGET, "--temporal", dev.address, "--task-queue", self.queue, env=self.env
        )
        self.workers: list[WorkerProcess] = []

    def worker(self) -> WorkerProcess:
        """A new (not started) worker process."""
        worker = WorkerProcess.temporal(
            self.directory / f"worker{len(self.workers) + 1}.log",
            TARGET,
            address=self.dev.address,
            db=self.db,
            task_queue=self.queue,
            env=self.env,  # the default heartbeat timeout (2 s) on the gateway and the workers
        )
        self.workers.append(worker)
        return worker

    def outputs(self) -> str:
        """Every process's output, for failure messages."""
        return "\n".join([self.gateway.output(), *(w.output() for w in self.workers)])


@pytest.fixture
async def deployment(tmp_path: Path, temporal_dev: TemporalDev) -> AsyncIterator[Deployment]:
    marks = tmp_path / "marks"
    marks.mkdir()
    deployed = Deployment(tmp_path, temporal_dev, marks)
    await deployed.gateway.start()
    try:
        yield deployed
    finally:
        for worker in deployed.workers:
            await worker.stop()
        await deployed.gateway.terminate()


async def _to_end(client: HttpRemoteAgentTransport, session_id: str, from_seq: int = 0) -> Any:
    async for event in client.stream(session_id, from_seq):
        if isinstance(event, EndEvent):
            return event.output
    raise AssertionError("no end event")


async def test_http_protocol_against_serve_temporal(deployment: Deployment) -> None:
    """start, /sse, /status, fromSequence, interrupt + resume, a follow-up, errors: unchanged."""
    await deployment.worker().start()
    store = SqliteEventStore(deployment.db)
    try:
        async with HttpRemoteAgentTransport(deployment.gateway.url) as client:
            with anyio.fail_after(90):
                started = await client.start(
                    RemoteStartRequest(session_id="h1", agent_type="boss", message="go")
                )
                again = await client.start(
                    RemoteStartRequest(session_id="h1", agent_type="boss", message="go")
                )
                assert again.run_id == started.run_id  # idempotent
                output = await _to_end(client, "h1")
                assert output == "one plus two is three and the helper said six"
                status = await client.get_status("h1")
                assert status.status == "completed"
                assert not status.is_executing
                log = await store.read("h1")
                assert status.latest_sequence == len(log)
                # fromSequence: the stream from the middle is the log's tail
                tail = [e.sequence async for e in client.stream("h1", 5) if hasattr(e, "sequence")]
                assert tail[0] == 6
                with pytest.raises(AgentServerError) as refused:
                    await client.start(
                        RemoteStartRequest(session_id="h1", agent_type="boss", message="other")
                    )
                assert refused.value.code == "ALREADY_RUNNING"

                # interrupt a running session, then resume it
                await client.start(
                    RemoteStartRequest(session_id="h2", agent_type="marker_boss", message="go")
                )
                await wait_for(store, "h2", lambda e: isinstance(e, ToolStart))
                running = await client.get_status("h2")
                assert running.is_executing
                await client.interrupt("h2", "wait")
                await wait_for(store, "h2", lambda e: isinstance(e, Interrupted))
                assert (await client.get_status("h2")).status == "interrupted"
                await client.resume(RemoteResumeRequest(session_id="h2"))
                assert await _to_end(client, "h2") == "marked and done"

                # a follow-up turn of a completed session
                await client.start(
                    RemoteStartRequest(session_id="h3", agent_type="echo", message="one")
                )
                assert await _to_end(client, "h3") == "echo: one"
                turn = await client.send_message(
                    RemoteMessageRequest(session_id="h3", message="two")
                )
                assert not turn.queued
                assert (
                    await _to_end(client, "h3", (await store.read("h3"))[-1].seq - 1) == "echo: two"
                )
        for session_id in ("h1", "h2", "h3"):
            assert seqs_contiguous(await store.read(session_id))
    except BaseException:
        print(deployment.outputs())
        raise
    finally:
        await store.close()


async def test_worker_killed_mid_tool_another_completes(deployment: Deployment) -> None:
    """SIGKILL the worker running a tool: another worker retries the tool's activity and
    completes the session; the log has no gap and no duplicate, the result is recorded once."""
    first = deployment.worker()
    await first.start()
    store = SqliteEventStore(deployment.db)
    marks = Path(deployment.env["HELIX_TEMPORAL_MARKS"])
    try:
        async with HttpRemoteAgentTransport(deployment.gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="k1", agent_type="marker_boss", message="go")
                )
                await wait_for(store, "k1", lambda e: isinstance(e, CustomChunk))
                await first.kill()
                await deployment.worker().start()
                assert await _to_end(client, "k1") == "marked and done"
        log = await store.read("k1")
        assert seqs_contiguous(log)
        assert len(results_of(log, "m1")) == 1
        assert project_state(log).status == "completed"
        runs = sorted([path.name async for path in anyio.Path(marks).iterdir()])
        assert runs == ["m1.1", "m1.2"]  # cut once, run again once, never after its result
        assert await anyio.Path(marks / "m1.2").read_text() == str(deployment.workers[1].pid)
    except BaseException:
        print(deployment.outputs())
        raise
    finally:
        await store.close()


async def test_worker_killed_mid_model_stream_another_completes(deployment: Deployment) -> None:
    """SIGKILL the worker while the model streams: the retried step declares the partial
    text void (step_restarted) and streams the turn again; no gap, no duplicate seq."""
    first = deployment.worker()
    await first.start()
    store = SqliteEventStore(deployment.db)
    try:
        async with HttpRemoteAgentTransport(deployment.gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="ms", agent_type="streamer", message="go")
                )
                await wait_for(store, "ms", lambda e: isinstance(e, TextDelta))
                await first.kill()
                await deployment.worker().start()
                output = await _to_end(client, "ms")
        assert output == " ".join(f"word{n}" for n in range(40))
        log = await store.read("ms")
        assert seqs_contiguous(log)
        [restart] = [e for e in log if isinstance(e, StepRestarted)]
        assert restart.discard_deltas >= 1
        assert project_state(log).status == "completed"
    except BaseException:
        print(deployment.outputs())
        raise
    finally:
        await store.close()


async def test_worker_killed_mid_remote_child_another_completes(
    deployment: Deployment, tmp_path: Path
) -> None:
    """SIGKILL the worker while it follows a remote child (a real ``serve`` over HTTP): the
    retried remote-call activity asks the child's status first and follows on from the seq
    the parent's log holds; the child is started once (its id is deterministic)."""
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    remote = ServeProcess(remote_dir, "tests.integration.remote_app:agents")
    await remote.start()
    deployment.env["HELIX_TEMPORAL_REMOTE_URL"] = remote.url
    store = SqliteEventStore(deployment.db)
    remote_store = SqliteEventStore(remote.db)
    try:
        first = deployment.worker()
        await first.start()
        async with HttpRemoteAgentTransport(deployment.gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="rk", agent_type="remote_boss", message="go")
                )
                await wait_for(store, "rk", lambda e: isinstance(e, ChildChunkForwarded))
                await first.kill()
                await deployment.worker().start()
                assert await _to_end(client, "rk") == "researched"
        log = await store.read("rk")
        assert seqs_contiguous(log)
        forwarded = [e.child_seq for e in log if isinstance(e, ChildChunkForwarded)]
        assert forwarded == sorted(set(forwarded))  # each chunk once, in order
        [finished] = [e for e in log if isinstance(e, SubSessionFinished)]
        assert finished.status == "completed"
        child = await remote_store.read("rk-remote-r1")
        assert sum(isinstance(e, RunStarted) for e in child) == 1  # never started again
        assert forwarded[-1] <= child[-1].seq
    except BaseException:
        print(deployment.outputs(), remote.output())
        raise
    finally:
        await store.close()
        await remote_store.close()
        await remote.terminate()


async def test_a_killed_workers_sessions_stream_again_within_seconds(
    deployment: Deployment,
) -> None:
    """Issue 34: SIGKILL the only worker running four sessions (two streaming a model's
    answer, two in a tool) while a second one is up: each session's first new chunk comes
    within seconds, at the defaults (heartbeat timeout 2 s; before, 10 s set it: 9-11 s)."""
    deployment.env["HELIX_TEMPORAL_MARK_SECONDS"] = "12"  # in the tool while the second starts
    first = deployment.worker()
    await first.start()
    store = SqliteEventStore(deployment.db, poll_interval=0.05)
    sessions = {
        "rs1": "long_streamer",
        "rs2": "long_streamer",
        "rm1": "marker_boss",
        "rm2": "marker_boss",
    }
    try:
        async with HttpRemoteAgentTransport(deployment.gateway.url) as client:
            with anyio.fail_after(120):
                for session_id, agent_type in sessions.items():
                    await client.start(
                        RemoteStartRequest(
                            session_id=session_id, agent_type=agent_type, message="go"
                        )
                    )
                for session_id in sessions:
                    await wait_for(
                        store, session_id, lambda e: isinstance(e, TextDelta | CustomChunk)
                    )
                await deployment.worker().start()
                await first.kill()
                killed = time.monotonic()
                held = {sid: (await store.read(sid))[-1].seq for sid in sessions}
                seconds = await first_chunks_after(store, held, killed)
                print(f"first new chunk after the worker's SIGKILL, by session: {seconds}")
                assert max(seconds.values()) <= RECOVERY_BOUND, seconds
                for session_id in sessions:
                    await _to_end(client, session_id)
        for session_id in sessions:
            log = await store.read(session_id)
            assert seqs_contiguous(log)
            assert project_state(log).status == "completed"
    except BaseException:
        print(deployment.outputs())
        raise
    finally:
        await store.close()
