"""A schedule across a SIGKILLed and restarted ``helix-agents serve``: each tick one run.

Two interval schedules (1 s) fire while the only server runs, then it is
killed and started again after a few ticks. Every tick in the schedules log
has exactly one session (``cron.ID.TICK``, ``metadata.cronId``) and no session
is started without a tick; the ticks of the downtime follow each schedule's
``catchup``: ``once`` runs one session for them all (its ``missed`` counts
the rest), ``skip`` runs none of them. And a tick claimed by a process that
died before starting its run is started by the next scheduler.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _serve_process import ServeProcess
from cron_app import agents

from helix_agents.events import ScheduleCreated, ScheduleFired, SessionCreated
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.runtime.writer import stamp
from helix_agents.schedules import Scheduler, ScheduleRequest, Schedules
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore, check_store, open_store

pytestmark = pytest.mark.anyio

TARGET = "tests.integration.cron_app:agents"
DOWN = 3.5  # seconds the server stays dead: at least three ticks of each schedule missed


async def _fired(http: httpx.AsyncClient, cron_id: str) -> int:
    answer = await http.get(f"/crons/{cron_id}")
    assert answer.status_code == 200, answer.text
    fired: int = answer.json()["fired"]
    return fired


async def _until_fired(http: httpx.AsyncClient, cron_id: str, count: int) -> None:
    while await _fired(http, cron_id) < count:  # noqa: ASYNC110 (polling the server)
        await anyio.sleep(0.1)


async def test_each_tick_starts_one_run_across_a_kill_and_missed_ticks_follow_catchup(
    tmp_path: Path,
) -> None:
    server = ServeProcess(tmp_path, TARGET, agents=["echo"])
    start: dict[str, Any] = {"agentType": "echo", "message": "tick"}
    try:
        with anyio.fail_after(30):
            await server.start()
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                for cron_id, catchup in (("once", "once"), ("skip", "skip")):
                    body = {"id": cron_id, "intervalSeconds": 1, "catchup": catchup, "start": start}
                    made = await http.post("/crons", json=body)
                    assert made.status_code == 200, made.text
                await _until_fired(http, "once", 2)
                await _until_fired(http, "skip", 2)
            await server.kill()
            killed_at = time.time()
            await anyio.sleep(DOWN)
            await server.start()
            restarted_at = time.time()
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
                before = {c: await _fired(http, c) for c in ("once", "skip")}
                for cron_id in ("once", "skip"):
                    await _until_fired(http, cron_id, before[cron_id] + 2)
    finally:
        await server.stop()
    store = await open_store(f"sqlite:///{server.db}")
    try:
        checked = await check_store(store)  # the schedules' log is no damaged session
        assert checked.damaged == {}, checked.damaged
        schedules_log = await store.read(SCHEDULES_LOG)
        fired = [e for e in schedules_log if isinstance(e, ScheduleFired)]
        runs: dict[str, list[str]] = {"once": [], "skip": []}
        for session_id in await store.list_sessions():
            if session_id == SCHEDULES_LOG:
                continue
            created = (await store.read(session_id))[0]
            assert isinstance(created, SessionCreated)
            runs[created.metadata["cronId"]].append(session_id)
    finally:
        await store.close()
    assert sum(isinstance(e, ScheduleCreated) for e in schedules_log) == 2, server.output()
    for cron_id in ("once", "skip"):
        mine = [e for e in fired if e.schedule_id == cron_id]
        ticks = [e.tick for e in mine]
        assert len(set(ticks)) == len(ticks), ticks  # each tick claimed once
        assert ticks == sorted(ticks)
        # Each tick exactly one run, and no run without a tick.
        assert sorted(runs[cron_id]) == sorted(f"cron.{cron_id}.{int(t)}" for t in ticks)
        # The ticks the dead server missed: none of them has a run of its own.
        downtime = [t for t in ticks if killed_at + 1 < t < restarted_at - 1]
        assert downtime == [], (cron_id, ticks, killed_at, restarted_at)
        after = [e for e in mine if e.fired_at >= restarted_at - 0.5]
        assert after, server.output()
        if cron_id == "once":  # one run stands for the missed ticks
            assert after[0].missed >= 2, after[0]
            assert after[0].tick < restarted_at
        else:  # skipped: no run stands for them, the next tick on time fires
            assert all(e.missed == 0 for e in mine)
            assert all(e.fired_at - e.tick <= 1.0 for e in after), after


async def test_a_tick_claimed_by_a_process_that_died_before_its_start_is_started() -> None:
    store = MemoryEventStore()
    schedules = Schedules(store, ["echo"])
    made = await schedules.create(
        ScheduleRequest(
            id="orphan", interval_seconds=3600, start={"agentType": "echo", "message": "hi"}
        )
    )
    tick = made.created_at + 3600  # a tick another process claimed, then died
    claim = ScheduleFired(
        schedule_id="orphan",
        tick=tick,
        run_session_id=f"cron.orphan.{int(tick)}",
        fired_at=time.time() - 60,
    )
    await store.append(SCHEDULES_LOG, stamp(SCHEDULES_LOG, 1, [claim]), 1)
    assert await store.read(f"cron.orphan.{int(tick)}") == []
    with anyio.fail_after(10):
        async with AgentServer(agents, store) as server:
            scheduler = Scheduler(Schedules(store, ["echo"]), server)
            await scheduler.run_once()
            created = (await store.read(f"cron.orphan.{int(tick)}"))[0]
            assert isinstance(created, SessionCreated)
            assert created.metadata["cronTick"] == str(int(tick))
            await scheduler.run_once()  # repaired once: no second start, no new claim
    assert [type(e) for e in await store.read(SCHEDULES_LOG)] == [ScheduleCreated, ScheduleFired]
