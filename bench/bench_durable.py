"""``temporal`` and ``dbos`` benchmarks: what running on a durable engine costs per agent step
and per sub-agent call.

Side by side in one run, on the same SQLite store and scripted models: a
plain agent of N steps (each a tool call and a model call) and a parent
making M sequential local sub-agent calls, on the built-in runtime and as
the engine's workflows: Temporal (a dev server started here, a worker in
this process, the gateway's service in front), or DBOS (embedded: a SQLite
system database, the workflows run in this process, the gateway's service in
front). Per-step and per-call overheads are the differences of the mean
session times divided by N (or M).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from _durable import build, report, sessions

from helix_agents import AgentExecutor
from helix_agents.stores import SqliteEventStore


async def _measure_temporal(quick: bool) -> dict[str, Any]:
    steps, calls, count = (3, 2, 3) if quick else (8, 4, 10)
    agents = build(steps, calls)
    results: dict[str, Any] = {"steps": steps, "calls": calls, "sessions": count}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteEventStore(Path(directory) / "bench.db")
        try:
            async with AgentExecutor(store, agents) as executor:
                builtin_steps = await sessions(executor.service, "stepper", count, "b")
                builtin_calls = await sessions(executor.service, "caller", count, "b")
            from helix_agents.temporal import (
                DevServer,
                TemporalOptions,
                TemporalWorker,
                temporal_server,
            )

            async with DevServer() as dev:
                options = TemporalOptions(address=dev.address, task_queue="bench")
                async with TemporalWorker(agents, store, options):
                    server = temporal_server(agents, store, options)
                    async with server:
                        await sessions(server, "stepper", 1, "warm")  # the worker's first run
                        temporal_steps = await sessions(server, "stepper", count, "t")
                        temporal_calls = await sessions(server, "caller", count, "t")
        finally:
            await store.close()
    report(
        "temporal",
        [
            ("step", builtin_steps, temporal_steps, steps),
            ("sub-agent call", builtin_calls, temporal_calls, calls),
        ],
        results,
    )
    return results


def run_temporal(quick: bool) -> dict[str, Any]:
    """Run the benchmark; print per-step and per-sub-agent-call lines; the JSON summary."""
    summary: dict[str, Any] = anyio.run(_measure_temporal, quick)
    return summary


async def _measure_dbos(quick: bool) -> dict[str, Any]:
    steps, calls, count = (3, 2, 3) if quick else (8, 4, 10)
    agents = build(steps, calls)
    results: dict[str, Any] = {"steps": steps, "calls": calls, "sessions": count}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteEventStore(Path(directory) / "bench.db")
        try:
            async with AgentExecutor(store, agents) as executor:
                builtin_steps = await sessions(executor.service, "stepper", count, "b")
                builtin_calls = await sessions(executor.service, "caller", count, "b")
            from helix_agents.dbos import DbosOptions, dbos_server

            options = DbosOptions(system_database=f"sqlite:///{Path(directory) / 'dbos.sqlite'}")
            async with dbos_server(agents, store, options) as server:
                await sessions(server, "stepper", 1, "warm")  # the first run
                dbos_steps = await sessions(server, "stepper", count, "d")
                dbos_calls = await sessions(server, "caller", count, "d")
        finally:
            await store.close()
    report(
        "dbos",
        [
            ("step", builtin_steps, dbos_steps, steps),
            ("sub-agent call", builtin_calls, dbos_calls, calls),
        ],
        results,
    )
    return results


def run_dbos(quick: bool) -> dict[str, Any]:
    """Run the benchmark; print per-step and per-sub-agent-call lines; the JSON summary."""
    summary: dict[str, Any] = anyio.run(_measure_dbos, quick)
    return summary
