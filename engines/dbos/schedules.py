"""Schedules on DBOS: each schedule is a DBOS schedule of the tick workflow.

A :class:`DbosRuntime`'s ``engine_schedules`` (:class:`DbosSchedules`) keeps
one DBOS schedule per schedule of the log (``DBOS.create_schedule``, named
``helix-cron.<queue>.<schedule id>``, in the system database, so every worker
on it shares them). DBOS enqueues :func:`schedule_tick` at each tick, once
(its workflow id names the schedule and the time), and a worker runs it: one
step fires the schedule's due tick as every scheduler does
(``Scheduler.fire_one``: the tick claimed in the schedules log, then the run
started through the executor's service). DBOS recovers the workflow, so a
tick claimed before a crash gets its run.

DBOS fires cron expressions only: an interval becomes a seconds-field
expression, so the runtime takes intervals that divide a minute, an hour or
a day (``INVALID_REQUEST`` for another).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import anyio
from dbos import DBOS

from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.dbos.stephost import current_host
from helix_agents.engines.dbos.stepping import call_step
from helix_agents.errors import AgentServerError
from helix_agents.schedules import ScheduleEntry, Scheduler, Schedules, Timing

__all__ = ["TICK_WORKFLOW", "DbosSchedules", "interval_expression", "schedule_tick"]

TICK_WORKFLOW = "helix_schedule_tick"


@DBOS.workflow(name=TICK_WORKFLOW)
async def schedule_tick(scheduled_at: datetime, context: Any) -> None:
    """One tick of schedule ``context`` (its id): a step fires its due tick."""
    schedule_id = str(context)
    executor = current_host().steps.kit.executor

    async def fire() -> None:
        # settle=0: a claimed tick without its run is started here at once (this
        # workflow is the only firer; DBOS recovers it after a crash).
        scheduler = Scheduler(Schedules(executor.store), executor.service, settle=0.0)
        await scheduler.fire_one(schedule_id)

    await call_step("helix_fire_schedule", fire)


def interval_expression(seconds: int) -> str | None:
    """A 6-field (seconds first) expression firing every ``seconds``, or None if none does."""
    if seconds < 60 and 60 % seconds == 0:
        return f"*/{seconds} * * * * *"
    if seconds % 60 == 0 and seconds < 3600 and 60 % (seconds // 60) == 0:
        return f"0 */{seconds // 60} * * * *"
    if seconds % 3600 == 0 and seconds <= 86400 and 24 % (seconds // 3600) == 0:
        return f"0 0 */{seconds // 3600} * * *"
    return None


def _expression(timing: Timing) -> str:
    if timing.interval is None:
        assert timing.cron is not None
        return timing.cron
    expression = interval_expression(timing.interval)
    if expression is None:
        raise AgentServerError(
            "INVALID_REQUEST",
            "the DBOS runtime fires intervals that divide a minute, an hour or a day "
            f"(DBOS schedules are cron expressions), not {timing.interval} s",
        )
    return expression


class DbosSchedules:
    """The schedules of the log as DBOS schedules (a ``ScheduleEngine``; the module)."""

    def __init__(self, options: DbosOptions) -> None:
        self.options = options

    def _name(self, schedule_id: str) -> str:
        return f"helix-cron.{self.options.queue}.{schedule_id}"

    def check(self, timing: Timing) -> None:
        """Refuse an interval no cron expression fires (``INVALID_REQUEST``)."""
        _expression(timing)

    async def ensure(self, entry: ScheduleEntry) -> None:
        """Create the DBOS schedule, or set its pause as the log says."""
        name = self._name(entry.schedule_id)
        found = await DBOS.get_schedule_async(name)
        if found is None:
            await DBOS.create_schedule_async(
                schedule_name=name,
                workflow_fn=schedule_tick,
                schedule=_expression(entry.timing),
                context=entry.schedule_id,
                cron_timezone=entry.timing.zone,
            )
            paused = False
        else:
            paused = str(found["status"]).upper() == "PAUSED"
        if paused != entry.paused:
            await (self.pause if entry.paused else self.resume)(entry.schedule_id)

    async def pause(self, schedule_id: str) -> None:
        """Pause the DBOS schedule."""
        await anyio.to_thread.run_sync(DBOS.pause_schedule, self._name(schedule_id))

    async def resume(self, schedule_id: str) -> None:
        """Resume the DBOS schedule."""
        await anyio.to_thread.run_sync(DBOS.resume_schedule, self._name(schedule_id))

    async def delete(self, schedule_id: str) -> None:
        """Delete the DBOS schedule (nothing if it is gone)."""
        name = self._name(schedule_id)
        if await DBOS.get_schedule_async(name) is not None:
            await DBOS.delete_schedule_async(name)
