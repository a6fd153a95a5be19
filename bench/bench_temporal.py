"""``temporal`` benchmark: what running on Temporal costs per agent step and per sub-agent call,
and how soon another worker goes on after a worker's SIGKILL.

Side by side in one run, on the same SQLite store and scripted models: a
plain agent of N steps (each a tool call and a model call) and a parent
making M sequential local sub-agent calls, on the built-in runtime and as
Temporal workflows (a dev server started here, a worker in this process,
the gateway's service in front). Per-step and per-call overheads are the
differences of the mean session times divided by N (or M).

Time to recovery (``_recovery.py``): six sessions run on a worker subprocess;
a second worker starts, the first is SIGKILLed, and the seconds to each
session's first new chunk are printed, at the default heartbeat timeout
(``TemporalOptions.heartbeat_timeout``). What the heartbeats cost: the CPU
the worker and the dev server spend while many sessions sit in a silent
long step (a 30 s tool), over their idle CPU, at that timeout and at 10 s
(the default before issue 34).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import anyio
from _durable import build, report, sessions
from _proc import cpu_seconds
from _recovery import TARGET, Recovery, WorkerProc, measure_recovery, until_logged

from helix_agents import AgentExecutor
from helix_agents.events import Event, ToolStart
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.temporal import DevServer, TemporalOptions, TemporalWorker, temporal_server

OLD_HEARTBEAT_TIMEOUT = 10.0
"""The default before issue 34: what its heartbeats cost, side by side."""


async def _measure(quick: bool) -> dict[str, Any]:
    steps, calls, count = (3, 2, 3) if quick else (8, 4, 10)
    agents = build(steps, calls)
    results: dict[str, Any] = {"steps": steps, "calls": calls, "sessions": count}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteEventStore(Path(directory) / "bench.db")
        try:
            async with AgentExecutor(store, agents) as executor:
                builtin_steps = await sessions(executor.service, "stepper", count, "b")
                builtin_calls = await sessions(executor.service, "caller", count, "b")
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


def _worker_args(address: str, queue: str, db: Path, heartbeat_timeout: float) -> list[str]:
    args = ["worker", TARGET, "--temporal", address, "--task-queue", queue]
    return [*args, "--store", f"sqlite:///{db}", "--heartbeat-timeout", str(heartbeat_timeout)]


def _in_tool(event: Event) -> bool:
    return isinstance(event, ToolStart)


async def _start(server: Any, agent_type: str, session_id: str) -> None:
    request = RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
    await server.start(request)


async def time_to_recovery(directory: Path, heartbeat_timeout: float, name: str) -> Recovery:
    """Six sessions on worker A; worker B starts; A is SIGKILLed: the recovery measured."""
    from durable_agents import agents

    db = directory / f"{name}.db"
    async with DevServer() as dev:
        args = _worker_args(dev.address, name, db, heartbeat_timeout)
        first = WorkerProc(directory / f"{name}-a.log", args)
        second = WorkerProc(directory / f"{name}-b.log", args)
        store = SqliteEventStore(db, poll_interval=0.05)
        try:
            await anyio.to_thread.run_sync(first.start)
            options = TemporalOptions(
                address=dev.address, task_queue=name, heartbeat_timeout=heartbeat_timeout
            )
            async with temporal_server(agents, store, options) as server:

                def kill() -> None:
                    second.start()
                    first.kill()

                return await measure_recovery(
                    store, lambda kind, sid: _start(server, kind, sid), kill, prefix=name
                )
        finally:
            first.stop()
            second.stop()
            await store.close()


async def heartbeat_cost(
    directory: Path, heartbeat_timeout: float, count: int, seconds: float
) -> dict[str, float]:
    """CPU (ms per second) of a worker and the dev server with ``count`` sessions in a silent
    30 s tool, over the same processes idle just before; and per napping step."""
    from durable_agents import agents

    name = f"beat{heartbeat_timeout:g}".replace(".", "_")
    db = directory / f"{name}.db"
    async with DevServer() as dev:
        worker = WorkerProc(
            directory / f"{name}.log", _worker_args(dev.address, name, db, heartbeat_timeout)
        )
        store = SqliteEventStore(db, poll_interval=0.05)
        try:
            await anyio.to_thread.run_sync(worker.start)
            assert worker.process is not None
            assert dev.pid is not None
            pids = {"worker": worker.process.pid, "server": dev.pid}
            options = TemporalOptions(
                address=dev.address, task_queue=name, heartbeat_timeout=heartbeat_timeout
            )
            async with temporal_server(agents, store, options) as server:
                await anyio.sleep(1.0)
                idle = {key: cpu_seconds(pid) for key, pid in pids.items()}
                await anyio.sleep(seconds)
                idle = {key: cpu_seconds(pid) - idle[key] for key, pid in pids.items()}
                ids = [f"{name}-napper-{n}" for n in range(count)]
                for session_id in ids:
                    await _start(server, "napper", session_id)
                with anyio.fail_after(60):
                    for session_id in ids:
                        await until_logged(store, session_id, lambda log_: any(map(_in_tool, log_)))
                await anyio.sleep(1.0)
                busy = {key: cpu_seconds(pid) for key, pid in pids.items()}
                await anyio.sleep(seconds)
                busy = {key: cpu_seconds(pid) - busy[key] for key, pid in pids.items()}
        finally:
            worker.stop()
            await store.close()
    cost = {key: (busy[key] - idle[key]) / seconds * 1000 for key in pids}
    return {
        "worker_ms_per_s": round(cost["worker"], 2),
        "server_ms_per_s": round(cost["server"], 2),
        "per_step_ms_per_s": round((cost["worker"] + cost["server"]) / count, 3),
    }


async def _recoveries(quick: bool) -> dict[str, Any]:
    timeout = TemporalOptions().heartbeat_timeout
    rounds = 1 if quick else 3
    count, seconds = (20, 5.0) if quick else (100, 10.0)
    lines: list[str] = []
    summary: dict[str, Any] = {"heartbeat_timeout_s": timeout, "rounds": []}
    with tempfile.TemporaryDirectory() as directory:
        for n in range(rounds):
            recovery = await time_to_recovery(Path(directory), timeout, f"r{n}")
            lines += recovery.lines(f"a worker's SIGKILL (heartbeat timeout {timeout:g} s)")
            summary["rounds"].append(recovery.summary())
        costs = {}
        for beat in (timeout, OLD_HEARTBEAT_TIMEOUT):
            costs[f"{beat:g}"] = cost = await heartbeat_cost(Path(directory), beat, count, seconds)
            lines.append(
                f"heartbeats, {count} steps silent in a tool (heartbeat timeout {beat:g} s): "
                f"worker {cost['worker_ms_per_s']:.1f} ms/s, dev server "
                f"{cost['server_ms_per_s']:.1f} ms/s of CPU over idle; "
                f"{cost['per_step_ms_per_s']:.3f} ms/s per step"
            )
        summary["heartbeat_cost"] = costs
    for line in lines:
        print(line)
    return summary


def run_temporal(quick: bool) -> dict[str, Any]:
    """Run the benchmark; print per-step, per-call and recovery lines; the JSON summary."""
    summary: dict[str, Any] = anyio.run(_measure, quick)
    summary["time_to_recovery"] = anyio.run(_recoveries, quick)
    return summary
