"""The orphan scan reads the running index, not every session (``server/fleet/running.py``).

- 2,000 finished sessions and three running on a real ``helix-agents host``
  that is SIGKILLed: a second host's scan looks at the three index entries,
  reads none of the 2,000 logs, and takes the three over; they complete.
  Before, every round of a new host read every session's log once.
- The crashes around the index, as they leave it: an entry put before a
  start's append that never came (no log), an entry left after the last
  append of a run (its log completed), a running session with its entry (the
  real orphan), and a running session without one (its put failed, then its
  host died). The scan takes over the orphan only, removes both stale
  entries, and the full sweep finds the unindexed one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import nats
import nats.errors
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer
from servers import listen_port
from slow_app import agents
from wrapped_store import WrappedStore

from helix_agents import EventStore
from helix_agents.errors import UsageError
from helix_agents.events import (
    Completed,
    Event,
    HostClaimed,
    RunStarted,
    SessionCreated,
    ToolStart,
)
from helix_agents.messages import UserMessage
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime
from helix_agents.server.fleet import runtime as fleet_runtime
from helix_agents.server.fleet.leases import lease_key
from helix_agents.server.fleet.running import RunningIndex, running_bucket, session_of_key
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

ROOT = Path(__file__).parents[2]
SLOW = "tests.integration.slow_app:agents"
FINISHED = 2000
RUNNING = 3
LIMIT = 90


class CountedReads(WrappedStore):
    """Counts ``read`` calls per session."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.reads: list[str] = []

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        self.reads.append(session_id)
        return await self.inner.read(session_id, from_seq)


def _begun(session_id: str, agent_type: str = "sleeper") -> list[Event]:
    """A session's first two events, as a start writes them."""
    return [
        SessionCreated(
            session_id=session_id,
            seq=1,
            ts=1.0,
            agent_type=agent_type,
            run_id="run-1",
            messages=[UserMessage(content="hi")],
        ),
        RunStarted(session_id=session_id, seq=2, ts=1.0, run_id="run-1"),
    ]


async def _finished(store: EventStore, session_ids: list[str]) -> None:
    """Write a completed log for each session (64 appends in flight)."""
    limiter = anyio.CapacityLimiter(64)

    async def one(session_id: str) -> None:
        async with limiter:
            done = Completed(session_id=session_id, seq=3, ts=1.0, output="old")
            await store.append(session_id, [*_begun(session_id), done], 0)

    async with anyio.create_task_group() as tg:
        for session_id in session_ids:
            tg.start_soon(one, session_id)


async def _until(store: EventStore, session_id: str, kind: type[Event]) -> None:
    """Wait until the session's log holds an event of ``kind``."""
    tail = store.tail(session_id)
    try:
        async for event in tail:
            if isinstance(event, kind):
                return
    finally:
        await tail.aclose()  # type: ignore[attr-defined]


@asynccontextmanager
async def _host_process(nats_url: str, log: Path) -> AsyncIterator[anyio.abc.Process]:
    """``helix-agents host`` of the sleeper (its tool waits an hour), ready; killed at the end."""
    with log.open("ab") as out:
        process = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", "host", SLOW, "--nats", nats_url],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "SLOW_APP_QUICK": "0"},
        )
    try:
        while "helix-agents: hosting" not in (text := await anyio.Path(log).read_text()):
            assert process.returncode is None, text
            await anyio.sleep(0.05)  # a subprocess's output is the only signal
        yield process
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


async def test_a_scan_after_a_hosts_sigkill_reads_only_the_running_sessions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_APP_QUICK", "1")  # the survivor's tool answers at once

    finished = [f"done-{n}" for n in range(FINISHED)]
    running = [f"run-{n}" for n in range(RUNNING)]
    with NatsServer.start(tmp_path / "nats", port=listen_port()) as server:
        store = await JetStreamEventStore.connect(server.url)
        nc = await nats.connect(server.url)
        try:
            with anyio.fail_after(LIMIT):
                async with _host_process(server.url, tmp_path / "host.log") as doomed:
                    index = RunningIndex(
                        nc, running_bucket(store.stream), host_id="test", replicas=1
                    )
                    while True:  # the doomed host's first round fills the new bucket
                        try:
                            await index.open()
                            if await index.rebuilt():
                                break
                        except Exception:
                            pass
                        await anyio.sleep(0.1)  # a subprocess's state: polled
                    await _finished(store, finished)
                    fleet = NatsRemoteAgentTransport(nc, store)
                    for session_id in running:
                        await fleet.start(
                            RemoteStartRequest(
                                session_id=session_id, agent_type="sleeper", message="hi"
                            )
                        )
                    for session_id in running:
                        await _until(store, session_id, ToolStart)
                    assert await index.sessions() == running
                    doomed.send_signal(signal.SIGKILL)
                    await doomed.wait()
                counted = CountedReads(store)
                # A long TTL: the host's own loop never scans; the test runs the rounds.
                fleet = NatsRuntime(
                    nc,
                    host_id="survivor",
                    lease_ttl=60.0,
                    running_bucket_name=running_bucket(store.stream),
                )
                survivor = AgentServer(agents, counted, recover=False, runtime=fleet)
                async with NatsAgentHost(survivor) as host:
                    taken: list[str] = []
                    rounds = 0
                    while len(taken) < RUNNING:  # until the dead host's leases lapse (3 s)
                        counted.reads.clear()
                        began = anyio.current_time()
                        found = await host.take_over_orphans()
                        took = anyio.current_time() - began
                        rounds += 1
                        # The index's entries, fewer as the runs taken over end.
                        assert host.takeover.looked_at == RUNNING - len(taken) or rounds > 1
                        assert host.takeover.looked_at <= RUNNING
                        # The claims' reads, the resumes', and the ends' of runs taken before.
                        assert set(counted.reads) <= set(running)
                        assert len(counted.reads) <= 3 * RUNNING
                        assert took < 5.0, took
                        taken.extend(found)
                        if not found:
                            await anyio.sleep(0.2)  # the leases lapse in the bucket's time
                    assert sorted(taken) == running
                    assert host.takeover.swept == 0
                    for session_id in running:
                        await _until(store, session_id, Completed)
                    for session_id in running:
                        await survivor.executor.wait_idle(session_id)
                assert await index.sessions() == []  # each removed once its run ended
                for session_id in running:
                    claims = [e for e in await store.read(session_id) if isinstance(e, HostClaimed)]
                    assert [claim.host_id for claim in claims] == ["survivor"]
        finally:
            await nc.close()
            await store.close()


async def test_the_crashes_around_the_index_leave_no_wrong_takeover_and_no_lost_orphan(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_APP_QUICK", "1")

    tag = uuid.uuid4().hex[:8]
    never_began, ended, orphan, unindexed = (
        f"{name}-{tag}" for name in ("never-began", "ended", "orphan", "unindexed")
    )
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    nc = await nats.connect(nats_server.url)
    bucket = running_bucket(store.stream)
    dead = RunningIndex(nc, bucket, host_id="dead", replicas=1)
    try:
        with anyio.fail_after(LIMIT):
            await dead.open()
            await dead.mark_rebuilt()
            # Its host put the entry, then died before the start's append.
            await dead.mark(never_began)
            # Its host appended the run's end, then died before removing the entry.
            await dead.mark(ended)
            await _finished(store, [ended])
            # Its host put the entry and began the run, then died: the orphan.
            await dead.mark(orphan)
            await store.append(orphan, _begun(orphan), 0)
            # Its host's put failed, the run began, then the host died.
            await store.append(unindexed, _begun(unindexed), 0)
            ended_log = await store.read(ended)
            counted = CountedReads(store)
            # Sweeps every millisecond, but its first round reads the index: it is filled.
            fleet = NatsRuntime(
                nc,
                host_id="survivor",
                lease_ttl=60.0,
                running_bucket_name=bucket,
                sweep_every=1e-3,
            )
            survivor = AgentServer(agents, counted, recover=False, runtime=fleet)
            async with NatsAgentHost(survivor) as host:
                assert await host.take_over_orphans() == [orphan]
                assert host.takeover.swept == 0
                assert sorted(set(counted.reads)) == sorted([never_began, ended, orphan])
                assert await store.read(ended) == ended_log  # no claim on a finished session
                assert await store.read(never_began) == []
                await _until(store, orphan, Completed)
                await survivor.executor.wait_idle(orphan)
                assert await dead.sessions() in ([], [orphan])  # the stale two are gone
                # The index never saw the fourth; the full sweep (due now) does.
                assert await host.take_over_orphans() == [unindexed]
                assert host.takeover.swept == 1
                await _until(store, unindexed, Completed)
                await survivor.executor.wait_idle(unindexed)
            assert await dead.sessions() == []  # each removed once its run ended
            for session_id in (orphan, unindexed):
                log = await store.read(session_id)
                claims = [event for event in log if isinstance(event, HostClaimed)]
                assert [claim.host_id for claim in claims] == ["survivor"]
                assert isinstance(log[-1], Completed)
    finally:
        await nc.close()
        await store.close()


class FailingPuts:
    """The index's inbox, whose first ``failures`` publishes time out (JetStream unavailable)."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def publish(self, subject: str, payload: bytes, headers: Any = None) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise nats.errors.TimeoutError
        return await self.inner.publish(subject, payload, headers)


async def test_an_entry_whose_put_failed_is_put_again_while_the_run_goes_on(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The put before the run fails past the guard's patience; the run begins all the same;
    the next round puts it."""
    monkeypatch.setenv("SLOW_APP_QUICK", "0")  # the run waits in its tool
    monkeypatch.setattr(fleet_runtime, "BEGIN_PATIENCE", 0.0)  # JetStream gone for longer
    session_id = f"unlucky-{uuid.uuid4().hex[:8]}"
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    try:
        with anyio.fail_after(LIMIT):
            fleet = NatsRuntime(store.connection, lease_ttl=0.6)
            server = AgentServer(agents, store, recover=False, runtime=fleet)
            # Rounds every 0.2 s (a third of the TTL), this host's own loop.
            async with NatsAgentHost(server) as host:
                host.running._inbox = FailingPuts(host.running._inbox, failures=1)  # type: ignore[assignment]
                await server.start(
                    RemoteStartRequest(session_id=session_id, agent_type="sleeper", message="hi")
                )
                assert server.executor.is_executing(session_id)
                assert session_id in host.running.unmarked
                while True:  # the host's loop puts it: polled
                    if await host.running.sessions() == [session_id]:
                        break
                    await anyio.sleep(0.05)
                assert host.running.unmarked == set()
                await server.abort(session_id)
                await server.executor.wait_idle(session_id)
            assert (
                await RunningIndex(
                    store.connection, host.running.bucket, host_id="t", replicas=1
                ).sessions()
                == []
            )
    finally:
        await store.close()


async def test_a_put_that_fails_for_a_moment_is_tried_again_before_the_run_begins(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node's streams moving (a put fails twice): the entry is there before the run begins,
    so a host that dies right after its start leaves nothing only a full sweep can find."""
    monkeypatch.setenv("SLOW_APP_QUICK", "0")  # the run waits in its tool
    session_id = f"patient-{uuid.uuid4().hex[:8]}"
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    try:
        with anyio.fail_after(LIMIT):
            fleet = NatsRuntime(store.connection, lease_ttl=0.6)
            server = AgentServer(agents, store, recover=False, runtime=fleet)
            async with NatsAgentHost(server) as host:
                failing = FailingPuts(host.running._inbox, failures=2)
                host.running._inbox = failing  # type: ignore[assignment]
                await server.start(
                    RemoteStartRequest(session_id=session_id, agent_type="sleeper", message="hi")
                )
                assert server.executor.is_executing(session_id)
                assert host.running.unmarked == set()
                assert await host.running.sessions() == [session_id]
                await server.abort(session_id)
                await server.executor.wait_idle(session_id)
    finally:
        await store.close()


async def test_an_orphan_of_a_type_not_served_here_is_read_once_and_left(
    nats_server: NatsServer,
) -> None:
    """Its entry stays (for a host of its type); this host reads its log once, not each round."""
    foreign = f"foreign-{uuid.uuid4().hex[:8]}"
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    bucket = running_bucket(store.stream)
    dead = RunningIndex(store.connection, bucket, host_id="dead", replicas=1)
    try:
        with anyio.fail_after(LIMIT):
            await dead.open()
            await dead.mark_rebuilt()
            await dead.mark(foreign)
            await store.append(foreign, _begun(foreign, agent_type="translator"), 0)
            counted = CountedReads(store)
            fleet = NatsRuntime(store.connection, lease_ttl=60.0, running_bucket_name=bucket)
            server = AgentServer(agents, counted, recover=False, runtime=fleet)
            async with NatsAgentHost(server) as host:
                assert await host.take_over_orphans() == []
                assert counted.reads == [foreign]
                assert await host.take_over_orphans() == []
                assert counted.reads == [foreign]  # not read again
                assert await dead.sessions() == [foreign]
                assert await host.leases.holder(foreign) is None  # its lease given back
            assert len(await store.read(foreign)) == 2  # untouched
    finally:
        await store.close()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sweep_every": 0}, "sweep_every must be positive"),
        ({"sweep_every": -1.0}, "sweep_every must be positive"),
        ({"running_bucket_name": "no.dots"}, "running_bucket_name must be"),
        ({"running_bucket_name": ""}, "running_bucket_name must be"),
    ],
)
async def test_bad_index_options_are_usage_errors(
    nats_server: NatsServer, options: dict[str, Any], message: str
) -> None:
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    try:
        with pytest.raises(UsageError, match=message):
            AgentServer(agents, store, runtime=NatsRuntime(store.connection, **options))
    finally:
        await store.close()


async def test_the_index_bucket_follows_the_store_stream(nats_server: NatsServer) -> None:
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    try:
        fleet = NatsRuntime(store.connection)
        host = NatsAgentHost(AgentServer(agents, store, runtime=fleet))
        assert host.running.bucket == f"helix_running_{store.stream}"
        wrapped_fleet = NatsRuntime(store.connection)
        wrapped = NatsAgentHost(AgentServer(agents, WrappedStore(store), runtime=wrapped_fleet))
        assert wrapped.running.bucket == "helix_running"  # name it when wrapping the store
    finally:
        await store.close()


def test_a_key_maps_back_to_its_session() -> None:
    for session_id in ("plain", "a:b", "a_c", "a__c:d.e", "x.y_z:w", "_c"):
        assert session_of_key(lease_key(session_id)) == session_id
    with pytest.raises(ValueError, match="not a session's key"):
        session_of_key("_rebuilt")
