"""A three-node NATS cluster, the event stream at 3 replicas: kill one node mid-run.

Store level: writers append small batches to several sessions through one
:class:`JetStreamEventStore` given every node's URL (comma-separated); the
**stream leader** is SIGKILLed mid-run (the node whose loss forces a new
stream leader election: the case where an acknowledged write not on a quorum
would be lost). Appends during the failover may fail with ``StoreError``
(never acknowledged: the writer retries the same batch at the same position,
and a ``ConcurrencyConflict`` then means an earlier try did land); writes go
on once a new leader is elected. Afterwards every acknowledged append is in
the log, and every log is gap-free and holds exactly what its writer wrote.

Fleet level: two ``helix-agents host`` processes, given every node's URL, and
a parent in this process; the stream leader's node is killed while a remote
child session streams (whichever clients were connected to it fail over).
The parent's stream of the child breaks and is re-opened from its last
sequence; the child's run may crash on an append during the election, and is
then taken over once its lease lapses. The child finishes, the parent gets
its output (each chunk forwarded once), and the child's log has no gap and
no duplicate.
"""

from __future__ import annotations

import random
import uuid
from pathlib import Path
from typing import Any

import anyio
import nats
import pytest
from nats.aio.client import Client as NatsClient
from nats_cluster import NatsCluster
from test_nats_fleet import TARGET, _delegate, _process

from helix_agents.errors import ConcurrencyConflict, StoreError
from helix_agents.events import Event, TextDelta
from helix_agents.log import project_state
from helix_agents.server.fleet.leases import LEASE_BUCKET
from helix_agents.stores import JetStreamEventStore, open_store
from helix_agents.transports.nats import HOSTS_BUCKET, NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 45
SESSIONS = 4
ACKS_BEFORE_KILL = 40  # acknowledged appends (all sessions) before the node dies
ACKS_AFTER_KILL = 10  # acknowledged appends per session after it died
TTL = 2.0  # the hosts' lease TTL: a run that crashed in the failover is taken over after it


class _Writers:
    """What the writers acknowledged and wrote, and when to kill and stop."""

    def __init__(self) -> None:
        self.written: dict[str, list[Event]] = {}
        self.acked: dict[str, set[int]] = {}
        self.acks = 0
        self.after_kill: dict[str, int] = {}
        self.unsure = 0  # appends that failed with StoreError (unknown outcome)
        self.killed = False
        self.ready_to_kill = anyio.Event()
        self.recovered = anyio.Event()

    def acknowledged(self, session_id: str, batch: list[Event]) -> None:
        self.acked[session_id].update(event.seq for event in batch)
        self.acks += 1
        if self.acks >= ACKS_BEFORE_KILL:
            self.ready_to_kill.set()
        if self.killed:
            self.after_kill[session_id] = self.after_kill.get(session_id, 0) + 1
            if len(self.after_kill) == SESSIONS and min(self.after_kill.values()) >= (
                ACKS_AFTER_KILL
            ):
                self.recovered.set()


async def _write(store: JetStreamEventStore, session_id: str, state: _Writers) -> None:
    """Append batches of 1-3 events until told to stop; settle each before the next."""
    rng = random.Random(session_id)
    written = state.written[session_id] = []
    state.acked[session_id] = set()
    while not state.recovered.is_set():
        seq = len(written)
        batch: list[Event] = [
            TextDelta(
                session_id=session_id,
                seq=seq + n,
                ts=1.0,
                agent_id=session_id,
                agent_type="writer",
                delta=f"{session_id}/{seq + n}",
            )
            for n in range(1, rng.randint(1, 3) + 1)
        ]
        while True:
            try:
                try:
                    await store.append(session_id, batch, seq)
                except ConcurrencyConflict:
                    # Only this task writes the session: an earlier, unacknowledged
                    # try of this batch landed. It is in the log, but was never acked.
                    assert await store.read(session_id, seq) == batch
                else:
                    state.acknowledged(session_id, batch)
                break
            except StoreError:
                state.unsure += 1  # no acknowledgement: retry at the same position
                await anyio.sleep(0.1)  # back off while the cluster elects a leader
        written.extend(batch)


async def _connect_r3(url: str, **options: Any) -> JetStreamEventStore:
    """Connect, creating the stream at three replicas once the cluster can place it.

    A cluster whose meta leader is known may still report its peers offline
    for a moment (longer on a loaded machine): creation then fails with "no
    suitable peers for placement" and nothing exists yet, so it is tried
    again, within a bound.
    """
    with anyio.fail_after(60):
        while True:
            try:
                return await JetStreamEventStore.connect(url, replicas=3, **options)
            except StoreError:
                await anyio.sleep(0.25)


async def _stream_leader(nc: NatsClient, stream: str) -> str:
    info = await nc.jetstream().stream_info(stream)
    assert info.cluster is not None
    assert info.cluster.leader is not None
    return str(info.cluster.leader)


async def test_no_acknowledged_append_is_lost_when_the_stream_leader_node_is_killed(
    tmp_path: Path,
) -> None:
    stream = f"CLUSTER{uuid.uuid4().hex[:8]}"
    state = _Writers()
    with NatsCluster.start(tmp_path / "nats") as cluster, anyio.fail_after(LIMIT):
        # Creating an R3 stream on a fresh cluster can take more than the
        # writers' short timeout: create it first.
        await (await _connect_r3(cluster.url, stream=stream)).close()
        store = await JetStreamEventStore.connect(
            cluster.url, stream=stream, request_timeout=1.0, publish_attempts=2
        )
        nc = await nats.connect(servers=cluster.url.split(","), max_reconnect_attempts=-1)
        try:
            info = await nc.jetstream().stream_info(stream)
            assert info.config.num_replicas == 3
            async with anyio.create_task_group() as tg:
                for n in range(SESSIONS):
                    tg.start_soon(_write, store, f"cl-{n}", state)
                await state.ready_to_kill.wait()
                victim = await _stream_leader(nc, stream)
                state.killed = True
                await anyio.to_thread.run_sync(cluster.kill, victim)
                acks_at_kill = state.acks
            new_leader = await _stream_leader(nc, stream)
        finally:
            await nc.close()
            await store.close()
        # A fresh store, from the comma-separated URL with options, on the two survivors.
        reader = await open_store(f"{cluster.url}?stream={stream}&replicas=3")
        try:
            logs = {sid: await reader.read(sid) for sid in state.written}
            sessions = await reader.list_sessions()
        finally:
            await reader.close()
    context = f"killed {victim} after {acks_at_kill} acks; {state.unsure} unsure appends"
    assert new_leader != victim, context
    assert sessions == sorted(state.written), context
    for sid, log in logs.items():
        assert [event.seq for event in log] == list(range(1, len(log) + 1)), context  # no gap
        assert log == state.written[sid], context  # exactly what was written, once
        assert state.acked[sid] <= {event.seq for event in log}, context  # no ack lost
        assert state.after_kill[sid] >= ACKS_AFTER_KILL, context


async def test_a_fleet_session_finishes_when_the_stream_leader_node_is_killed(
    tmp_path: Path,
) -> None:
    child = "fleet-remote-r1"
    at_kill: list[int] = []
    with NatsCluster.start(tmp_path / "nats") as cluster, anyio.fail_after(LIMIT):
        # The stream, at three replicas, once the cluster can place it; the
        # hosts create the lease and hosts buckets, at --replicas 3.
        setup = await _connect_r3(cluster.url)
        nc = await nats.connect(servers=cluster.url.split(","), max_reconnect_attempts=-1)
        try:
            host_args = [
                *("host", TARGET, "--nats", cluster.url),
                *("--lease-ttl", str(TTL), "--replicas", "3"),
            ]
            async with (
                _process(host_args, tmp_path / "host1.log", "helix-agents: hosting"),
                _process(host_args, tmp_path / "host2.log", "helix-agents: hosting"),
            ):
                for bucket in (LEASE_BUCKET, HOSTS_BUCKET):
                    status = await (await nc.jetstream().key_value(bucket)).status()
                    assert status.stream_info.config.num_replicas == 3, bucket
                remote = NatsRemoteAgentTransport(nc, setup, timeout=2.0, max_retries=5)
                victim = cluster.nodes[await _stream_leader(nc, setup.stream)]

                async def kill_when_streaming() -> None:
                    async for event in setup.tail(child):
                        if isinstance(event, TextDelta):
                            at_kill.append(event.seq)
                            break  # the child streams on a host
                    await anyio.to_thread.run_sync(victim.kill)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(kill_when_streaming)
                    await _delegate(remote, "fleet")  # the parent completes, children checked
            log = await setup.read(child)
            new_leader = await _stream_leader(nc, setup.stream)
        finally:
            await nc.close()
            await setup.close()
    assert not victim.running
    assert new_leader != victim.name
    assert at_kill
    assert log[-1].seq > at_kill[0] + 10  # the child went on well after the kill
    final = project_state(log)
    assert final.status == "completed", final.error
    assert [event.seq for event in log] == list(range(1, len(log) + 1))  # no gap, no duplicate
