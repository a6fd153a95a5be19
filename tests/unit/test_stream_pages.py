"""A session's stream read in pages says what the log read whole says, whatever the page size.

The stream (``open_session_stream``, ``stream_session``) reads the log a page
at a time; its items must be those of the whole log (``final_event``'s end,
the chunks up to it after ``fromSequence``), with pages of one event as with
pages holding the whole log, on a log with several runs, a state update,
chunks after a run's end (streamed only when a run follows) and each end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from helix_agents.events import (
    Aborted,
    Completed,
    Event,
    Failed,
    Interrupted,
    RunStarted,
    SessionCreated,
    StateUpdated,
    TextDelta,
)
from helix_agents.log import streaming
from helix_agents.log.streaming import (
    EndedStream,
    final_event,
    open_session_stream,
    stream_session,
)
from helix_agents.protocol import ChunkEvent, TransportEvent
from helix_agents.stores import MemoryEventStore

SID = "paged"


def _log(ending: Event) -> list[Event]:
    seq = iter(range(1, 100))

    def delta(text: str) -> TextDelta:
        return TextDelta(
            session_id=SID, seq=next(seq), ts=0.0, agent_id=SID, agent_type="w", delta=text
        )

    events: list[Event] = [
        SessionCreated(
            session_id=SID, seq=next(seq), ts=0.0, agent_type="w", run_id="r1", initial_state={}
        ),
        RunStarted(session_id=SID, seq=next(seq), ts=0.0, run_id="r1"),
        delta("a" * 50),
        StateUpdated(session_id=SID, seq=next(seq), ts=0.0, state={"n": 1}),
        delta("b"),
        Completed(session_id=SID, seq=next(seq), ts=0.0, output="first"),
        delta("after the end, before a run"),
        RunStarted(session_id=SID, seq=next(seq), ts=0.0, run_id="r2", mode="continue"),
        delta("c" * 300),
        StateUpdated(session_id=SID, seq=next(seq), ts=0.0, state={"n": 2}),
        delta("d"),
    ]
    ending = ending.__class__(**{**_fields(ending), "seq": next(seq)})
    events.append(ending)
    events.append(delta("after the last end"))
    return events


def _fields(event: Event) -> dict[str, object]:
    return {name: getattr(event, name) for name in event.__struct_fields__}


ENDINGS = [
    Completed(session_id=SID, seq=0, ts=0.0, output={"x": 1}),
    Failed(session_id=SID, seq=0, ts=0.0, error="model down", recoverable=True),
    Failed(session_id=SID, seq=0, ts=0.0, error="", recoverable=False),
    Aborted(session_id=SID, seq=0, ts=0.0, reason="stop"),
    Aborted(session_id=SID, seq=0, ts=0.0),
    Interrupted(session_id=SID, seq=0, ts=0.0, reason="pause"),
]


def _expected(log: list[Event], from_sequence: int) -> list[TransportEvent]:
    """What the whole log says: the chunks up to its last run's end after ``from_sequence``."""
    final = final_event(log)
    assert final is not None
    items: list[TransportEvent] = []
    for event in log:
        if from_sequence < event.seq <= final[0] and isinstance(event, TextDelta):
            items.append(ChunkEvent(chunk=event, sequence=event.seq))
    return [*items, final[1]]


async def _all(events: AsyncIterator[TransportEvent]) -> list[TransportEvent]:
    with anyio.fail_after(10):
        return [event async for event in events]


@pytest.mark.parametrize("page_bytes", [1, 120, 10**9])
@pytest.mark.parametrize("ending", ENDINGS, ids=lambda event: type(event).__name__)
async def test_a_paged_ended_stream_says_what_the_whole_log_says(
    page_bytes: int, ending: Event, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming, "PAGE_BYTES", page_bytes)
    log = _log(ending)
    store = MemoryEventStore()
    await store.append(SID, log, 0)
    for from_sequence in range(len(log) + 2):
        expected = _expected(log, from_sequence)
        opened = await open_session_stream(store, SID, from_sequence)
        # Only a log that fits in one page comes whole, at once.
        assert isinstance(opened, EndedStream) == (page_bytes == 10**9)
        assert await _all(opened) == expected, from_sequence
        assert await _all(stream_session(store, SID, from_sequence)) == expected


@pytest.mark.parametrize("page_bytes", [1, 10**9])
async def test_a_paged_live_stream_goes_on_from_its_last_page(
    page_bytes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(streaming, "PAGE_BYTES", page_bytes)
    log = _log(ENDINGS[0])
    store = MemoryEventStore()
    live = log[:-2]  # the second run still going
    await store.append(SID, live, 0)
    seen: list[TransportEvent] = []

    async def collect() -> None:
        seen.extend(await _all(await open_session_stream(store, SID, 2)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect)
        await anyio.wait_all_tasks_blocked()
        await store.append(SID, log[-2:], len(live))
    assert seen == _expected(log, 2)
