"""A replicated stream's session is read in batches, not one request per message.

A three-node cluster, the event stream at 3 replicas. A session of 300
batches (300 stream messages), interleaved with another session's, is read
by a fresh store (no remembered batch ends) whose connection goes to a
follower's node. The JetStream API requests the read makes are counted by a
plain subscriber on ``$JS.API.>`` (every request in the account reaches it,
and a message the reader sends after its reads says when it has them all):
a few batched direct gets and one get from the leader, where it used to be
one get per message (300). What is read is exactly what was written, and a
read from the middle (``from_seq``) too. Appends made through another node
right before the read are in it (a follower's direct answers may lag: the
leader's get after the batches finds the rest). A stream made without
``allow_direct`` (replicated streams were, before) is given it when a store
connects.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from nats.aio.msg import Msg
from nats.js.api import StorageType
from nats_cluster import NatsCluster
from nats_server import NatsServer
from test_nats_cluster import _connect_r3, _stream_leader

from helix_agents.events import Event, TextDelta
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 90
BATCHES = 300


def _delta(session_id: str, seq: int) -> Event:
    return TextDelta(
        session_id=session_id,
        seq=seq,
        ts=1.0,
        agent_id=session_id,
        agent_type="writer",
        delta=f"{session_id}/{seq}",
    )


async def test_a_long_session_on_a_replicated_stream_is_read_in_a_few_requests(
    tmp_path: Path,
) -> None:
    stream = f"READS{uuid.uuid4().hex[:8]}"
    long_id, other_id = "long", "other"
    with NatsCluster.start(tmp_path) as cluster, anyio.fail_after(LIMIT):
        writer = await _connect_r3(cluster.url, stream=stream)
        counter = await nats.connect(servers=cluster.url.split(","))
        requests: list[str] = []
        try:
            written: list[Event] = []
            for seq in range(1, BATCHES + 1):
                batch = [_delta(long_id, seq)]
                await writer.append(long_id, batch, seq - 1)
                written.extend(batch)
                await writer.append(other_id, [_delta(other_id, seq)], seq - 1)
            leader = await _stream_leader(writer.connection, stream)
            follower = next(node for node in cluster.nodes.values() if node.name != leader)
            reader = await JetStreamEventStore.connect(follower.url, stream=stream)
            try:
                counted = anyio.Event()
                done = f"$JS.API.TEST_COUNTED.{stream}"  # no service answers it

                async def count(msg: Msg) -> None:
                    if msg.subject == done:
                        counted.set()
                    else:
                        requests.append(msg.subject)

                # One subscription, so its messages are handled in order.
                await counter.subscribe("$JS.API.>", cb=count)
                await counter.flush()
                # Two more appends through another node, just before the read.
                for seq in (BATCHES + 1, BATCHES + 2):
                    batch = [_delta(long_id, seq)]
                    await writer.append(long_id, batch, seq - 1)
                    written.extend(batch)
                await counter.flush()
                requests.clear()
                read = await reader.read(long_id)
                middle = await reader.read(long_id, BATCHES // 2)
                # Sent after the reads' requests on the same connection: once the
                # counter has it, it has them all.
                await reader.connection.publish(done, b"")
                await counted.wait()
            finally:
                await reader.close()
        finally:
            await counter.close()
            await writer.close()
    assert read == written
    assert middle == written[BATCHES // 2 :]
    direct = [subject for subject in requests if subject.startswith("$JS.API.DIRECT.GET.")]
    one_by_one = [subject for subject in requests if ".MSG.GET." in subject]
    # A whole read: two batches of up to 256 and one get from the leader. The read
    # from the middle: where to start (the last message and a binary search: about
    # log2(600) gets), then a batch and the leader's get.
    assert 1 <= len(direct) <= 6, requests
    assert len(one_by_one) <= 16, requests
    assert len(requests) <= 24, requests


async def test_a_stream_made_without_direct_gets_is_given_them_and_read_in_batches(
    nats_server: NatsServer,
) -> None:
    """A stream an earlier version made without ``allow_direct`` (replicated ones were)."""
    stream = fresh_stream_name()
    nc = await nats.connect(nats_server.url)
    try:
        await nc.jsm().add_stream(
            name=stream,
            subjects=[f"helix.{stream}.*"],
            storage=StorageType.FILE,
            allow_direct=False,
        )
        store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            assert (await nc.jsm().stream_info(stream)).config.allow_direct is True
            written = [_delta("s", seq) for seq in range(1, 51)]
            for event in written:
                await store.append("s", [event], event.seq - 1)
            requests: list[str] = []
            done = f"$JS.API.TEST_COUNTED.{stream}"
            counted = anyio.Event()

            async def count(msg: Msg) -> None:
                if msg.subject == done:
                    counted.set()
                else:
                    requests.append(msg.subject)

            await nc.subscribe("$JS.API.>", cb=count)
            await nc.flush()
            fresh = await JetStreamEventStore.connect(nats_server.url, stream=stream)
            try:
                requests.clear()
                with anyio.fail_after(LIMIT):
                    assert await fresh.read("s") == written
                    await fresh.connection.publish(done, b"")
                    await counted.wait()
            finally:
                await fresh.close()
        finally:
            await store.close()
    finally:
        await nc.close()
    gets = [subject for subject in requests if ".GET." in subject]
    assert gets == [f"$JS.API.DIRECT.GET.{stream}"]  # one batch; unreplicated: no more


async def test_a_direct_get_nobody_answers_falls_back_to_the_leaders_gets(
    nats_server: NatsServer,
) -> None:
    """No server answers a direct get (``503``: as when replicas do not serve them yet).

    The store was told the stream serves direct gets, then the stream stops
    serving them: a read tries the batch again a few times, then reads from
    the leader one message a request, and gets the whole log, not an error.
    """
    stream = fresh_stream_name()
    store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    nc = await nats.connect(nats_server.url)
    try:
        # A few events: with direct gets gone, each message read waits out the retries.
        written = [_delta("s", seq) for seq in range(1, 7)]
        for event in written:
            await store.append("s", [event], event.seq - 1)
        info = await nc.jsm().stream_info(stream)
        assert info.config.allow_direct is True
        await nc.jsm().update_stream(replace(info.config, allow_direct=False))
        reader = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            # Connecting gives the stream its direct gets back: take them away again.
            info = await nc.jsm().stream_info(stream)
            await nc.jsm().update_stream(replace(info.config, allow_direct=False))
            with anyio.fail_after(LIMIT):
                assert await reader.read("s") == written
                assert await reader.read("s", 3) == written[3:]
        finally:
            await reader.close()
    finally:
        await nc.close()
        await store.close()
