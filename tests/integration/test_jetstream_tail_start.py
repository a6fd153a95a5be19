"""A JetStream tail that starts where its store's own append ended skips its catch-up read.

A run's interrupt watcher tails its log from the batch its run just
appended: the store knows where the log ends, and its consumer reports
every message after that, so the read would find nothing. It is skipped only
when the consumer covers every message after the store's last sight of the
session and has reported none of the session's beyond it: an append by
another store in between, reported or still on its way, reaches the tail
either way; after a probe found the consumer gone, tails read again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer

from helix_agents.events import Event, RunStarted, SessionCreated
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 60


def _created(session_id: str) -> list[Event]:
    return [
        SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r"),
        RunStarted(session_id=session_id, seq=2, ts=1.0, run_id="r"),
    ]


def _started(session_id: str, seq: int) -> list[Event]:
    return [RunStarted(session_id=session_id, seq=seq, ts=1.0, run_id=f"r{seq}")]


def _count_api_requests(store: JetStreamEventStore) -> Counter[str]:
    counts: Counter[str] = Counter()
    nc: Any = store._nc  # the test looks at the wire
    publish = nc.publish

    async def counted(subject: str, *args: Any, **kwargs: Any) -> Any:
        if subject.startswith("$JS.API."):
            counts[subject.split(".")[2]] += 1
        return await publish(subject, *args, **kwargs)

    nc.publish = counted
    return counts


async def _next_seq(store: JetStreamEventStore, session_id: str, from_seq: int) -> int:
    events = store.tail(session_id, from_seq)
    try:
        async for event in events:
            return event.seq
    finally:
        await events.aclose()  # type: ignore[attr-defined]
    raise AssertionError("the tail ended")


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await anyio.sleep(0.005)
    raise AssertionError("the condition never held")


async def _covering(store: JetStreamEventStore, tg: Any) -> None:
    """Keep the store's consumer in use (a tail of another session) until it covers the stream."""
    ready = anyio.Event()

    async def keep() -> None:
        events = store.tail("keeper")
        ready.set()
        async for _ in events:
            pass

    tg.start_soon(keep)
    await ready.wait()
    await _until(lambda: store._watch.covered_from is not None)  # once the consumer's info is back


async def test_a_tail_from_the_stores_own_append_does_not_read(nats_server: NatsServer) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            async with anyio.create_task_group() as tg:
                await _covering(store, tg)
                await store.append("s", _created("s"), 0)
                counts = _count_api_requests(store)
                events = store.tail("s", 2)
                first = anyio.Event()
                seen: list[int] = []

                async def follow() -> None:
                    async for event in events:
                        seen.append(event.seq)
                        first.set()
                        return

                tg.start_soon(follow)
                await anyio.sleep(0.2)  # the tail is waiting, having read nothing
                skipped = Counter(counts)
                await store.append("s", _started("s", 3), 2)
                await first.wait()
                tg.cancel_scope.cancel()
        finally:
            await store.close()
    assert skipped == {}
    assert seen == [3]


@pytest.mark.parametrize("wait_for_report", [True, False])
async def test_an_append_by_another_store_before_the_tail_is_never_missed(
    nats_server: NatsServer, wait_for_report: bool
) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        # No poller: nothing but the consumer could make up for a skipped read.
        mine = await JetStreamEventStore.connect(nats_server.url, stream=stream, poll_interval=None)
        other = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        found: list[int] = []
        try:
            async with anyio.create_task_group() as tg:
                await _covering(mine, tg)
                for n in range(20):
                    session = f"s{n}"
                    await mine.append(session, _created(session), 0)
                    await other.append(session, _started(session, 3), 2)
                    if wait_for_report:
                        appended = mine._positions[session][0] + 1  # the other's stream seq
                        seen = mine._watch.reported
                        await _until(lambda s=session, at=appended, r=seen: r.get(s, 0) >= at)
                    # The store's last sight of the session is its own append, at seq 2.
                    with anyio.fail_after(5):
                        found.append(await _next_seq(mine, session, 2))
                tg.cancel_scope.cancel()
        finally:
            await other.close()
            await mine.close()
    assert found == [3] * 20


async def test_after_a_probe_finds_the_consumer_gone_tails_read(nats_server: NatsServer) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        url = nats_server.url
        store = await JetStreamEventStore.connect(url, stream=stream, poll_interval=None)
        other = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            async with anyio.create_task_group() as tg:
                await _covering(store, tg)
                nc = await nats.connect(nats_server.url)
                try:
                    for consumer in await nc.jsm().consumers_info(stream):
                        await nc.jsm().delete_consumer(stream, consumer.name)
                finally:
                    await nc.close()
                # Gone: every tail re-reads.
                assert await store._watch.probe(["keeper"]) == ["keeper"]
                await store.append("s", _created("s"), 0)
                # Another store's append, which the deleted consumer never reports.
                await other.append("s", _started("s", 3), 2)
                with anyio.fail_after(5):
                    found = await _next_seq(store, "s", 2)
                tg.cancel_scope.cancel()
        finally:
            await other.close()
            await store.close()
    assert found == 3
