"""A JetStream store leaves no consumer behind: its tails share one, deleted when unused.

Before, every burst of tails created an ordered consumer that lingered on the
server for its inactivity threshold after the last tail ended; a stream
allows 1,000, so a fleet sustained about 200 new tails a second. Now tails in
a row reuse the store's one consumer, which is deleted ``WATCH_LINGER``
seconds after the last tail ends, or when the store closes.
"""

from __future__ import annotations

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer

from helix_agents.events import Event, RunStarted, SessionCreated
from helix_agents.stores import JetStreamEventStore
from helix_agents.stores.jetstream import watch as _jetstream_watch

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 60
TAILS = 300


def _created(session_id: str) -> list[Event]:
    return [
        SessionCreated(session_id=session_id, seq=1, ts=1.0, agent_type="a", run_id="r"),
        RunStarted(session_id=session_id, seq=2, ts=1.0, run_id="r"),
    ]


async def _consumers(url: str, stream: str) -> int:
    nc = await nats.connect(url)
    try:
        info = await nc.jsm().stream_info(stream)
    finally:
        await nc.close()
    return int(info.state.consumer_count)


async def _consumers_after(url: str, stream: str, seconds: float) -> int:
    """The stream's consumer count once it reaches 0, or after ``seconds``.

    The server's count is the only signal of a deletion: ask until it is 0.
    """
    for _ in range(max(1, int(seconds / 0.05))):
        if (left := await _consumers(url, stream)) == 0:
            break
        await anyio.sleep(0.05)
    return left


async def _tail_once(store: JetStreamEventStore, session_id: str) -> None:
    events = store.tail(session_id)
    try:
        async for event in events:
            if event.seq == 2:
                break
    finally:
        await events.aclose()  # type: ignore[attr-defined]


async def test_tails_in_a_row_share_one_consumer_and_none_is_left(
    nats_server: NatsServer,
) -> None:
    stream = fresh_stream_name()
    seen: list[int] = []
    with anyio.fail_after(LIMIT):
        store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            for n in range(10):
                await store.append(f"s{n}", _created(f"s{n}"), 0)
            for n in range(TAILS):
                await _tail_once(store, f"s{n % 10}")
                if n % 50 == 0:
                    seen.append(await _consumers(nats_server.url, stream))
        finally:
            await store.close()
        left = await _consumers(nats_server.url, stream)
    assert max(seen) <= 1  # one consumer, reused, however many tails came and went
    assert left == 0  # deleted on close, not left to lapse


async def test_an_unused_consumer_is_deleted_after_the_linger(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_jetstream_watch, "WATCH_LINGER", 0.05)
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            await store.append("s", _created("s"), 0)
            await _tail_once(store, "s")
            left = await _consumers_after(nats_server.url, stream, 20.0)
            # The next tail makes a new one and works as before.
            await store.append("s", [RunStarted(session_id="s", seq=3, ts=1.0, run_id="r2")], 2)
            again = [event.seq async for event in _first(store.tail("s", 2))]
        finally:
            await store.close()
    assert left == 0
    assert again == [3]


async def _first(events: object) -> object:
    async for event in events:  # type: ignore[attr-defined]
        yield event
        break


async def test_a_tail_cancelled_while_its_consumer_is_made_leaves_none(
    nats_server: NatsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that ends while its watcher's tail is still subscribing cancels that tail
    in the middle of making the store's consumer: the consumer the server made is still
    the store's, deleted after the linger, not left to lapse (found by ``bench/run.py
    nats``: 4-30 consumers left once runs got faster)."""
    monkeypatch.setattr(_jetstream_watch, "WATCH_LINGER", 0.05)
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        try:
            await store.append("s", _created("s"), 0)
            made = anyio.Event()
            subscribe = store._access.js.subscribe

            async def slow_subscribe(*args: object, **kwargs: object) -> object:
                subscription = await subscribe(*args, **kwargs)  # type: ignore[arg-type]
                made.set()
                await anyio.sleep(0.5)  # the answer is still on its way when the tail is cut
                return subscription

            monkeypatch.setattr(store._access.js, "subscribe", slow_subscribe)
            async with anyio.create_task_group() as tg:
                tg.start_soon(_tail_once, store, "s")
                await made.wait()
                assert await _consumers(nats_server.url, stream) == 1
                tg.cancel_scope.cancel()
            # Well within the server's inactivity threshold (5 s): deleted, not lapsed.
            left = await _consumers_after(nats_server.url, stream, 2.0)
            assert store._watch._refs == 0
        finally:
            await store.close()
    assert left == 0
