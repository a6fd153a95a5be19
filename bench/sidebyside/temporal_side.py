"""The Temporal contenders: helix (``TemporalWorker`` + ``temporal_server``), Pydantic AI's
``TemporalAgent``, Temporal alone; all on the parent's dev server, each on its own task queue.

Each also reads its workflows' histories back (``fetch_history``): bytes,
events, activities and local activities per agent step.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from _durable import build, sessions

from helix_agents.stores import SqliteEventStore

__all__ = ["bare_temporal", "helix_temporal", "history", "pai_temporal"]


async def history(client: Any, ids: list[str], agent_steps: int) -> dict[str, float]:
    """The histories of workflows ``ids``, per agent step."""
    from temporalio.api.enums.v1 import EventType

    size = events = activities = local = tasks = 0
    for workflow_id in ids:
        fetched = await client.get_workflow_handle(workflow_id).fetch_history()
        for event in fetched.events:
            size += event.ByteSize()
            events += 1
            activities += event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
            local += event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
            tasks += event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
    return {
        "bytes": round(size / agent_steps, 1),
        "events": round(events / agent_steps, 2),
        "activities": round(activities / agent_steps, 2),
        "local_activities": round(local / agent_steps, 2),
        "workflow_tasks": round(tasks / agent_steps, 2),
    }


async def helix_temporal(job: dict[str, Any]) -> dict[str, Any]:
    """``stepper`` sessions through ``temporal_server``, a ``TemporalWorker`` here, itemized."""
    from temporalio.client import Client

    from helix_agents.temporal import TemporalOptions, TemporalWorker, temporal_server
    from sidebyside.profile import Tally, install_steps, itemize, profiled_sessions

    steps, count, prefix = job["steps"], job["count"], job["prefix"]
    tally = Tally()
    install_steps(tally)
    agents = build(steps, 1)
    store = SqliteEventStore(Path(job["dir"]) / "helix-temporal.db")
    try:
        options = TemporalOptions(address=job["address"], task_queue=job["queue"])
        async with (
            TemporalWorker(agents, store, options),
            temporal_server(agents, store, options) as server,
        ):
            await sessions(server, "stepper", 1, f"{prefix}-warm")
            tally.clear()
            times = await profiled_sessions(server, count, prefix, tally)
    finally:
        await store.close()
    client = await Client.connect(job["address"])
    ids = [f"{prefix}-stepper-{n}" for n in range(count)]
    return {
        "times": times,
        "profile": itemize(tally, sum(times), steps * count),
        "history": await history(client, ids, steps * count),
    }


async def _timed(client: Any, run: Any, arg: Any, job: dict[str, Any]) -> list[float]:
    prefix = job["prefix"]
    await client.execute_workflow(run, arg, id=f"{prefix}-warm", task_queue=job["queue"])
    times: list[float] = []
    for n in range(job["count"]):
        began = time.perf_counter()
        await client.execute_workflow(run, arg, id=f"{prefix}-{n}", task_queue=job["queue"])
        times.append(time.perf_counter() - began)
    return times


async def pai_temporal(job: dict[str, Any]) -> dict[str, Any]:
    """Pydantic AI's ``TemporalAgent`` in ``PaiWorkflow`` (``PydanticAIPlugin``), a worker here."""
    from pydantic_ai.durable_exec.temporal import PydanticAIPlugin
    from temporalio.client import Client
    from temporalio.worker import Worker

    from sidebyside.pai_flow import PaiWorkflow
    from sidebyside.workload import prompt

    steps, count = job["steps"], job["count"]
    client = await Client.connect(job["address"], plugins=[PydanticAIPlugin()])
    async with Worker(client, task_queue=job["queue"], workflows=[PaiWorkflow]):
        times = await _timed(client, PaiWorkflow.run, prompt(steps), job)
    ids = [f"{job['prefix']}-{n}" for n in range(count)]
    return {"times": times, "history": await history(client, ids, steps * count)}


async def bare_temporal(job: dict[str, Any]) -> dict[str, Any]:
    """Temporal alone: two no-op regular activities per agent step, a worker here."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    from sidebyside.flows import BareWorkflow, noop

    steps, count = job["steps"], job["count"]
    client = await Client.connect(job["address"])
    async with Worker(client, task_queue=job["queue"], workflows=[BareWorkflow], activities=[noop]):
        times = await _timed(client, BareWorkflow.run, 2 * steps, job)
    ids = [f"{job['prefix']}-{n}" for n in range(count)]
    return {"times": times, "history": await history(client, ids, steps * count)}
