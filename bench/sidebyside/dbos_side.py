"""The DBOS contenders: helix (``dbos_server``), Pydantic AI's ``DBOSAgent``, DBOS alone.

DBOS is one instance per process: each runs in a process of its own
(``contender.py``). The system database is the job's (SQLite or Postgres);
helix's log stays a SQLite store.
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

from _durable import build, sessions

from helix_agents.stores import SqliteEventStore

__all__ = ["bare_dbos", "helix_dbos", "pai_dbos"]


def _config(job: dict[str, Any], name: str) -> Any:
    """The DBOS configuration helix's runtime uses, for the others too."""
    return {
        "name": name,
        "system_database_url": job["system_database"],
        "notification_listener_polling_interval_sec": 0.05,
        "log_level": "WARNING",
    }


async def helix_dbos(job: dict[str, Any]) -> dict[str, Any]:
    """``stepper`` sessions through ``dbos_server`` (``serve --dbos``), itemized."""
    from helix_agents.dbos import DbosOptions, dbos_server
    from sidebyside.profile import (
        Tally,
        install_dbos,
        install_steps,
        itemize,
        profiled_sessions,
    )

    steps, count = job["steps"], job["count"]
    tally = Tally()
    install_steps(tally)
    install_dbos(tally)
    store = SqliteEventStore(Path(job["dir"]) / "helix-dbos.db")
    try:
        options = DbosOptions(system_database=job["system_database"])
        async with dbos_server(build(steps, 1), store, options) as server:
            await sessions(server, "stepper", 1, f"{job['prefix']}-warm")
            tally.clear()
            times = await profiled_sessions(server, count, job["prefix"], tally)
    finally:
        await store.close()
    return {"times": times, "profile": itemize(tally, sum(times), steps * count)}


async def pai_dbos(job: dict[str, Any]) -> dict[str, Any]:
    """Pydantic AI's ``DBOSAgent``; its tool a DBOS step (``@DBOS.step``), as helix's is."""
    from dbos import DBOS
    from pydantic_ai.durable_exec.dbos import DBOSAgent

    from sidebyside.plain_side import pai_agent, timed_pai_runs
    from sidebyside.workload import inc

    DBOS(config=_config(job, "pai-bench"))
    tool = DBOS.step(name="inc")(inc)
    with warnings.catch_warnings():  # deprecated for the DBOSDurability capability in 2.68
        warnings.simplefilter("ignore")
        agent = DBOSAgent(pai_agent(tool))
    DBOS.launch()
    try:
        times = await timed_pai_runs(agent, job["steps"], job["count"])
    finally:
        DBOS.destroy()
    return {"times": times}


async def bare_dbos(job: dict[str, Any]) -> dict[str, Any]:
    """DBOS alone: a workflow of two no-op steps per agent step, called as DBOSAgent's is."""
    from dbos import DBOS

    DBOS(config=_config(job, "bare-bench"))

    @DBOS.step(name="noop")
    async def noop(value: int) -> int:
        return value

    @DBOS.workflow(name="bare")
    async def bare(count: int) -> int:
        for n in range(count):
            await noop(n)
        return count

    DBOS.launch()
    steps, times = job["steps"], []
    try:
        await bare(2 * steps)
        for _ in range(job["count"]):
            began = time.perf_counter()
            await bare(2 * steps)
            times.append(time.perf_counter() - began)
    finally:
        DBOS.destroy()
    return {"times": times}
