"""Schedules on the Temporal runtime: Temporal's own Schedule fires the ticks.

A schedule made on a Temporal gateway (``temporal_server``) becomes a
Temporal Schedule; each tick Temporal starts the tick workflow, whose activity
on the worker claims the tick in the schedules log and starts the session.
No helix scheduler runs here: without Temporal's schedule nothing would fire.
Pausing pauses the Temporal Schedule; deleting deletes it.
"""

from __future__ import annotations

import anyio
import pytest
from temporal_server import TemporalDev
from temporalio.client import Client
from temporalio.service import RPCError

from helix_agents.events import ScheduleFired, SessionCreated
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.schedules import ScheduleRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import gateway_and_worker, options_for
from tests.integration.cron_app import echo

pytestmark = [pytest.mark.slow]

LIMIT = 30


async def _fired(store: MemoryEventStore) -> list[ScheduleFired]:
    return [e for e in await store.read(SCHEDULES_LOG) if isinstance(e, ScheduleFired)]


async def test_a_temporal_schedule_starts_each_tick_s_session(temporal_dev: TemporalDev) -> None:
    store = MemoryEventStore()
    options = options_for(temporal_dev)
    with anyio.fail_after(LIMIT):
        async with gateway_and_worker({"echo": echo}, store, options) as (server, _):
            assert server.schedules.engine is not None
            assert server._scheduler is None  # the engine fires the ticks, not helix
            request = ScheduleRequest(
                id="temporal", interval_seconds=1, start={"agentType": "echo", "message": "tick"}
            )
            await server.schedules.create(request)
            client = await Client.connect(temporal_dev.address)
            handle = client.get_schedule_handle(f"helix-cron.{options.task_queue}.temporal")
            assert (await handle.describe()).schedule.state.paused is False
            while len(await _fired(store)) < 2:  # noqa: ASYNC110 (the log is the only signal)
                await anyio.sleep(0.1)
            await server.schedules.pause("temporal")
            assert (await handle.describe()).schedule.state.paused is True
            fired = await _fired(store)
            await anyio.sleep(1.5)
            later = await _fired(store)
            for event in later:  # each claimed tick's session (its start may land just after)
                while not await store.read(event.run_session_id):  # noqa: ASYNC110
                    await anyio.sleep(0.1)
            await server.schedules.delete("temporal")
            with pytest.raises(RPCError):
                await handle.describe()
    assert len(later) <= len(fired) + 1  # a tick under way when paused may still land
    ticks = [event.tick for event in later]
    assert len(set(ticks)) == len(ticks)
    for event in later:
        created = (await store.read(event.run_session_id))[0]
        assert isinstance(created, SessionCreated)
        assert created.metadata == {"cronId": "temporal", "cronTick": str(int(event.tick))}
