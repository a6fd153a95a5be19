"""JetStream specifics beyond the conformance suite: URLs, several store objects on
one stream, tails woken by other processes' appends, lost acknowledgements, and
how many gets ``read`` needs to find ``from_seq``.

Each test uses its own stream on the session's nats-server.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import nats
import nats.errors
import pytest
from nats_server import NatsServer
from servers import closed_port
from store_conformance import (
    SID,
    TIMEOUT,
    assert_gap_free,
    collect_tail,
    create,
    delta,
    make_events,
    race_round,
)

from helix_agents.errors import ConcurrencyConflict, StoreError, UsageError
from helix_agents.events import Event
from helix_agents.stores import JetStreamEventStore, open_store

pytestmark = pytest.mark.nats


@pytest.fixture
def stream() -> str:
    return f"JS{uuid.uuid4().hex[:16]}"


@pytest.fixture
async def store(nats_server: NatsServer, stream: str) -> AsyncIterator[JetStreamEventStore]:
    async with await JetStreamEventStore.connect(nats_server.url, stream=stream) as opened:
        yield opened


# --- open_store -------------------------------------------------------------------------


async def test_open_store_nats_url(nats_server: NatsServer, stream: str) -> None:
    store = await open_store(f"{nats_server.url}?stream={stream}&replicas=1")
    try:
        assert isinstance(store, JetStreamEventStore)
        assert store.stream == stream
        await create(store, SID, 3)
    finally:
        await store.close()
    async with await JetStreamEventStore.connect(nats_server.url, stream=stream) as again:
        assert await again.read(SID) == make_events(SID, 1, 3)


async def test_open_store_takes_several_comma_separated_servers(
    nats_server: NatsServer, stream: str
) -> None:
    # The first server is down: the client connects to another one of the list.
    dead = f"nats://127.0.0.1:{closed_port()}"
    store = await open_store(f"{dead},{nats_server.url}?stream={stream}&replicas=1")
    try:
        assert isinstance(store, JetStreamEventStore)
        await create(store, SID, 2)
    finally:
        await store.close()
    async with await JetStreamEventStore.connect(
        f"{nats_server.url}, {dead}", stream=stream
    ) as again:
        assert await again.read(SID) == make_events(SID, 1, 2)


@pytest.mark.parametrize(
    "url", ["nats://127.0.0.1:4222,", "nats://127.0.0.1:4222,,nats://127.0.0.1:4223"]
)
async def test_open_store_rejects_a_blank_server_in_the_list(url: str) -> None:
    with pytest.raises(UsageError):
        await open_store(url)


async def test_open_store_rejects_a_listed_server_that_is_not_a_nats_url() -> None:
    with pytest.raises(UsageError):
        await open_store("nats://127.0.0.1:4222,http://127.0.0.1:4223")


@pytest.mark.parametrize(
    "query",
    ["?stream=a.b", "?stream=", "?replicas=0", "?replicas=x", "?replicas=9", "?color=blue"],
)
async def test_open_store_rejects_bad_nats_urls(nats_server: NatsServer, query: str) -> None:
    with pytest.raises(UsageError):
        await open_store(f"{nats_server.url}{query}")


async def test_open_store_rejects_a_nats_url_with_a_path() -> None:
    with pytest.raises(UsageError):
        await open_store("nats://127.0.0.1:4222/events")


async def test_an_unreachable_server_is_a_store_error() -> None:
    with anyio.fail_after(TIMEOUT), pytest.raises(StoreError, match="cannot connect"):
        await JetStreamEventStore.connect(f"nats://127.0.0.1:{closed_port()}", request_timeout=0.5)


async def test_a_stream_capturing_other_subjects_is_refused(
    nats_server: NatsServer, stream: str
) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        await nc.jetstream().add_stream(name=stream, subjects=[f"elsewhere.{stream}"])
    finally:
        await nc.close()
    with pytest.raises(StoreError, match="does not capture"):
        await JetStreamEventStore.connect(nats_server.url, stream=stream)


# --- several store objects on one stream ------------------------------------------------


async def test_two_stores_on_one_stream_enforce_compare_and_append(
    nats_server: NatsServer, stream: str
) -> None:
    async with (
        await JetStreamEventStore.connect(nats_server.url, stream=stream) as a,
        await JetStreamEventStore.connect(nats_server.url, stream=stream) as b,
    ):
        # b caches where the log ends by appending itself, then a moves the log on.
        await b.append(SID, make_events(SID, 1), 0)
        await a.append(SID, make_events(SID, 2, label="a"), 1)
        with pytest.raises(ConcurrencyConflict) as caught:
            await b.append(SID, make_events(SID, 2, label="b"), 1)
        assert (caught.value.expected_seq, caught.value.actual_seq) == (1, 2)
        with pytest.raises(ConcurrencyConflict):
            await a.append(SID, make_events(SID, 1), 0)

        # Both race for each next seq: exactly one wins each time (their
        # Nats-Msg-Ids differ, so the loser is refused, not "deduplicated").
        winners = [await race_round([(a, "a"), (b, "b")], expected) for expected in range(2, 12)]

        log_a, log_b = await a.read(SID), await b.read(SID)
        assert log_a == log_b
        assert_gap_free(log_a, SID)
        assert log_a[2:] == [delta(SID, seq, name) for seq, name in enumerate(winners, start=3)]


async def test_a_session_deleted_and_rebuilt_by_another_store_is_appended_to_right(
    nats_server: NatsServer, stream: str
) -> None:
    async with (
        await JetStreamEventStore.connect(nats_server.url, stream=stream) as a,
        await JetStreamEventStore.connect(nats_server.url, stream=stream) as b,
    ):
        await create(a, SID, 2)  # a caches (stream seq, 2)
        assert await b.delete(SID) is True
        await create(b, SID, 2)  # same helix length, a later stream seq
        # a's cached stream seq is stale although the helix seq matches: refused,
        # re-derived, and appended at the right place.
        assert await a.append(SID, make_events(SID, 3), 2) == 3
        assert await b.read(SID) == make_events(SID, 1, 3)


async def test_a_tail_is_woken_by_another_stores_appends_without_polling(
    nats_server: NatsServer, stream: str
) -> None:
    async with (
        await JetStreamEventStore.connect(nats_server.url, stream=stream) as writer,
        await JetStreamEventStore.connect(
            nats_server.url, stream=stream, poll_interval=None
        ) as reader,
    ):
        await create(writer, SID, 2)
        seen: list[Event] = []
        caught_up = anyio.Event()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect_tail, reader, SID, 0, 6, 2, caught_up, seen)
                await caught_up.wait()
                await writer.append(SID, make_events(SID, 3, 3), 2)
                await writer.append(SID, make_events(SID, 6), 5)
        assert seen == make_events(SID, 1, 6)


async def test_a_tail_sees_appends_through_its_store_and_another_in_order(
    nats_server: NatsServer, stream: str
) -> None:
    async with (
        await JetStreamEventStore.connect(nats_server.url, stream=stream, poll_interval=None) as a,
        await JetStreamEventStore.connect(nats_server.url, stream=stream) as b,
    ):
        await create(a, SID)
        total = 41
        seen: list[Event] = []
        caught_up = anyio.Event()
        with anyio.fail_after(TIMEOUT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(collect_tail, a, SID, 0, total, 1, caught_up, seen)
                await caught_up.wait()
                last = 1
                for index in range(total - 1):
                    writer = b if index % 3 == 0 else a  # b's appends leave gaps in a's feed
                    last = await writer.append(SID, make_events(SID, last + 1), last)
                    if index % 5 == 0:
                        await anyio.wait_all_tasks_blocked()
        assert seen == make_events(SID, 1, total)


# --- lost acknowledgements --------------------------------------------------------------


async def test_a_publish_whose_ack_was_lost_is_resent_and_stored_once(
    store: JetStreamEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create(store, SID, 2)
    real_publish = store._inbox.publish  # the store's publish to JetStream, and its ack
    calls: list[dict[str, str]] = []

    async def publish_then_lose_the_ack(subject: str, payload: bytes, headers: Any) -> Any:
        calls.append(headers)
        ack = await real_publish(subject, payload, headers)
        if len(calls) == 1:
            raise nats.errors.TimeoutError  # it landed, but we never hear of it
        return ack

    monkeypatch.setattr(store._inbox, "publish", publish_then_lose_the_ack)
    assert await store.append(SID, make_events(SID, 3, 2), 2) == 4

    assert len(calls) == 2
    assert calls[0]["Nats-Msg-Id"] == calls[1]["Nats-Msg-Id"]
    assert await store.read(SID) == make_events(SID, 1, 4)
    monkeypatch.undo()
    assert await store.append(SID, make_events(SID, 5), 4) == 5


async def test_an_append_never_acknowledged_fails_with_an_unknown_outcome(
    store: JetStreamEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    await create(store, SID, 2)

    async def no_answer(*args: Any, **kwargs: Any) -> Any:
        raise nats.errors.TimeoutError

    monkeypatch.setattr(store._inbox, "publish", no_answer)
    with pytest.raises(StoreError, match="no acknowledgement"):
        await store.append(SID, make_events(SID, 3), 2)
    monkeypatch.undo()
    assert await store.read(SID) == make_events(SID, 1, 2)


async def test_a_batch_over_the_max_payload_is_stored_across_messages(
    store: JetStreamEventStore,
) -> None:
    """Issue 25.10: a batch over the NATS message limit was a StoreError that failed the run."""
    await create(store, SID, 2)
    huge = [delta(SID, seq, "x" * 200_000) for seq in range(3, 9)]  # ~1.2 MB: over 1 MiB
    assert await store.append(SID, huge, 2) == 8
    assert await store.read(SID) == [*make_events(SID, 1, 2), *huge]
    assert await store.read(SID, 5) == huge[3:]
    assert await store.append(SID, make_events(SID, 9), 8) == 9  # the log goes on from there
    with pytest.raises(ConcurrencyConflict):
        await store.append(SID, huge, 2)  # stale: its first message is refused, nothing written
    assert len(await store.read(SID)) == 9


async def test_an_event_alone_over_the_max_payload_is_a_store_error_and_writes_nothing(
    store: JetStreamEventStore,
) -> None:
    await create(store, SID, 2)
    small = delta(SID, 3, "small")
    whole = delta(SID, 4, "x" * 1_100_000)  # one event over 1 MiB
    with pytest.raises(StoreError, match="over the NATS message limit"):
        await store.append(SID, [small, whole], 2)
    assert await store.read(SID) == make_events(SID, 1, 2)
    assert await store.append(SID, make_events(SID, 3), 2) == 3


# --- finding from_seq -------------------------------------------------------------------


async def test_read_from_the_middle_of_a_long_interleaved_log_needs_few_gets(
    store: JetStreamEventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    batches = 200
    last = {SID: 0, "noise": 0}
    for _ in range(batches):
        for session_id in (SID, "noise"):
            size = 2
            last[session_id] = await store.append(
                session_id, make_events(session_id, last[session_id] + 1, size), last[session_id]
            )
    total = last[SID]
    real_get = store._access.jsm.get_msg
    gets: list[int] = []

    async def counting_get(*args: Any, **kwargs: Any) -> Any:
        gets.append(1)
        return await real_get(*args, **kwargs)

    monkeypatch.setattr(store._access.jsm, "get_msg", counting_get)
    for from_seq in (1, 150, 301, total - 3, total - 1):
        gets.clear()
        events = await store.read(SID, from_seq)
        assert events == make_events(SID, from_seq + 1, total - from_seq)
        messages = (total - from_seq + 1) // 2 + 1
        # The last message, ~log2(800) search gets, then one get per message read.
        assert len(gets) <= 1 + 12 + messages, (from_seq, len(gets))
