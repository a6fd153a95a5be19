"""``dbos`` benchmark: what running on DBOS costs per agent step and per sub-agent call,
and how soon sessions go on after their process's SIGKILL.

Side by side in one run, on the same SQLite store and scripted models: a
plain agent of N steps (each a tool call and a model call) and a parent
making M sequential local sub-agent calls, on the built-in runtime and as
DBOS workflows (embedded: a SQLite system database, the workflows run in
this process, the gateway's service in front). Per-step and per-call
overheads are the differences of the mean session times divided by N (or M).

Time to recovery (``_recovery.py``): six sessions run on ``serve --dbos``;
on Postgres (a private cluster, ``tests/postgres_cluster.py``; skipped
without its binaries) a ``worker --dbos`` starts and the gateway is
SIGKILLed: the worker takes its workflows over after the silence the gateway
declared (``DbosOptions.takeover_after``); on SQLite the gateway is
SIGKILLed and started again, and recovers them at launch.
"""

from __future__ import annotations

import shutil
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import anyio
from _durable import build, report, sessions
from _recovery import TARGET, Recovery, WorkerProc, measure_recovery

from helix_agents import AgentExecutor
from helix_agents.dbos import DbosOptions, dbos_server
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport

# tests/ is no package: put its folder on the path, after ours, to import the launcher.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from postgres_cluster import PostgresCluster, postgres_bin


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


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def time_to_recovery(directory: Path, system_database: str, name: str) -> Recovery:
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


async def _recoveries(quick: bool) -> dict[str, Any]:
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
                    recovery = await time_to_recovery(root, url, f"p{n}")
                    lines += recovery.lines(
                        f"the gateway's SIGKILL, a worker taking over (Postgres, "
                        f"takeover after {after:g} s)"
                    )
                    summary["postgres"]["rounds"].append(recovery.summary())
            finally:
                await anyio.to_thread.run_sync(cluster.stop)
                shutil.rmtree(place, ignore_errors=True)
        recovery = await time_to_recovery(root, f"sqlite:///{root / 'dbos-r.sqlite'}", "s")
        lines += recovery.lines("the gateway's SIGKILL and restart (SQLite)")
        summary["sqlite_restart"] = recovery.summary()
    for line in lines:
        print(line)
    return summary


def run_dbos(quick: bool) -> dict[str, Any]:
    """Run the benchmark; print per-step, per-call and recovery lines; the JSON summary."""
    summary: dict[str, Any] = anyio.run(_measure, quick)
    summary["time_to_recovery"] = anyio.run(_recoveries, quick)
    return summary
