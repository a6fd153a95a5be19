"""``SessionCatalog``: every session newest first, filtered, paged by an opaque keyset cursor."""

from __future__ import annotations

import pytest
from wrapped_store import WrappedStore

from helix_agents.errors import UsageError
from helix_agents.events import Completed, Event, Failed, RunStarted, SessionCreated
from helix_agents.log.session_list import SessionCatalog, SessionListPage
from helix_agents.messages import UserMessage
from helix_agents.stores import MemoryEventStore


def created(
    session_id: str, ts: float, agent: str = "researcher", parent: str | None = None
) -> list[Event]:
    return [
        SessionCreated(
            session_id=session_id,
            seq=1,
            ts=ts,
            agent_type=agent,
            run_id="run-1",
            messages=[UserMessage(content="hi")],
            parent_session_id=parent,
            root_session_id=parent or session_id,
        ),
        RunStarted(session_id=session_id, seq=2, ts=ts, run_id="run-1"),
    ]


async def add(store: MemoryEventStore, session_id: str, ts: float, **options: str) -> None:
    await store.append(session_id, created(session_id, ts, **options), expected_seq=0)


async def end(store: MemoryEventStore, session_id: str, event: Event) -> None:
    await store.append(session_id, [event], expected_seq=2)


def ids(page: SessionListPage) -> list[str]:
    return [summary.session_id for summary in page.sessions]


async def test_sessions_come_newest_first_with_their_summary() -> None:
    store = MemoryEventStore()
    await add(store, "b-old", 100.0)
    await add(store, "a-new", 300.0, agent="writer")
    await add(store, "c-mid", 200.0)
    await end(store, "c-mid", Completed(session_id="c-mid", seq=3, ts=250.0, output={"x": 1}))
    page = await SessionCatalog(store).page()
    assert ids(page) == ["a-new", "c-mid", "b-old"]
    assert page.next_cursor is None
    mid = page.sessions[1]
    assert (mid.agent_type, mid.status, mid.created_ts, mid.updated_ts) == (
        "researcher",
        "completed",
        200.0,
        250.0,
    )
    assert (mid.latest_sequence, mid.parent_session_id, mid.root_session_id) == (3, None, "c-mid")


async def test_equal_timestamps_are_ordered_by_id_descending() -> None:
    store = MemoryEventStore()
    for name in ("s1", "s3", "s2"):
        await add(store, name, 100.0)
    assert ids(await SessionCatalog(store).page()) == ["s3", "s2", "s1"]


async def test_filters_by_status_agent_and_top_level() -> None:
    store = MemoryEventStore()
    await add(store, "p", 1.0, agent="lead")
    await add(store, "p-sub-c1", 2.0, agent="researcher", parent="p")
    await add(store, "q", 3.0, agent="researcher")
    await end(store, "q", Failed(session_id="q", seq=3, ts=4.0, error="boom"))
    catalog = SessionCatalog(store)
    assert ids(await catalog.page(status="failed")) == ["q"]
    assert (await catalog.page(status="failed")).sessions[0].error == "boom"
    assert ids(await catalog.page(status="running")) == ["p-sub-c1", "p"]
    assert ids(await catalog.page(agent_type="researcher")) == ["q", "p-sub-c1"]
    assert ids(await catalog.page(top_level=True)) == ["q", "p"]
    assert ids(await catalog.page(agent_type="researcher", top_level=True)) == ["q"]
    assert ids(await catalog.page(agent_type="nobody")) == []


async def test_pages_follow_the_cursor_and_new_sessions_do_not_shift_them() -> None:
    store = MemoryEventStore()
    for n in range(7):
        await add(store, f"s{n}", float(n))
    catalog = SessionCatalog(store)
    first = await catalog.page(limit=3)
    assert ids(first) == ["s6", "s5", "s4"]
    assert first.next_cursor is not None
    await add(store, "s-newer", 100.0)  # created between two requests: it goes on page one
    second = await catalog.page(limit=3, cursor=first.next_cursor)
    assert ids(second) == ["s3", "s2", "s1"]
    assert second.next_cursor is not None
    last = await catalog.page(limit=3, cursor=second.next_cursor)
    assert ids(last) == ["s0"]
    assert last.next_cursor is None
    assert ids(await catalog.page(limit=1)) == ["s-newer"]


async def test_a_session_that_moved_is_summarised_again_and_a_deleted_one_leaves() -> None:
    store = MemoryEventStore()
    await add(store, "s1", 1.0)
    await add(store, "s2", 2.0)
    catalog = SessionCatalog(store)
    assert [s.status for s in (await catalog.page()).sessions] == ["running", "running"]
    await end(store, "s1", Completed(session_id="s1", seq=3, ts=5.0, output="done"))
    await store.delete("s2")
    page = await catalog.page()
    assert [(s.session_id, s.status, s.latest_sequence) for s in page.sessions] == [
        ("s1", "completed", 3)
    ]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"status": "done"}, "unknown status 'done'"),
        ({"limit": 0}, "limit must be 1 to 500"),
        ({"limit": 501}, "limit must be 1 to 500"),
        ({"cursor": "not-a-cursor"}, "invalid cursor"),
        ({"cursor": "W10"}, "invalid cursor"),  # valid base64 of "[]"
    ],
)
async def test_bad_parameters_are_usage_errors(options: dict[str, object], message: str) -> None:
    store = MemoryEventStore()
    await add(store, "s1", 1.0)
    with pytest.raises(UsageError, match=message):
        await SessionCatalog(store).page(**options)  # type: ignore[arg-type]


async def test_a_log_that_does_not_fold_is_left_out_and_the_others_listed() -> None:
    store = MemoryEventStore()
    await add(store, "good", 1.0)
    headless = Completed(session_id="headless", seq=1, ts=2.0, output=None)
    await store.append("headless", [headless], expected_seq=0)
    assert ids(await SessionCatalog(store).page()) == ["good"]


async def test_a_page_over_sessions_at_rest_reads_no_log() -> None:
    class Counted(WrappedStore):
        reads = 0

        async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
            Counted.reads += 1
            return await self.inner.read(session_id, from_seq)

    inner = MemoryEventStore()
    for n in range(20):
        await add(inner, f"s-{n:02d}", float(n))
    catalog = SessionCatalog(Counted(inner))
    await catalog.page()
    assert Counted.reads == 20  # each folded once
    await catalog.page(status="running")
    assert Counted.reads == 20  # nothing moved: no log read
    await end(inner, "s-07", Completed(session_id="s-07", seq=3, ts=30.0, output=None))
    page = await catalog.page(status="completed")
    assert ids(page) == ["s-07"]
    assert Counted.reads == 21  # only the one that moved
