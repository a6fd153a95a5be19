"""Session search on every store: text, metadata and time filters, paged, the same everywhere.

Each test runs on the memory store, SQLite, JetStream (a real nats-server)
and ``scan``: a store without a ``SessionIndex`` (a ``WrappedStore``), which
``SessionCatalog`` serves by folding every log. The backends' own index
specifics (SQLite's migration, JetStream's KV bucket shared by two stores)
follow the shared tests.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer
from wrapped_store import WrappedStore

from helix_agents import EventStore
from helix_agents.errors import ConcurrencyConflict, StoreError, UsageError
from helix_agents.events import (
    Completed,
    Event,
    MessageAppended,
    RunStarted,
    SessionCreated,
    TextDelta,
)
from helix_agents.log.search import SessionIndex, SessionQuery
from helix_agents.log.session_list import SessionCatalog, SessionListPage
from helix_agents.messages import AssistantMessage, UserMessage
from helix_agents.stores import JetStreamEventStore, MemoryEventStore, SqliteEventStore

T0 = 1_700_000_000.0
TIMEOUT = 30


@pytest.fixture(params=["memory", "sqlite", pytest.param("nats", marks=pytest.mark.nats), "scan"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def store(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    opened: EventStore
    if backend == "memory":
        opened = MemoryEventStore()
    elif backend == "sqlite":
        opened = SqliteEventStore(tmp_path / "events.db")
    elif backend == "nats":
        server: NatsServer = request.getfixturevalue("nats_server")
        opened = await JetStreamEventStore.connect(server.url, stream=fresh_stream_name())
    else:
        opened = WrappedStore(MemoryEventStore())
    try:
        yield opened
    finally:
        await opened.close()


def session(
    session_id: str,
    ts: float,
    *,
    said: str = "hello",
    answered: str | None = None,
    output: Any = None,
    metadata: dict[str, str] | None = None,
    agent: str = "researcher",
    parent: str | None = None,
    delta: str | None = None,
) -> list[Event]:
    """A session's events: created with ``said``, then its answer, a chunk, its output."""
    events: list[Event] = [
        SessionCreated(
            session_id=session_id,
            seq=1,
            ts=ts,
            agent_type=agent,
            run_id="r1",
            messages=[UserMessage(content=said)],
            metadata=metadata or {},
            parent_session_id=parent,
            root_session_id=parent or session_id,
        ),
        RunStarted(session_id=session_id, seq=2, ts=ts, run_id="r1"),
    ]
    if delta is not None:
        events.append(
            TextDelta(
                session_id=session_id,
                seq=len(events) + 1,
                ts=ts + 1,
                agent_id=session_id,
                agent_type=agent,
                delta=delta,
            )
        )
    if answered is not None:
        events.append(
            MessageAppended(
                session_id=session_id,
                seq=len(events) + 1,
                ts=ts + 2,
                message=AssistantMessage(content=answered),
            )
        )
    if output is not None:
        events.append(
            Completed(session_id=session_id, seq=len(events) + 1, ts=ts + 3, output=output)
        )
    return events


async def put(store: EventStore, events: list[Event]) -> None:
    await store.append(events[0].session_id, events, expected_seq=0)


def ids(page: SessionListPage) -> list[str]:
    return [entry.session_id for entry in page.sessions]


async def found(store: EventStore, **query: Any) -> list[str]:
    status = query.pop("status", None)
    page = await SessionCatalog(store).page(
        query=SessionQuery.build(**query), status=status, limit=500
    )
    return ids(page)


async def test_the_index_is_used_where_the_store_has_one(store: Any, backend: str) -> None:
    assert isinstance(store, SessionIndex) == (backend != "scan")


async def test_text_search_finds_user_and_assistant_messages_and_output(store: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        await put(store, session("s-user", T0, said="Please deploy the Staging cluster"))
        await put(store, session("s-answer", T0 + 10, answered="The migration finished."))
        await put(store, session("s-output", T0 + 20, output={"report": "quarterly revenue"}))
        await put(store, session("s-chunk", T0 + 30, delta="deploy-only-in-a-chunk"))
        await put(store, session("s-text-out", T0 + 40, output="Staging is green"))
        assert await found(store, text="staging") == ["s-text-out", "s-user"]
        assert await found(store, text="MIGRATION") == ["s-answer"]
        assert await found(store, text="revenue") == ["s-output"]
        # Every word must begin some word of the session, in any order.
        assert await found(store, text="clus deploy") == ["s-user"]
        assert await found(store, text="deploy green") == []
        # Streamed chunks are not searched: the assistant's message holds the text.
        assert await found(store, text="chunk") == []
        assert await found(store, text="hel") == ["s-text-out", "s-chunk", "s-output", "s-answer"]


async def test_later_messages_are_found_and_deleted_sessions_are_not(store: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        await put(store, session("s-1", T0))
        await put(store, session("s-2", T0 + 1))
        assert await found(store, text="zebra") == []
        await store.append(
            "s-1",
            [
                MessageAppended(
                    session_id="s-1", seq=3, ts=T0 + 5, message=UserMessage(content="a zebra")
                )
            ],
            expected_seq=2,
        )
        assert await found(store, text="zebra") == ["s-1"]
        assert await store.delete("s-1")
        assert await found(store, text="zebra") == []
        assert await found(store, text="hello") == ["s-2"]


async def test_metadata_filters_must_all_match(store: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        await put(store, session("s-a", T0, metadata={"team": "red", "env": "prod"}))
        await put(store, session("s-b", T0 + 1, metadata={"team": "red", "env": "dev"}))
        await put(store, session("s-c", T0 + 2, metadata={"team": "blue"}))
        assert await found(store, metadata=[("team", "red")]) == ["s-b", "s-a"]
        assert await found(store, metadata=[("team", "red"), ("env", "prod")]) == ["s-a"]
        assert await found(store, metadata=[("env", "staging")]) == []
        assert await found(store, metadata=[("owner", "red")]) == []
        assert await found(store, metadata=[("team", "blue")], text="hello") == ["s-c"]


async def test_time_ranges_after_inclusive_before_exclusive(store: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        for n in range(4):
            # created at T0 + 100 n; the last event 3 s later (its output)
            await put(store, session(f"s-{n}", T0 + 100 * n, output="done"))
        assert await found(store, created_after=T0 + 100) == ["s-3", "s-2", "s-1"]
        assert await found(store, created_before=T0 + 100) == ["s-0"]
        assert await found(store, created_after=T0 + 100, created_before=T0 + 300) == [
            "s-2",
            "s-1",
        ]
        assert await found(store, updated_after=T0 + 203) == ["s-3", "s-2"]
        assert await found(store, updated_before=T0 + 103) == ["s-0"]
        assert await found(store, updated_after=T0 + 104, updated_before=T0 + 203.5) == ["s-2"]
        # An empty range is no error: it lists nothing.
        assert await found(store, created_after=T0 + 100, created_before=T0 + 100) == []


async def test_agent_top_level_and_status_combine_with_search(store: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        await put(store, session("s-top", T0, said="alpha", output="x"))
        await put(store, session("s-child", T0 + 1, said="alpha", parent="s-top"))
        await put(store, session("s-other", T0 + 2, said="alpha", agent="writer"))
        assert await found(store, text="alpha", top_level=True) == ["s-other", "s-top"]
        assert await found(store, text="alpha", agent_type="researcher") == ["s-child", "s-top"]
        assert await found(store, text="alpha", status="completed") == ["s-top"]
        assert await found(store, text="alpha", status="running") == ["s-other", "s-child"]


async def test_pages_of_a_search_follow_the_cursor(store: Any) -> None:
    with anyio.fail_after(TIMEOUT):
        expected = []
        for n in range(16):
            said = "needle" if n % 2 else "hay"
            # Completed sessions among the matches, so the status filter drops some.
            output = "ok" if n % 4 == 1 else None
            await put(store, session(f"s-{n:02d}", T0 + n, said=said, output=output))
            if n % 2 and output is None:
                expected.append(f"s-{n:02d}")
        expected.reverse()
        catalog = SessionCatalog(store)
        query = SessionQuery.build(text="needle")
        seen: list[str] = []
        cursor = None
        pages = 0
        while True:
            page = await catalog.page(query=query, status="running", limit=1, cursor=cursor)
            seen += ids(page)
            pages += 1
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == expected
        assert pages == len(expected)
        # A session created after the first page went out does not shift the next pages.
        first = await catalog.page(query=query, limit=2)
        await put(store, session("s-99", T0 + 99, said="needle"))
        second = await catalog.page(query=query, limit=2, cursor=first.next_cursor)
        assert ids(first) == ["s-15", "s-13"]
        assert ids(second) == ["s-11", "s-09"]


async def test_a_reopened_store_still_searches(backend: str, store: Any, tmp_path: Path) -> None:
    if backend in ("memory", "scan"):
        pytest.skip("a memory store keeps nothing once closed")
    with anyio.fail_after(TIMEOUT):
        await put(store, session("s-1", T0, said="persistent words", metadata={"k": "v"}))
        again: Any
        if backend == "sqlite":
            again = SqliteEventStore(tmp_path / "events.db")
        else:
            again = await JetStreamEventStore.connect(
                store.connection.connected_url.geturl(), stream=store.stream
            )
        try:
            assert await found(again, text="persistent", metadata=[("k", "v")]) == ["s-1"]
        finally:
            await again.close()


async def test_a_sqlite_file_from_before_the_index_is_indexed_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with anyio.fail_after(TIMEOUT):
        async with SqliteEventStore(path) as store:
            await put(store, session("s-old", T0, said="legacy text", metadata={"a": "b"}))
            await put(store, session("s-new", T0 + 1, said="other"))
        # Make it a file as an older version wrote it: no index tables, no mark.
        conn = sqlite3.connect(path)
        conn.executescript(
            "DROP TABLE helix_session_index; DROP TABLE helix_session_metadata;"
            "DROP TABLE helix_session_text; DELETE FROM helix_meta WHERE key = 'session_index';"
        )
        conn.close()
        async with SqliteEventStore(path) as store:
            assert await found(store, text="legacy") == ["s-old"]
            assert await found(store, metadata=[("a", "b")]) == ["s-old"]
            assert await found(store) == ["s-new", "s-old"]


async def test_a_read_only_sqlite_store_searches_with_or_without_an_index(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    with anyio.fail_after(TIMEOUT):
        async with SqliteEventStore(path) as store:
            await put(store, session("s-1", T0, said="indexed words", metadata={"a": "b"}))
        query = SessionQuery.build(text="indexed")
        async with SqliteEventStore(path, read_only=True) as reader:
            hits = await reader.search_sessions(query, before=None, limit=5)
            assert [hit.session_id for hit in hits or []] == ["s-1"]
        # A file no indexing store ever opened: read-only cannot index it, so the list folds.
        conn = sqlite3.connect(path)
        conn.execute("DELETE FROM helix_meta WHERE key = 'session_index'")
        conn.commit()
        conn.close()
        async with SqliteEventStore(path, read_only=True) as reader:
            assert await reader.search_sessions(query, before=None, limit=5) is None
            assert await found(reader, text="indexed", metadata=[("a", "b")]) == ["s-1"]
            assert await found(reader, text="other") == []


async def test_sqlite_index_rows_commit_with_the_events(tmp_path: Path) -> None:
    """The index changes in the events' transaction: an append that fails indexes nothing."""
    path = tmp_path / "events.db"
    with anyio.fail_after(TIMEOUT):
        async with SqliteEventStore(path) as store:
            await put(store, session("s-1", T0, said="first"))
            # The events' INSERT fails (after the index rows were written): all rolls back.
            conn = sqlite3.connect(path)
            conn.execute(
                "CREATE TRIGGER refuse BEFORE INSERT ON helix_events WHEN NEW.seq = 3 "
                "BEGIN SELECT RAISE(FAIL, 'refused by a test'); END"
            )
            conn.close()
            late = MessageAppended(
                session_id="s-1", seq=3, ts=T0 + 9, message=UserMessage(content="refused words")
            )
            with pytest.raises(StoreError, match="refused by a test"):
                await store.append("s-1", [late], expected_seq=2)
            assert await found(store, text="refused") == []
            conflicting = MessageAppended(
                session_id="s-1", seq=6, ts=T0 + 9, message=UserMessage(content="refused")
            )
            with pytest.raises(ConcurrencyConflict):
                await store.append("s-1", [conflicting], expected_seq=5)
            assert await found(store, text="first") == ["s-1"]
        conn = sqlite3.connect(path)
        texts = conn.execute("SELECT body FROM helix_session_text").fetchall()
        conn.close()
        assert texts == [("first",)]


@pytest.mark.nats
async def test_jetstream_index_is_a_kv_bucket_another_store_reads(nats_server: NatsServer) -> None:
    stream = fresh_stream_name()
    with anyio.fail_after(TIMEOUT):
        async with (
            await JetStreamEventStore.connect(nats_server.url, stream=stream) as writer,
            await JetStreamEventStore.connect(nats_server.url, stream=stream) as reader,
        ):
            await put(writer, session("s:1", T0, said="shared index", metadata={"x": "y"}))
            assert await found(writer, text="shared") == ["s:1"]
            kv = await writer.connection.jetstream().key_value(f"HELIX_INDEX_{stream}")
            entry = await kv.get("s=1")
            doc = msgspec.json.decode(entry.value or b"{}")
            assert (doc["last_seq"], doc["metadata"]) == (2, {"x": "y"})
            assert {"shared", "index"} <= set(doc["words"])
            # The other store finds it from the bucket, without reading the log.
            reads: list[str] = []
            original = reader.read

            async def counting_read(session_id: str, from_seq: int = 0) -> list[Event]:
                reads.append(session_id)
                return await original(session_id, from_seq)

            reader.read = counting_read  # type: ignore[method-assign]
            index = await reader.search_sessions(
                SessionQuery.build(text="shared", metadata=[("x", "y")]), before=None, limit=5
            )
            assert [hit.session_id for hit in index] == ["s:1"]
            assert reads == []


def test_query_words_are_distinct_and_a_query_without_words_is_no_search() -> None:
    assert SessionQuery.build(text="Rot rotate, ROTATE keys!").terms == ("keys", "rotate")
    assert SessionQuery.build(text="?! -- *").terms == ()
    many = " ".join(f"w{n:02d}" for n in range(40))
    assert len(SessionQuery.build(text=many).terms) == 40


def test_query_bounds_are_usage_errors() -> None:
    for options, message in [
        ({"text": "x" * 257}, "at most 256"),
        ({"metadata": [(f"k{n}", "v") for n in range(9)]}, "at most 8 metadata"),
        ({"metadata": [("", "v")]}, "metadata key"),
        ({"metadata": [("k", "v" * 513)]}, "metadata value"),
        ({"metadata": [("k", "a"), ("k", "b")]}, "twice"),
        ({"updated_after": float("nan")}, "finite"),
    ]:
        with pytest.raises(UsageError, match=message):
            SessionQuery.build(**options)
