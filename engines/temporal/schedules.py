"""Schedules on Temporal: each schedule is a Temporal Schedule that starts a tick workflow.

A :class:`TemporalRuntime`'s ``engine_schedules`` (:class:`TemporalSchedules`)
keeps one Temporal Schedule per schedule of the log (id
``helix-cron.<task queue>.<schedule id>``: a cron expression in its time zone,
or an interval; paused as the schedule is). Temporal fires it, even while no
helix process runs, by starting :class:`ScheduleTickWorkflow` on the task
queue; a worker runs its one activity, which fires the schedule's due tick as
every scheduler does (``Scheduler.fire_one``: the tick claimed in the
schedules log, then the run started through the executor's service). Temporal
retries the activity, so a tick claimed before a crash gets its run; a tick
that finds its tick claimed already (a backlog of tick workflows after
downtime) does nothing, so catch-up follows the schedule's ``catchup``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleAlreadyRunningError,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    ScheduleState,
)
from temporalio.common import RetryPolicy
from temporalio.service import RPCError, RPCStatusCode

from helix_agents.engines.temporal.options import TemporalOptions
from helix_agents.engines.temporal.service import TemporalConnection
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.schedules import ScheduleEntry, Scheduler, Schedules, Timing

__all__ = [
    "TICK_ACTIVITY",
    "TICK_WORKFLOW",
    "ScheduleTickWorkflow",
    "TemporalSchedules",
    "TickActivities",
    "TickInput",
]

log = logging.getLogger("helix_agents.temporal")

TICK_WORKFLOW = "HelixScheduleTick"
TICK_ACTIVITY = "helix_fire_schedule"


@dataclass
class TickInput:
    """Which schedule a tick workflow fires."""

    schedule_id: str


@workflow.defn(name=TICK_WORKFLOW)
class ScheduleTickWorkflow:
    """One tick of a schedule: its activity fires the schedule's due tick."""

    @workflow.run
    async def run(self, tick: TickInput) -> None:
        """Fire the tick (retried until the run is started, or a minute has passed)."""
        await workflow.execute_activity(
            TICK_ACTIVITY,
            tick,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=timedelta(minutes=1),
            retry_policy=RetryPolicy(initial_interval=timedelta(milliseconds=200)),
        )


class TickActivities:
    """The tick workflow's activity, over a worker's executor."""

    def __init__(self, executor: AgentExecutor) -> None:
        self.executor = executor

    @activity.defn(name=TICK_ACTIVITY)
    async def fire(self, tick: TickInput) -> None:
        """Claim the schedule's due tick and start its run (repairing a claimed one first)."""
        schedules = Schedules(self.executor.store)
        # settle=0: a claimed tick without its run is started here at once (this
        # activity is the only firer; Temporal retries it after a failure).
        scheduler = Scheduler(schedules, self.executor.service, settle=0.0)
        await scheduler.fire_one(tick.schedule_id)


def _engine_id(options: TemporalOptions, schedule_id: str) -> str:
    return f"helix-cron.{options.task_queue}.{schedule_id}"


class TemporalSchedules:
    """The schedules of the log as Temporal Schedules (a ``ScheduleEngine``; the module)."""

    def __init__(self, connection: TemporalConnection, options: TemporalOptions) -> None:
        self.connection = connection
        self.options = options

    def check(self, timing: Timing) -> None:
        """Every clock of a schedule is one Temporal fires (cron expressions, intervals)."""

    def _schedule(self, entry: ScheduleEntry) -> Schedule:
        timing = entry.timing
        if timing.interval is not None:
            spec = ScheduleSpec(
                intervals=[ScheduleIntervalSpec(every=timedelta(seconds=timing.interval))]
            )
        else:
            assert timing.cron is not None
            spec = ScheduleSpec(cron_expressions=[timing.cron], time_zone_name=timing.zone)
        action = ScheduleActionStartWorkflow(
            TICK_WORKFLOW,
            TickInput(entry.schedule_id),
            id=f"helix-cron-tick.{self.options.task_queue}.{entry.schedule_id}",
            task_queue=self.options.task_queue,
        )
        return Schedule(
            action=action,
            spec=spec,
            # A tick still running when the next is due: the next waits (one buffered);
            # the activity fires whatever is due then, so nothing is started twice.
            policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.BUFFER_ONE),
            state=ScheduleState(paused=entry.paused),
        )

    async def ensure(self, entry: ScheduleEntry) -> None:
        """Create the Temporal Schedule, or set its pause as the log says."""
        client = self.connection.client
        engine_id = _engine_id(self.options, entry.schedule_id)
        try:
            await client.create_schedule(engine_id, self._schedule(entry))
        except ScheduleAlreadyRunningError:
            handle = client.get_schedule_handle(engine_id)
            described = await handle.describe()
            if described.schedule.state.paused != entry.paused:
                await (handle.pause() if entry.paused else handle.unpause())

    async def pause(self, schedule_id: str) -> None:
        """Pause the Temporal Schedule."""
        await self.connection.client.get_schedule_handle(
            _engine_id(self.options, schedule_id)
        ).pause(note="paused through helix")

    async def resume(self, schedule_id: str) -> None:
        """Unpause the Temporal Schedule."""
        await self.connection.client.get_schedule_handle(
            _engine_id(self.options, schedule_id)
        ).unpause(note="resumed through helix")

    async def delete(self, schedule_id: str) -> None:
        """Delete the Temporal Schedule (nothing if it is gone)."""
        handle = self.connection.client.get_schedule_handle(_engine_id(self.options, schedule_id))
        try:
            await handle.delete()
        except RPCError as exc:
            if exc.status != RPCStatusCode.NOT_FOUND:
                raise
