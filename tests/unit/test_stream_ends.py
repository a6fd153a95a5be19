"""A live stream's last item, folded from what the tail delivered, and a newer run after an end."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio

from helix_agents.events import (
    Completed,
    Event,
    Failed,
    Interrupted,
    RunStarted,
    SessionCreated,
    StateUpdated,
    TextDelta,
)
from helix_agents.log.streaming import open_session_stream, run_from_sequence
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.stores import MemoryEventStore

SID = "live"


def _delta(seq: int, text: str) -> TextDelta:
    return TextDelta(session_id=SID, seq=seq, ts=0.0, agent_id=SID, agent_type="w", delta=text)


def _opening() -> list[Event]:
    return [
        SessionCreated(
            session_id=SID, seq=1, ts=0.0, agent_type="w", run_id="r1", initial_state={"n": 0}
        ),
        RunStarted(session_id=SID, seq=2, ts=0.0, run_id="r1"),
    ]


async def _collect(events: AsyncIterator[TransportEvent], into: list[TransportEvent]) -> None:
    async for event in events:
        into.append(event)


async def test_a_live_end_carries_the_state_folded_from_the_tail() -> None:
    store = MemoryEventStore()
    await store.append(SID, _opening(), 0)
    seen: list[TransportEvent] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, await open_session_stream(store, SID), seen)
            await store.append(SID, [_delta(3, "a")], 2)
            await store.append(
                SID,
                [
                    StateUpdated(session_id=SID, seq=4, ts=0.0, state={"n": 4}),
                    Completed(session_id=SID, seq=5, ts=0.0, output="done"),
                ],
                3,
            )
    assert seen[-1] == EndEvent(output="done", state={"n": 4})
    assert [event.sequence for event in seen if isinstance(event, ChunkEvent)] == [3]


async def test_a_live_failure_says_what_the_log_says() -> None:
    store = MemoryEventStore()
    await store.append(SID, _opening(), 0)
    seen: list[TransportEvent] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, await open_session_stream(store, SID), seen)
            failed = Failed(session_id=SID, seq=3, ts=0.0, error="model down", recoverable=True)
            await store.append(SID, [failed], 2)
    assert seen == [ErrorEvent(error="model down", recoverable=True)]


async def test_a_run_started_right_after_an_end_keeps_the_stream_open() -> None:
    store = MemoryEventStore()
    await store.append(SID, _opening(), 0)
    seen: list[TransportEvent] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_collect, await open_session_stream(store, SID), seen)
            # The end and the next run land in one append: the stream goes on.
            await store.append(
                SID,
                [
                    Interrupted(session_id=SID, seq=3, ts=0.0, reason="pause"),
                    RunStarted(session_id=SID, seq=4, ts=0.0, run_id="r2"),
                ],
                2,
            )
            await store.append(
                SID, [_delta(5, "b"), Completed(session_id=SID, seq=6, ts=0.0, output=1)], 4
            )
    assert [event.sequence for event in seen if isinstance(event, ChunkEvent)][-1] == 5
    assert seen[-1] == EndEvent(output=1, state={"n": 0})
    assert not any(isinstance(event, ErrorEvent) for event in seen)


def test_run_from_sequence_reads_only_the_last_run() -> None:
    """0 for the first run (it began with the session); else the seq before its run_started."""
    first = [*_opening(), _delta(3, "a"), Completed(session_id=SID, seq=4, ts=0.0, output="a")]
    assert run_from_sequence(first) == 0
    turn = RunStarted(session_id=SID, seq=5, ts=0.0, run_id="r2", mode="continue")
    later = [*first, turn, _delta(6, "b")]
    assert run_from_sequence(later) == 4
    stopped = [*later, Interrupted(session_id=SID, seq=7, ts=0.0)]
    assert run_from_sequence(stopped) == 4  # still that run's, until another starts
