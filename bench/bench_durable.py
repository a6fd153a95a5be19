"""``temporal`` and ``dbos`` benchmarks: what running on a durable engine costs per agent step
and per sub-agent call, beside Pydantic AI on the same engine.

Per agent step, side by side (``sidebyside/``, issue 35): helix's built-in
runtime, Pydantic AI plain, helix on the engine, Pydantic AI's ``DBOSAgent`` or
``TemporalAgent``, and the engine alone, each contender in a process of its
own, interleaved rounds; the durable overheads, the ratios the issue targets,
helix's durable step itemized (and on Temporal the history per step); DBOS on
a SQLite system database and on Postgres.

Per sub-agent call, on the same SQLite store and scripted models: a parent
making M sequential local sub-agent calls, on the built-in runtime and as
the engine's workflows: Temporal (a dev server started here, a worker in
this process, the gateway's service in front), or DBOS (embedded: a SQLite
system database, the workflows run in this process, the gateway's service in
front). The per-call overhead is the difference of the mean session times
divided by M.

Time to recovery (``_durable.py``'s recovery half): six sessions run; on
Temporal a second worker starts and the first is SIGKILLed, at the default
heartbeat timeout (``TemporalOptions.heartbeat_timeout``), and what the
heartbeats cost is measured beside the old 10 s timeout; on DBOS/Postgres (a
private cluster, ``tests/postgres_cluster.py``; skipped without its
binaries) a ``worker --dbos`` starts and the gateway is SIGKILLed (the worker
takes its workflows over after ``DbosOptions.takeover_after``); on SQLite the
gateway is SIGKILLed and started again. The seconds to each session's first
new chunk are printed.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _durable import (
    TARGET,
    Recovery,
    WorkerProc,
    build,
    measure_recovery,
    report,
    sessions,
    until_logged,
)
from _proc import cpu_seconds
from sidebyside.compare import run_side_by_side

from helix_agents import AgentExecutor
from helix_agents.events import Event, ToolStart
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport

# tests/ is no package: put its folder on the path, after ours, to import the launcher.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from postgres_cluster import PostgresCluster, postgres_bin

OLD_HEARTBEAT_TIMEOUT = 10.0
"""The Temporal default before issue 34: what its heartbeats cost, side by side."""


async def _measure_temporal(quick: bool) -> dict[str, Any]:
    calls, count = (2, 3) if quick else (4, 10)
    agents = build(1, calls)
    results: dict[str, Any] = {"calls": calls, "sessions": count}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteEventStore(Path(directory) / "bench.db")
        try:
            async with AgentExecutor(store, agents) as executor:
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
                        await sessions(server, "caller", 1, "warm")  # the worker's first run
                        temporal_calls = await sessions(server, "caller", count, "t")
        finally:
            await store.close()
    report(
        "temporal",
        [("sub-agent call", builtin_calls, temporal_calls, calls)],
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


async def _temporal_recovery(directory: Path, heartbeat_timeout: float, name: str) -> Recovery:
    """Six sessions on worker A; worker B starts; A is SIGKILLed: the recovery measured."""
    from durable_agents import agents

    from helix_agents.temporal import DevServer, TemporalOptions, temporal_server

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

    from helix_agents.temporal import DevServer, TemporalOptions, temporal_server

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


async def _temporal_recoveries(quick: bool) -> dict[str, Any]:
    from helix_agents.temporal import TemporalOptions

    timeout = TemporalOptions().heartbeat_timeout
    rounds = 1 if quick else 3
    count, seconds = (20, 5.0) if quick else (100, 10.0)
    lines: list[str] = []
    summary: dict[str, Any] = {"heartbeat_timeout_s": timeout, "rounds": []}
    with tempfile.TemporaryDirectory() as directory:
        for n in range(rounds):
            recovery = await _temporal_recovery(Path(directory), timeout, f"r{n}")
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
    """Run the benchmark; print the side-by-side, per-call and recovery lines; the JSON summary."""
    summary: dict[str, Any] = {"side_by_side": run_side_by_side("temporal", quick)}
    summary.update(anyio.run(_measure_temporal, quick))
    summary["time_to_recovery"] = anyio.run(_temporal_recoveries, quick)
    return summary


async def _measure_dbos(quick: bool) -> dict[str, Any]:
    calls, count = (2, 3) if quick else (4, 10)
    agents = build(1, calls)
    results: dict[str, Any] = {"calls": calls, "sessions": count}
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteEventStore(Path(directory) / "bench.db")
        try:
            async with AgentExecutor(store, agents) as executor:
                builtin_calls = await sessions(executor.service, "caller", count, "b")
            from helix_agents.dbos import DbosOptions, dbos_server

            options = DbosOptions(system_database=f"sqlite:///{Path(directory) / 'dbos.sqlite'}")
            async with dbos_server(agents, store, options) as server:
                await sessions(server, "caller", 1, "warm")  # the first run
                dbos_calls = await sessions(server, "caller", count, "d")
        finally:
            await store.close()
    report(
        "dbos",
        [("sub-agent call", builtin_calls, dbos_calls, calls)],
        results,
    )
    return results


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _dbos_recovery(directory: Path, system_database: str, name: str) -> Recovery:
    """Six sessions on ``serve --dbos``; Postgres: a worker starts and the gateway is
    SIGKILLed; SQLite: the gateway is SIGKILLed and started again."""
    db = directory / f"{name}.db"
    port = _port()
    engine = ["--dbos", system_database, "--store", f"sqlite:///{db}"]
    serve = ["serve", TARGET, *engine, "--host", "127.0.0.1", "--port", str(port)]
    gateway = WorkerProc(directory / f"{name}-serve.log", serve, b"helix-agents: serving", port)
    worker = WorkerProc(directory / f"{name}-worker.log", ["worker", TARGET, *engine])
    postgres = system_database.startswith("postgresql")
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        await anyio.to_thread.run_sync(gateway.start)
        async with HttpRemoteAgentTransport(f"http://127.0.0.1:{port}") as client:

            async def start(agent_type: str, session_id: str) -> None:
                request = RemoteStartRequest(
                    session_id=session_id, agent_type=agent_type, message="go"
                )
                await client.start(request)

            def kill() -> None:
                if postgres:
                    worker.start()
                gateway.kill()

            return await measure_recovery(
                store, start, kill, prefix=name, then=None if postgres else gateway.start
            )
    finally:
        gateway.stop()
        worker.stop()
        await store.close()


async def _dbos_recoveries(quick: bool) -> dict[str, Any]:
    from helix_agents.dbos import DbosOptions

    rounds = 1 if quick else 3
    lines: list[str] = []
    summary: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        binaries = postgres_bin()
        if binaries is None:
            lines.append("time to recovery on Postgres: skipped (no PostgreSQL binaries)")
        else:
            # Not under a 0700 temporary folder: as root, the server runs as postgres.
            place = Path(tempfile.mkdtemp(prefix="helix-bench-pg-"))
            cluster = PostgresCluster(place, binaries)
            await anyio.to_thread.run_sync(cluster.start)
            try:
                after = DbosOptions().takeover_after
                summary["postgres"] = {"takeover_after_s": after, "rounds": []}
                for n in range(rounds):
                    url = cluster.url.rsplit("/", 1)[0] + f"/bench_dbos_{n}"
                    recovery = await _dbos_recovery(root, url, f"p{n}")
                    lines += recovery.lines(
                        f"the gateway's SIGKILL, a worker taking over (Postgres, "
                        f"takeover after {after:g} s)"
                    )
                    summary["postgres"]["rounds"].append(recovery.summary())
            finally:
                await anyio.to_thread.run_sync(cluster.stop)
                shutil.rmtree(place, ignore_errors=True)
        recovery = await _dbos_recovery(root, f"sqlite:///{root / 'dbos-r.sqlite'}", "s")
        lines += recovery.lines("the gateway's SIGKILL and restart (SQLite)")
        summary["sqlite_restart"] = recovery.summary()
    for line in lines:
        print(line)
    return summary


def run_dbos(quick: bool) -> dict[str, Any]:
    """Run the benchmark; print the side-by-side, per-call and recovery lines; the JSON summary."""
    summary: dict[str, Any] = {"side_by_side": run_side_by_side("dbos", quick)}
    summary.update(anyio.run(_measure_dbos, quick))
    summary["time_to_recovery"] = anyio.run(_dbos_recoveries, quick)
    return summary
