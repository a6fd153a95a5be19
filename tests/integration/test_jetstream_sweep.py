"""A tail whose ring was lost after its delivery arrived still gets the event: the sweep.

The sweep is the poller's last resort, every ``sweep_every``-th poll. The
loss the soak found (a delivery lost on the way at a node's death) is found
by the probe (``test_jetstream_lost_delivery.py``); here the delivery does
reach the store and only its ring is lost, which no probe can see: the tail
still receives the other store's append, at the next sweep.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
from conftest import fresh_stream_name
from nats.aio.msg import Msg
from nats_server import NatsServer

from helix_agents.events import TextDelta
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

POLL = 0.1


def _delta(session_id: str, seq: int) -> TextDelta:
    return TextDelta(
        session_id=session_id, seq=seq, ts=1.0, agent_id=session_id, agent_type="a", delta=str(seq)
    )


async def test_a_tail_whose_deliveries_are_lost_gets_the_event_from_the_sweep(
    nats_server: NatsServer,
) -> None:
    stream = fresh_stream_name()
    session_id = f"sweep-{uuid.uuid4().hex[:8]}"
    tailing = await JetStreamEventStore.connect(nats_server.url, stream=stream, poll_interval=POLL)
    writer = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    lost: list[str] = []

    def drop(msg: Msg, prefix: str) -> None:
        # Arrived (the probe sees nothing amiss), then lost before it rang.
        tailing._watch._note_received(msg.metadata.consumer, msg.metadata.sequence.consumer)
        lost.append(msg.subject)

    tailing._watch.on_stored = drop  # type: ignore[method-assign]
    got: list[int] = []
    try:
        await writer.append(session_id, [_delta(session_id, 1)], 0)
        with anyio.fail_after(20):  # the sweep comes every SWEEP_EVERY (12) polls of 0.1 s
            tail = tailing.tail(session_id)
            try:
                async for event in tail:
                    got.append(event.seq)
                    if event.seq == 1:
                        await writer.append(session_id, [_delta(session_id, 2)], 1)
                    else:
                        break
            finally:
                await tail.aclose()  # type: ignore[attr-defined]
    finally:
        await writer.close()
        await tailing.close()
    assert got == [1, 2]
    assert lost  # the consumer did deliver it: the ring was lost here
