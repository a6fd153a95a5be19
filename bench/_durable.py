"""What the durable-engine benchmarks share: the agents, the session timer, the report.

``bench_durable.py`` runs the same two agents (for ``temporal`` and ``dbos``) on the
built-in runtime and on their engine, on the same SQLite store, side by side.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from pydantic import BaseModel

from helix_agents import AgentConfig, create_sub_agent_tool, define_agent, define_tool
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest

__all__ = ["build", "report", "sessions"]


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


async def sessions(service: Any, agent_type: str, count: int, prefix: str) -> list[float]:
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


def report(
    engine: str,
    runs: list[tuple[str, list[float], list[float], int]],
    results: dict[str, Any],
) -> None:
    """Print per-step and per-call lines (built-in against ``engine``); fill ``results``."""
    for name, builtin, durable, per in runs:
        b, t = statistics.mean(builtin), statistics.mean(durable)
        overhead = (t - b) / per
        print(
            f"per {name}: built-in {b / per * 1000:7.1f} ms, {engine} {t / per * 1000:7.1f} ms, "
            f"overhead {overhead * 1000:7.1f} ms ({t / b:.1f}x a session)"
        )
        results[name.replace(" ", "_").replace("-", "_")] = {
            "builtin_ms": round(b / per * 1000, 2),
            f"{engine}_ms": round(t / per * 1000, 2),
            "overhead_ms": round(overhead * 1000, 2),
        }
