"""Schedules without a server: clocks checked and counted, ticks claimed once, catch-up."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from helix_agents.errors import AgentServerError
from helix_agents.events import ScheduleFired
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteStartRequest,
    RemoteStartResponse,
)
from helix_agents.schedules import Scheduler, ScheduleRequest, Schedules, checked_timing
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("cron", "zone", "interval", "says"),
    [
        ("* * * *", None, None, "5 fields"),
        ("0 0 * * * *", None, None, "5 fields"),
        ("60 * * * *", None, None, "bad cron expression"),
        ("* * 32 * *", None, None, "bad cron expression"),
        ("0 9 * * *", "Mars/Olympus", None, "unknown time zone"),
        ("0 9 * * *", "", None, "unknown time zone"),
        (None, None, 0, "from 1"),
        (None, None, -3, "from 1"),
        (None, None, True, "whole number"),
        (None, "UTC", 60, "timezone is for a cron"),
        ("* * * * *", None, 60, "exactly one"),
        (None, None, None, "exactly one"),
    ],
)
def test_a_bad_clock_is_an_invalid_request_saying_why(
    cron: str | None, zone: str | None, interval: Any, says: str
) -> None:
    with pytest.raises(AgentServerError, match=says) as refused:
        checked_timing(cron, zone, interval)
    assert refused.value.code == "INVALID_REQUEST"


def test_an_expression_is_read_in_its_zone_and_an_interval_counts_from_the_epoch() -> None:
    tokyo = checked_timing("0 9 * * 1-5", "Asia/Tokyo", None)
    friday = datetime(2026, 11, 27, 12, 0, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp()
    monday_9 = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("Asia/Tokyo")).timestamp()
    assert tokyo.next_after(friday) == monday_9  # the weekend skipped, 00:00 UTC
    assert tokyo.due(friday, monday_9 + 3 * 86400 + 1) == (monday_9 + 3 * 86400, 4)
    every = checked_timing(None, None, 60)
    assert every.next_after(1000.0) == 1020.0
    assert every.due(1000.0, 1019.9) == (None, 0)
    assert every.due(1000.0, 1200.0) == (1200.0, 4)  # 1020, 1080, 1140, 1200


class Target:
    """Where the scheduler starts runs: it records them."""

    def __init__(self) -> None:
        self.starts: list[RemoteStartRequest] = []

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        self.starts.append(request)
        sid = request.session_id
        return RemoteStartResponse(session_id=sid, stream_id=sid, run_id="r")

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        raise AssertionError("no turns here")


async def _made(catchup: str) -> tuple[MemoryEventStore, float]:
    store = MemoryEventStore()
    made = await Schedules(store, ["echo"]).create(
        ScheduleRequest(
            id="s",
            interval_seconds=60,
            catchup=catchup,  # type: ignore[arg-type]
            start={"agentType": "echo", "message": "hi", "metadata": {"k": "v"}},
        )
    )
    return store, (made.created_at // 60 + 10) * 60  # ten ticks after it was made


async def _fired(store: MemoryEventStore) -> list[ScheduleFired]:
    return [e for e in await store.read(SCHEDULES_LOG) if isinstance(e, ScheduleFired)]


async def test_catchup_once_runs_one_session_for_the_missed_ticks() -> None:
    store, tenth = await _made("once")
    target = Target()
    a, b = Scheduler(Schedules(store), target), Scheduler(Schedules(store), target)
    await a.run_once(now=tenth + 30)
    await b.run_once(now=tenth + 30)  # the same pass elsewhere: the tick is claimed already
    [fired] = await _fired(store)
    assert (fired.tick, fired.run_session_id) == (tenth, f"cron.s.{int(tenth)}")
    assert fired.missed >= 9
    assert [s.session_id for s in target.starts] == [f"cron.s.{int(tenth)}"]
    assert target.starts[0].metadata == {"k": "v", "cronId": "s", "cronTick": str(int(tenth))}
    await b.run_once(now=tenth + 61)
    assert [e.missed for e in await _fired(store)] == [fired.missed, 0]


async def test_catchup_skip_runs_none_of_the_missed_ticks_and_the_next_on_time() -> None:
    store, tenth = await _made("skip")
    target = Target()
    scheduler = Scheduler(Schedules(store), target)
    await scheduler.run_once(now=tenth + 30)  # every due tick is late: none runs
    assert await _fired(store) == []
    await scheduler.run_once(now=tenth + 61)  # the next one, on time
    [fired] = await _fired(store)
    assert (fired.tick, fired.missed) == (tenth + 60, 0)
    assert [s.session_id for s in target.starts] == [f"cron.s.{int(tenth + 60)}"]


async def test_a_paused_schedule_fires_nothing_and_resumes_from_then(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store, tenth = await _made("once")
    schedules = Schedules(store)
    await schedules.pause("s")
    target = Target()
    scheduler = Scheduler(schedules, target)
    await scheduler.run_once(now=tenth + 30)
    assert await _fired(store) == []
    monkeypatch.setattr("helix_agents.schedules.book.time.time", lambda: tenth + 30)
    await schedules.resume("s")  # the ticks of the pause are not run
    await scheduler.run_once(now=tenth + 30)
    assert await _fired(store) == []
    await scheduler.run_once(now=tenth + 61)
    [fired] = await _fired(store)
    assert (fired.tick, fired.missed) == (tenth + 60, 0)
