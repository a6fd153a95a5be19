"""JetStream reads in few requests: batches of messages per direct get, and remembered positions.

A session of 300 batches, interleaved with another session's, is read by a
fresh store from 0 in two direct gets (256 a batch); a store reads on from a
batch it appended or read without searching (one request); a store's
remembered positions that a delete and rebuild by another store made stale
never make it read wrong.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer

from helix_agents.events import Event, RunStarted, SessionCreated
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 60


def _batch(session_id: str, seq: int, run: str = "r") -> list[Event]:
    if seq == 1:
        return [SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id=run)]
    return [RunStarted(session_id=session_id, seq=seq, ts=1.0, run_id=f"{run}{seq}")]


def _count_requests(store: JetStreamEventStore) -> Counter[str]:
    """Count the requests ``store`` sends from now on, by kind."""
    counts: Counter[str] = Counter()
    nc: Any = store._nc  # the test looks at the wire
    publish, request = nc.publish, nc.request

    async def counted_publish(subject: str, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("reply") and subject.startswith("$JS.API.DIRECT.GET"):
            counts["direct get"] += 1
        return await publish(subject, *args, **kwargs)

    async def counted_request(subject: str, *args: Any, **kwargs: Any) -> Any:
        counts["get" if subject.startswith("$JS.API.STREAM.MSG.GET") else subject] += 1
        return await request(subject, *args, **kwargs)

    nc.publish, nc.request = counted_publish, counted_request
    return counts


async def test_a_long_log_is_read_in_batches_and_read_on_without_a_search(
    nats_server: NatsServer,
) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        writer = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        reader = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            for seq in range(1, 301):
                await writer.append("long", _batch("long", seq), seq - 1)
                await writer.append("other", _batch("other", seq), seq - 1)
            counts = _count_requests(reader)
            whole = await reader.read("long")
            from_zero = Counter(counts)
            counts.clear()
            await writer.append("long", _batch("long", 301), 300)
            new = await reader.read("long", 300)  # where its last read ended
            read_on = Counter(counts)
            counts = _count_requests(writer)
            own = await writer.read("long", 299)  # a batch it appended
            own_counts = Counter(counts)
        finally:
            await reader.close()
            await writer.close()
    assert [event.seq for event in whole] == list(range(1, 301))
    assert from_zero == {"direct get": 2}
    assert [event.seq for event in new] == [301]
    assert read_on == {"direct get": 1}
    assert [event.seq for event in own] == [300, 301]
    assert own_counts == {"direct get": 1}


async def test_positions_made_stale_by_a_rebuild_never_mislead_a_read(
    nats_server: NatsServer,
) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        first = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        second = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            for seq in range(1, 6):
                await first.append("s", _batch("s", seq), seq - 1)
            assert len(await first.read("s")) == 5
            assert await second.delete("s")
            for seq in range(1, 9):
                await second.append("s", _batch("s", seq, run="x"), seq - 1)
            tail_of_rebuilt = await first.read("s", 5)  # first remembers the old batch 5
            rebuilt = await first.read("s")
        finally:
            await second.close()
            await first.close()
    assert [(e.seq, e.run_id) for e in tail_of_rebuilt] == [(s, f"x{s}") for s in (6, 7, 8)]  # type: ignore[attr-defined]
    assert [e.run_id for e in rebuilt] == ["x", *(f"x{s}" for s in range(2, 9))]  # type: ignore[attr-defined]
