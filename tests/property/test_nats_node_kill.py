"""A node of a 3-node NATS cluster killed under tails: every event once, in order, sweep off.

Each example starts a real 3-node ``nats-server`` cluster (``tests/nats_cluster.py``),
the event stream at 3 replicas, and a store that tails a few sessions while
another store appends to them one event at a time (each once the tail holds
the one before). After a drawn number of events has reached the tails,
Hypothesis's chosen node is SIGKILLed: the one the tailing store's
connection is on, the one holding its consumer, or the stream leader (often
the same node: the example says which). Appends go on (an append the
election left unanswered is re-sent at the same position; a conflict then
means the first try landed), and a tail that breaks (a read that met the
dead node) is resumed from the last seq it holds.

Asserted (DESIGN.md section 8): every tail yields each of its session's
events exactly once, in order, with the poller's sweep turned off (a
delivery lost with the node is found by the probe, ``stores.md``, "tail"),
and every log runs 1..n.

Bounded: three examples of a few seconds each (a cluster start, an election,
nats-py's reconnect wait).
"""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path

import anyio
import pytest
from hypothesis import event, given, note, settings, strategies as st
from nats_cluster import NatsCluster
from test_transport_faults import FAULT_SETTINGS

from helix_agents.errors import ConcurrencyConflict, StoreError
from helix_agents.events import TextDelta
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.nats, pytest.mark.slow]

POLL = 0.1
EXAMPLE_LIMIT = 40.0
EVENTS = 5  # per session


def _delta(session_id: str, seq: int) -> TextDelta:
    return TextDelta(
        session_id=session_id, seq=seq, ts=1.0, agent_id=session_id, agent_type="a", delta=str(seq)
    )


async def _connect(url: str, **options: object) -> JetStreamEventStore:
    """Connect at 3 replicas, once the fresh cluster can place the stream."""
    with anyio.fail_after(30):
        while True:
            try:
                return await JetStreamEventStore.connect(
                    url, replicas=3, request_timeout=1.0, **options
                )  # type: ignore[arg-type]
            except StoreError:
                await anyio.sleep(0.25)


async def _append(store: JetStreamEventStore, session_id: str, seq: int) -> None:
    """Append event ``seq``, re-sent at the same position until it is known to have landed."""
    while True:
        try:
            await store.append(session_id, [_delta(session_id, seq)], seq - 1)
            return
        except ConcurrencyConflict:
            return  # an earlier, unanswered try landed (only this writer writes here)
        except StoreError:
            await anyio.sleep(0.1)


async def _victim(cluster: NatsCluster, tailing: JetStreamEventStore, which: str) -> str:
    nc = tailing.connection
    if which == "client":
        port = nc.connected_url.port if nc.connected_url else None
        return next(name for name, node in cluster.nodes.items() if node.port == port)
    if which == "consumer":
        consumer = tailing._watch.consumer
        assert consumer is not None
        info = await consumer.consumer_info()
        assert info.cluster is not None
        return str(info.cluster.leader)
    info = await nc.jetstream().stream_info(tailing.stream)
    assert info.cluster is not None
    return str(info.cluster.leader)


@settings(FAULT_SETTINGS, max_examples=3)
@given(
    which=st.sampled_from(["client", "consumer", "leader"]),
    kill_after=st.integers(1, EVENTS - 1),
    sessions=st.integers(1, 2),
)
async def test_tails_get_every_event_once_in_order_when_a_node_is_killed(
    which: str, kill_after: int, sessions: int
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        cluster = await anyio.to_thread.run_sync(NatsCluster.start, Path(tmp))
        try:
            await _run(cluster, which, kill_after, sessions)
        finally:
            await anyio.to_thread.run_sync(cluster.stop)


async def _run(cluster: NatsCluster, which: str, kill_after: int, sessions: int) -> None:
    writer = await _connect(cluster.url)
    tailing = await _connect(cluster.url, stream=writer.stream, poll_interval=POLL)
    tailing._watch.sweep_every = None  # a lost delivery must be found, not swept
    ids = [f"kill-{uuid.uuid4().hex[:8]}" for _ in range(sessions)]
    got: dict[str, list[int]] = {session_id: [] for session_id in ids}
    arrived = {(s, seq): anyio.Event() for s in ids for seq in range(1, EVENTS + 1)}
    delivered = 0
    time_to_kill = anyio.Event()
    killed = anyio.Event()
    reopened = 0
    try:
        with anyio.fail_after(EXAMPLE_LIMIT):

            async def follow(session_id: str) -> None:
                nonlocal delivered, reopened
                held = got[session_id]
                while not held or held[-1] < EVENTS:
                    try:
                        async for item in tailing.tail(session_id, held[-1] if held else 0):
                            held.append(item.seq)
                            arrived[(session_id, item.seq)].set()
                            delivered += 1
                            if delivered >= kill_after:
                                time_to_kill.set()
                            if item.seq == EVENTS:
                                return
                    except StoreError:
                        reopened += 1  # resumed by sequence, as a client does
                        await anyio.sleep(0.05)

            async def write(session_id: str) -> None:
                for seq in range(1, EVENTS + 1):
                    if seq > 1:
                        await arrived[(session_id, seq - 1)].wait()
                    if seq == EVENTS:
                        await killed.wait()  # the kill lands inside the run
                    await _append(writer, session_id, seq)

            async def kill() -> None:
                await time_to_kill.wait()
                victim = await _victim(cluster, tailing, which)
                event(f"killed the {which}'s node")
                note(f"killed {victim} ({which}) after {delivered} events")
                await anyio.to_thread.run_sync(cluster.kill, victim)
                killed.set()

            async with anyio.create_task_group() as tg:
                tg.start_soon(kill)
                for session_id in ids:
                    tg.start_soon(follow, session_id)
                    tg.start_soon(write, session_id)
        note(f"tails re-opened {reopened} times")
        for session_id in ids:
            assert got[session_id] == list(range(1, EVENTS + 1)), session_id
            log = await writer.read(session_id)
            assert [item.seq for item in log] == list(range(1, EVENTS + 1)), session_id
    finally:
        await tailing.close()
        await writer.close()
