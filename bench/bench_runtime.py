"""``runtime`` benchmark: sessions/s of a 3-step agent with one local sub-agent.

And ``fork`` (``run_fork``): what a fork costs against the length of its recorded prefix.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    EventStore,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore, SqliteEventStore


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str


class Report(BaseModel):
    summary: str


async def _lookup(value: Query, ctx: Any) -> dict[str, str]:
    return {"answer": f"facts about {value.query}"}


def build_agents() -> AgentConfig:
    """A parent that uses a tool, delegates once, then finishes (3 LLM steps)."""
    researcher = define_agent(
        "researcher",
        output_schema=Findings,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "it works"}, text="Found it.")]),
    )
    return define_agent(
        "coordinator",
        output_schema=Report,
        tools=[
            define_tool("lookup", "Look something up", Query, _lookup),
            create_sub_agent_tool(researcher, Query),
        ],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("lookup", {"query": "anyio"})],
                [ScriptedLLM.call("subagent__researcher", {"query": "anyio"})],
                ScriptedLLM.finish({"summary": "done"}, text="All done."),
            ]
        ),
    )


async def _sessions_per_s(store: EventStore, sessions: int, concurrency: int) -> float:
    agent = build_agents()
    async with AgentExecutor(store, [agent]) as executor:
        limiter = anyio.Semaphore(concurrency)

        async def one(index: int) -> None:
            async with limiter:
                handle = await executor.execute(agent, "go", session_id=f"s-{concurrency}-{index}")
                result = await handle.result()
                assert result.status == "completed", result

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(sessions):
                tg.start_soon(one, index)
        elapsed = time.perf_counter() - start
    _EVENTS.append(
        sum([len(await store.read(sid)) for sid in await store.list_sessions()]) / sessions
    )
    await store.close()
    return sessions / elapsed


_EVENTS: list[float] = []


def run_runtime(*, quick: bool = False) -> dict[str, Any]:
    """Run the runtime benchmark, print a report, return the summary."""
    serial_n = 20 if quick else 100
    parallel_n = 100 if quick else 400
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        for label, concurrency, count in (("1", 1, serial_n), ("100", 100, parallel_n)):
            sqlite_store = SqliteEventStore(os.path.join(tmp, f"rt{label}.db"))
            results[f"sqlite_{label}"] = anyio.run(
                _sessions_per_s, sqlite_store, count, concurrency
            )
            results[f"memory_{label}"] = anyio.run(
                _sessions_per_s, MemoryEventStore(), count, concurrency
            )
    print(f"events per session tree (parent + child logs): {_EVENTS[0]:.0f}")
    for label in ("1", "100"):
        print(
            f"{label:>3} concurrent: sqlite {results[f'sqlite_{label}']:8.1f} sessions/s, "
            f"memory {results[f'memory_{label}']:8.1f} sessions/s, "
            f"ratio {results[f'sqlite_{label}'] / results[f'memory_{label}']:.2f}"
        )
    return {
        "bench": "runtime",
        "sqlite_sessions_per_s_1": round(results["sqlite_1"], 1),
        "sqlite_sessions_per_s_100": round(results["sqlite_100"], 1),
        "memory_sessions_per_s_1": round(results["memory_1"], 1),
        "memory_sessions_per_s_100": round(results["memory_100"], 1),
        "sqlite_vs_memory_ratio_1": round(results["sqlite_1"] / results["memory_1"], 3),
        "sqlite_vs_memory_ratio_100": round(results["sqlite_100"] / results["memory_100"], 3),
        "events_per_session_tree": round(_EVENTS[0], 1) if _EVENTS else None,
    }


# --- fork: its cost against the length of the recorded prefix (specs/branches.md) ---------


def _looping_agent(turns: int) -> AgentConfig:
    """An agent that calls its tool ``turns`` times, one call a turn, then answers."""

    def script(request: Any) -> Any:
        done = sum(1 for m in request.messages if type(m).__name__ == "AssistantMessage")
        if done < turns:
            return [ScriptedLLM.call("lookup", {"query": f"q{done}"})]
        return "done"

    return define_agent(
        "looper",
        tools=[define_tool("lookup", "Look something up", Query, _lookup)],
        llm=ScriptedLLM(script),
        max_steps=turns + 1,
    )


async def _fork_costs(store: EventStore, turns: int) -> dict[str, float]:
    """Record one session of ``turns`` tool turns, then fork it: a copy, and the last turn live."""
    agent = _looping_agent(turns)
    async with AgentExecutor(store, [agent]) as executor:
        start = time.perf_counter()
        await executor.run(agent, "go", session_id="origin")
        recorded = time.perf_counter() - start
        log = await store.read("origin")
        start = time.perf_counter()
        copy = await executor.fork("origin", run=False)
        copied = time.perf_counter() - start
        last_step = max(e.seq for e in log if type(e).__name__ == "StepStarted")
        start = time.perf_counter()
        live = await executor.fork("origin", last_step - 1)
        await executor.wait_idle(live.session_id)
        last_turn = time.perf_counter() - start
        assert (await executor.state(live.session_id)).output == "done"
        assert copy.copied_events == len(log)
    await store.close()
    return {"events": len(log), "record": recorded, "fork": copied, "fork_live": last_turn}


def run_fork(*, quick: bool = False) -> dict[str, Any]:
    """Fork cost against the recorded prefix's length, and against re-executing the prefix."""
    sizes = (12, 120, 1430) if not quick else (12, 120)  # tool turns: ~7 events each
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        for turns in sizes:
            for kind in ("memory", "sqlite"):
                store: EventStore = (
                    MemoryEventStore()
                    if kind == "memory"
                    else SqliteEventStore(os.path.join(tmp, f"fork{turns}.db"))
                )
                cost = anyio.run(_fork_costs, store, turns)
                rows.append({"store": kind, **cost})
    print("store   events  record(s)  fork(ms)  us/event  fork/record  fork+last turn(ms)")
    for row in rows:
        print(
            f"{row['store']:7} {row['events']:6.0f}  {row['record']:9.3f}  "
            f"{row['fork'] * 1000:8.2f}  {row['fork'] * 1e6 / row['events']:8.2f}  "
            f"{row['fork'] / row['record']:11.4f}  {row['fork_live'] * 1000:18.2f}"
        )
    return {
        "bench": "fork",
        "rows": [
            {
                "store": row["store"],
                "events": int(row["events"]),
                "record_s": round(row["record"], 4),
                "fork_ms": round(row["fork"] * 1000, 3),
                "fork_us_per_event": round(row["fork"] * 1e6 / row["events"], 3),
                "fork_vs_record": round(row["fork"] / row["record"], 5),
                "fork_and_last_turn_ms": round(row["fork_live"] * 1000, 3),
            }
            for row in rows
        ],
    }
