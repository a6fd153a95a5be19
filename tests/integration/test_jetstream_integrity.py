"""The JetStream store detects damage on read, and follows every session with one consumer.

A batch stored on a session's subject whose ``Helix-Chain`` does not follow
its predecessor's, or whose seqs skip some, is :class:`DamagedLogError` on
read and in ``check_store``; the other sessions read as before. However many
tails a store has, it keeps one consumer on the stream, and a foreign append
wakes only its session's tail.
"""

from __future__ import annotations

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from followed import Followed, follow
from nats_server import NatsServer

from helix_agents.errors import DamagedLogError
from helix_agents.events import Event, SessionCreated, TextDelta
from helix_agents.ids import encode_session_token
from helix_agents.log import encode_event
from helix_agents.stores import JetStreamEventStore, check_store

pytestmark = pytest.mark.nats

TIMEOUT = 30


def log_of(session_id: str, count: int = 8) -> list[Event]:
    """A session's log: ``session_created``, then text deltas."""
    events: list[Event] = [
        SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r")
    ]
    for seq in range(2, count + 1):
        events.append(
            TextDelta(
                session_id=session_id,
                seq=seq,
                ts=1.0,
                agent_id=session_id,
                agent_type="a",
                delta=f"{session_id}#{seq}",
            )
        )
    return events


async def publish_raw(
    url: str, stream: str, session_id: str, events: list[Event], chain: str
) -> None:
    """Store a batch on the session's subject as helix would, but with the given chain header."""
    nc = await nats.connect(url)
    try:
        await nc.jetstream().publish(
            f"helix.{stream}.{encode_session_token(session_id)}",
            b"[" + b",".join(encode_event(event) for event in events) + b"]",
            stream=stream,
            headers={
                "Helix-First-Seq": str(events[0].seq),
                "Helix-Last-Seq": str(events[-1].seq),
                "Helix-Chain": chain,
            },
        )
    finally:
        await nc.close()


async def test_a_broken_chain_and_a_hole_are_damage(nats_server: NatsServer) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(TIMEOUT):
        async with await JetStreamEventStore.connect(nats_server.url, stream=stream) as store:
            for session_id in ("s0", "s1", "s2"):
                events = log_of(session_id)
                await store.append(session_id, events[:3], 0)
                await store.append(session_id, events[3:5], 3)
            # s1: a batch that follows by its seqs but not by its chain.
            await publish_raw(nats_server.url, stream, "s1", log_of("s1")[5:], "0badc0de")
            # s2: a batch that skips seq 6.
            await publish_raw(nats_server.url, stream, "s2", log_of("s2")[6:], "00000000")
            assert await store.read("s0") == log_of("s0", 5)
            with pytest.raises(DamagedLogError) as broken:
                await store.read("s1")
            assert (broken.value.seq, broken.value.reason) == (6, "checksum mismatch")
            with pytest.raises(DamagedLogError) as hole:
                await store.read("s2", 2)
            assert (hole.value.seq, hole.value.reason) == (6, "gap: the event is missing")
            report = await check_store(store)
    assert report.sessions == 3
    assert report.damaged == {
        "s1": "session 's1' is damaged at seq 6: checksum mismatch",
        "s2": "session 's2' is damaged at seq 6: gap: the event is missing",
    }


async def test_one_consumer_per_store_however_many_tails(nats_server: NatsServer) -> None:
    stream = fresh_stream_name()
    sessions = [f"js-{index}" for index in range(20)]
    with anyio.fail_after(TIMEOUT):
        async with (
            await JetStreamEventStore.connect(nats_server.url, stream=stream) as store,
            await JetStreamEventStore.connect(nats_server.url, stream=stream) as other,
        ):
            for session_id in sessions:
                await store.append(session_id, log_of(session_id, 1), 0)
            async with anyio.create_task_group() as tg:
                seen = {session_id: Followed() for session_id in sessions}
                for session_id in sessions:
                    tg.start_soon(follow, store, session_id, seen[session_id])
                    await seen[session_id].reach(1)
                nc = await nats.connect(nats_server.url)
                try:
                    info = await nc.jsm().stream_info(stream)
                finally:
                    await nc.close()
                assert info.state.consumer_count == 1
                await other.append(sessions[3], log_of(sessions[3], 2)[1:], 1)
                await seen[sessions[3]].reach(2)
                assert all(len(seen[session_id]) == 1 for session_id in sessions[4:])
                tg.cancel_scope.cancel()
