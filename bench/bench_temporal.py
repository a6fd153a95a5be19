"""``temporal`` benchmark: what running on Temporal costs per agent step and per sub-agent call.

Side by side in one run, on the same SQLite store and scripted models: a
plain agent of N steps (each a tool call and a model call) and a parent
making M sequential local sub-agent calls, on the built-in runtime and as
Temporal workflows (a dev server started here, a worker in this process,
the gateway's service in front). Per-step and per-call overheads are the
differences of the mean session times divided by N (or M).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.temporal import DevServer, TemporalOptions, TemporalWorker, temporal_server


class Number(BaseModel):
    x: int


class Answer(BaseModel):
    value: int


def _inc(value: Number, ctx: Any) -> int:
    return value.x + 1


def build(steps: int, calls: int) -> list[AgentConfig]:
    """``stepper``: ``steps`` tool steps then an answer; ``caller``: ``calls`` child calls."""
    inc = define_tool("inc", "Add one.", Number, _inc)
    child = define_agent(
        "child", output_schema=Answer, llm=ScriptedLLM([ScriptedLLM.finish({"value": 1})])
    )
    stepper = define_agent(
        "stepper",
        tools=[inc],
        max_steps=steps + 2,
        llm=ScriptedLLM([*([ScriptedLLM.call("inc", {"x": n})] for n in range(steps)), "stepped"]),
    )
    caller = define_agent(
        "caller",
        tools=[create_sub_agent_tool(child, Number)],
        max_steps=calls + 2,
        llm=ScriptedLLM(
            [*([ScriptedLLM.call("subagent__child", {"x": n})] for n in range(calls)), "called"]
        ),
    )
    return [stepper, caller]


async def _sessions(service: Any, agent_type: str, count: int, prefix: str) -> list[float]:
    times: list[float] = []
    for n in range(count):
        session_id = f"{prefix}-{agent_type}-{n}"
        began = time.perf_counter()
        await service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        async for event in service.stream(session_id):
            if isinstance(event, EndEvent):
                break
        times.append(time.perf_counter() - began)
    return times


async def _measure(quick: bool) -> dict[str, Any]:
    steps, calls, count = (3, 2, 3) if quick else (8, 4, 10)
    agents = build(steps, calls)
    results: dict[str, Any] = {"steps": steps, "calls": calls, "sessions": count}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteEventStore(Path(directory) / "bench.db")
        try:
            async with AgentExecutor(store, agents) as executor:
                builtin_steps = await _sessions(executor.service, "stepper", count, "b")
                builtin_calls = await _sessions(executor.service, "caller", count, "b")
            async with DevServer() as dev:
                options = TemporalOptions(address=dev.address, task_queue="bench")
                async with TemporalWorker(agents, store, options):
                    server = await temporal_server(agents, store, options)
                    async with server:
                        await _sessions(server, "stepper", 1, "warm")  # the worker's first run
                        temporal_steps = await _sessions(server, "stepper", count, "t")
                        temporal_calls = await _sessions(server, "caller", count, "t")
        finally:
            await store.close()
    for name, builtin, temporal, per in (
        ("step", builtin_steps, temporal_steps, steps),
        ("sub-agent call", builtin_calls, temporal_calls, calls),
    ):
        b, t = statistics.mean(builtin), statistics.mean(temporal)
        overhead = (t - b) / per
        print(
            f"per {name}: built-in {b / per * 1000:7.1f} ms, temporal {t / per * 1000:7.1f} ms, "
            f"overhead {overhead * 1000:7.1f} ms ({t / b:.1f}x a session)"
        )
        results[name.replace(" ", "_").replace("-", "_")] = {
            "builtin_ms": round(b / per * 1000, 2),
            "temporal_ms": round(t / per * 1000, 2),
            "overhead_ms": round(overhead * 1000, 2),
        }
    return results


def run_temporal(quick: bool) -> dict[str, Any]:
    """Run the benchmark; print per-step and per-sub-agent-call lines; the JSON summary."""
    summary: dict[str, Any] = anyio.run(_measure, quick)
    return summary
