"""The JetStream delivery lost at a node's death: its cause, reproduced, found without the sweep.

The soak (``test_nats_soak.py``) saw a tail wait for ever on a finished
session after a NATS node died under the client's connection: the store's
consumer had delivered the message (nothing pending, deliveries moving on)
but no ring reached the tail. The cause is in nats-py's ordered consumer
(2.x, ``nats/js/client.py``), which finds missed deliveries two ways: a
delivery whose consumer seq is not the next it expects (so only once a later
message is stored), and an idle heartbeat whose ``Nats-Last-Consumer`` is not
the last consumer seq it received -- but that check is skipped until it has
received one delivery of the current consumer (``check_for_sequence_mismatch``
returns early without ``_cmeta``). A consumer's first deliveries lost on the
way (the connection breaks under them) are thus never found while nothing
else is stored: at a node's death that is a consumer just created, or just
re-created by nats-py itself (a gap, missed heartbeats), and a session whose
last events those were (a run that finished) is never rung.

Reproduced here at a real boundary: a NATS-protocol proxy between the store
and a real nats-server cuts the connection (or drops the frame) exactly as
the consumer's first delivery passes; and on a 3-node cluster, the proxy
kills the client's node by PID while that delivery passes through it. With
the sweep off, the store's probe finds the loss (the consumer had delivered
a consumer seq that never reached this process, a poll ago) and rings the
tail; without the poller, nats-py does not find it through two of its
heartbeats, and does only once another message is stored.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest
from conftest import fresh_stream_name
from nats_cluster import NODES, NatsCluster
from nats_fault_proxy import NatsFaultProxy, WireFault, nats_fault_proxy
from nats_server import NatsServer

from helix_agents.errors import StoreError
from helix_agents.events import TextDelta
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

POLL = 0.1
HEARTBEAT = 5.0  # nats-py's idle heartbeat of an ordered consumer (seconds)


def _delta(session_id: str, seq: int) -> TextDelta:
    return TextDelta(
        session_id=session_id, seq=seq, ts=1.0, agent_id=session_id, agent_type="a", delta=str(seq)
    )


@pytest.mark.parametrize("kind", ["cut", "drop"])
async def test_a_first_delivery_lost_on_the_way_still_rings_the_tail_without_the_sweep(
    nats_server: NatsServer, kind: str
) -> None:
    stream = fresh_stream_name()
    session_id = f"lost-{uuid.uuid4().hex[:8]}"
    writer = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    got: list[int] = []
    try:
        async with nats_fault_proxy(nats_server.url) as proxy:
            tailing = await JetStreamEventStore.connect(
                proxy.url, stream=stream, poll_interval=POLL
            )
            tailing._watch.sweep_every = None  # no sweep: the probe alone must find it
            fault = WireFault(target="delivery", kind=kind, nth=0)  # type: ignore[arg-type]
            try:
                await writer.append(session_id, [_delta(session_id, 1)], 0)
                proxy.play([fault])
                with anyio.fail_after(10):  # a cut costs nats-py's 2 s reconnect wait
                    async for event in tailing.tail(session_id):
                        got.append(event.seq)
                        if event.seq == 1:
                            # Stored after the tail's consumer exists: its first delivery.
                            await writer.append(session_id, [_delta(session_id, 2)], 1)
                        else:
                            break
            finally:
                await tailing.close()
            assert proxy.fired == [fault]  # the delivery was lost on the way
            if kind == "cut":
                assert proxy.connections >= 2  # and nats-py reconnected
    finally:
        await writer.close()
    assert got == [1, 2]


async def _connect_r3(url: str, **options: object) -> JetStreamEventStore:
    """Connect at 3 replicas, once the fresh cluster can place the stream."""
    with anyio.fail_after(30):
        while True:
            try:
                return await JetStreamEventStore.connect(url, replicas=3, **options)  # type: ignore[arg-type]
            except StoreError:
                await anyio.sleep(0.25)


@pytest.mark.parametrize("probe", [True, False], ids=["probe", "no-poller"])
async def test_a_real_node_death_under_the_first_delivery(tmp_path: Path, probe: bool) -> None:
    """The client's node SIGKILLed while its consumer's first delivery passes through it.

    A 3-node cluster, the stream at 3 replicas; the tailing store reaches a
    node other than the stream leader through the proxy (again, with a fresh
    store, until its consumer lives on another node: it outlives the kill).
    As the consumer's first delivery passes, the proxy kills that node by PID
    and only then lets the connection go: the delivery dies with the node, and
    nats-py reconnects to a surviving one. With the probe (sweep off) the tail
    gets the event; without the poller it does not through two of nats-py's
    heartbeats, and does once another message is stored (its delivery shows
    nats-py the gap).
    """
    with NatsCluster.start(tmp_path) as cluster:
        writer = await _connect_r3(cluster.url, request_timeout=2.0)
        try:
            info = await writer.connection.jetstream().stream_info(writer.stream)
            assert info.cluster is not None
            doomed = next(name for name in NODES if name != info.cluster.leader)
            async with nats_fault_proxy(cluster.nodes[doomed].url) as proxy:

                async def kill_the_node() -> None:
                    await anyio.to_thread.run_sync(cluster.kill, doomed)
                    proxy.stop_listening()  # refused from now on, as the node is

                proxy.on_cut = kill_the_node
                missed: list[bool] = []
                for _ in range(8):
                    got = await _tail_through_the_death(writer, proxy, doomed, probe, missed)
                    if got is not None:
                        break
                else:
                    pytest.fail("every consumer was placed on the node to kill")
                assert not cluster.nodes[doomed].running
                assert len(proxy.fired) == 1  # the delivery was in flight as the node died
        finally:
            await writer.close()
    assert got == [1, 2]
    # With the probe, it came in time; without the poller, only with the next message.
    assert missed == [not probe]


async def _tail_through_the_death(
    writer: JetStreamEventStore, proxy: NatsFaultProxy, doomed: str, probe: bool, missed: list[bool]
) -> list[int] | None:
    """Tail a new session through ``proxy``; None if the consumer landed on ``doomed``.

    Notes in ``missed`` whether event 2 had not come within the wait.
    """
    session_id = f"lost-{uuid.uuid4().hex[:8]}"
    await writer.append(session_id, [_delta(session_id, 1)], 0)
    tailing = await JetStreamEventStore.connect(
        proxy.url, stream=writer.stream, poll_interval=POLL if probe else None
    )
    tailing._watch.sweep_every = None
    got: list[int] = []
    arrived = {seq: anyio.Event() for seq in (1, 2)}

    async def follow() -> None:
        async for event in tailing.tail(session_id):
            got.append(event.seq)
            arrived[event.seq].set()

    try:
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                await arrived[1].wait()
                consumer = tailing._watch.consumer
                assert consumer is not None
                placed = (await consumer.consumer_info()).cluster
                assert placed is not None
                if placed.leader == doomed:
                    tg.cancel_scope.cancel()
                    return None
                proxy.play([WireFault(target="delivery", kind="cut", nth=0)])
                await writer.append(session_id, [_delta(session_id, 2)], 1)
                with anyio.move_on_after(10.0 if probe else 2.0 + 2 * HEARTBEAT):
                    await arrived[2].wait()
                missed.append(not arrived[2].is_set())
                if not probe:
                    # Another message stored: its delivery shows nats-py the gap.
                    other = f"other-{uuid.uuid4().hex[:8]}"
                    await writer.append(other, [_delta(other, 1)], 0)
                    await arrived[2].wait()
                tg.cancel_scope.cancel()
    finally:
        await tailing.close()
    return got
