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
the consumer's first delivery passes. With the sweep off, the store's probe
finds the loss (the consumer had delivered a consumer seq that never reached
this process, a poll ago) and rings the tail; without the probe, nats-py
never finds it, whatever its heartbeats say, until the next message stored.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
from conftest import fresh_stream_name
from nats_fault_proxy import WireFault, nats_fault_proxy
from nats_server import NatsServer

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


async def test_without_the_probe_the_loss_is_found_only_by_the_next_message_stored(
    nats_server: NatsServer,
) -> None:
    """nats-py's heartbeats do not find a new consumer's lost first delivery; a later one does."""
    stream = fresh_stream_name()
    session_id = f"lost-{uuid.uuid4().hex[:8]}"
    writer = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    got: list[int] = []
    two_heartbeats_missed = False
    try:
        async with nats_fault_proxy(nats_server.url) as proxy:
            tailing = await JetStreamEventStore.connect(
                proxy.url, stream=stream, poll_interval=None
            )
            try:
                await writer.append(session_id, [_delta(session_id, 1)], 0)
                proxy.play([WireFault(target="delivery", kind="cut", nth=0)])
                arrived = {seq: anyio.Event() for seq in (1, 2)}

                async def follow() -> None:
                    async for event in tailing.tail(session_id):
                        got.append(event.seq)
                        arrived[event.seq].set()
                        if event.seq == 2:
                            return

                with anyio.fail_after(30):
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(follow)
                        await arrived[1].wait()
                        await writer.append(session_id, [_delta(session_id, 2)], 1)
                        # Waiting for an absence: the ring of 2 never comes, though the
                        # consumer sends idle heartbeats all along (reconnect + 2 of them).
                        with anyio.move_on_after(2.0 + 2 * HEARTBEAT):
                            await arrived[2].wait()
                        two_heartbeats_missed = not arrived[2].is_set()
                        # Another message stored: its delivery shows nats-py the gap.
                        other = f"other-{uuid.uuid4().hex[:8]}"
                        await writer.append(other, [_delta(other, 1)], 0)
                        await arrived[2].wait()
            finally:
                await tailing.close()
    finally:
        await writer.close()
    assert two_heartbeats_missed  # the loss outlived nats-py's own checks
    assert got == [1, 2]
