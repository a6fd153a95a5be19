"""Schedules on the DBOS runtime: DBOS's own schedule fires the ticks.

A schedule made on a DBOS server (``dbos_server``) becomes a DBOS schedule of
the tick workflow (``DBOS.create_schedule``, in the system database); at each
tick DBOS enqueues the workflow, whose step claims the tick in the schedules
log and starts the session. No helix scheduler runs here. Pausing pauses the
DBOS schedule, deleting deletes it; an interval no cron expression fires is
refused, nothing stored.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from dbos import DBOS

from helix_agents.dbos import DbosOptions, dbos_server
from helix_agents.errors import AgentServerError
from helix_agents.events import ScheduleCreated, ScheduleFired, SessionCreated
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.schedules import ScheduleRequest
from helix_agents.stores import MemoryEventStore
from tests.integration.cron_app import echo

pytestmark = [pytest.mark.slow]

LIMIT = 30


async def _fired(store: MemoryEventStore) -> list[ScheduleFired]:
    return [e for e in await store.read(SCHEDULES_LOG) if isinstance(e, ScheduleFired)]


async def test_a_dbos_schedule_starts_each_tick_s_session(tmp_path: Path) -> None:
    store = MemoryEventStore()
    options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    start = {"agentType": "echo", "message": "tick"}
    name = f"helix-cron.{options.queue}.dbos"
    with anyio.fail_after(LIMIT):
        async with dbos_server([echo], store, options) as server:
            assert server.schedules.engine is not None
            assert server._scheduler is None  # the engine fires the ticks, not helix
            with pytest.raises(AgentServerError, match="divide a minute"):
                await server.schedules.create(ScheduleRequest(interval_seconds=7, start=start))
            assert await store.read(SCHEDULES_LOG) == []
            await server.schedules.create(
                ScheduleRequest(id="dbos", interval_seconds=1, start=start)
            )
            found = await DBOS.get_schedule_async(name)
            assert found is not None
            assert found["status"] == "ACTIVE"
            while len(await _fired(store)) < 2:  # noqa: ASYNC110 (the log is the only signal)
                await anyio.sleep(0.1)
            await server.schedules.pause("dbos")
            paused = await DBOS.get_schedule_async(name)
            assert paused is not None
            assert paused["status"] == "PAUSED"
            fired = await _fired(store)
            await anyio.sleep(1.5)
            later = await _fired(store)
            for event in later:  # each claimed tick's session (its start may land just after)
                while not await store.read(event.run_session_id):  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            await server.schedules.delete("dbos")
            assert await DBOS.get_schedule_async(name) is None
    assert sum(isinstance(e, ScheduleCreated) for e in await store.read(SCHEDULES_LOG)) == 1
    assert len(later) <= len(fired) + 1  # a tick under way when paused may still land
    ticks = [event.tick for event in later]
    assert len(set(ticks)) == len(ticks)
    for event in later:
        created = (await store.read(event.run_session_id))[0]
        assert isinstance(created, SessionCreated)
        assert created.metadata == {"cronId": "dbos", "cronTick": str(int(event.tick))}
