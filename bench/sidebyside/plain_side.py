"""The plain contenders: helix's built-in runtime (a SQLite log) and Pydantic AI in memory."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from _durable import build, sessions

from helix_agents import AgentExecutor
from helix_agents.stores import SqliteEventStore

__all__ = ["helix_builtin", "pai_agent", "pai_plain", "timed_pai_runs"]


async def helix_builtin(job: dict[str, Any]) -> dict[str, Any]:
    """``stepper`` sessions on the built-in runtime, one at a time, after one to warm up."""
    steps, count = job["steps"], job["count"]
    store = SqliteEventStore(Path(job["dir"]) / "builtin.db")
    try:
        async with AgentExecutor(store, build(steps, 1)) as executor:
            await sessions(executor.service, "stepper", 1, f"{job['prefix']}-warm")
            times = await sessions(executor.service, "stepper", count, job["prefix"])
    finally:
        await store.close()
    return {"times": times}


def pai_agent(tool: Any) -> Any:
    """Pydantic AI's agent: the scripted model, ``tool`` as its tool ``inc``."""
    from pydantic_ai import Agent, Tool
    from pydantic_ai.models.function import FunctionModel

    from sidebyside.workload import scripted

    return Agent(FunctionModel(scripted), name="pai_stepper", tools=[Tool(tool, name="inc")])


async def timed_pai_runs(agent: Any, steps: int, count: int) -> list[float]:
    """Run ``agent`` once to warm up, then ``count`` times; each run's seconds."""
    from sidebyside.workload import prompt

    await agent.run(prompt(steps))
    times: list[float] = []
    for _ in range(count):
        began = time.perf_counter()
        result = await agent.run(prompt(steps))
        times.append(time.perf_counter() - began)
        if result.output != "stepped":
            raise RuntimeError(f"unexpected answer {result.output!r}")
    return times


async def pai_plain(job: dict[str, Any]) -> dict[str, Any]:
    """Pydantic AI's agent, plain (in memory)."""
    from sidebyside.workload import inc

    return {"times": await timed_pai_runs(pai_agent(inc), job["steps"], job["count"])}
