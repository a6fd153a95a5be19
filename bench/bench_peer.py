"""``peer`` benchmark: the a2a-sdk reference workload, ours against a2a-sdk in one run.

A task streams ``CHUNKS`` text chunks of ~``CHUNK_CHARS`` characters, then
completes. Ours: ``POST /start``, then ``GET /sse`` read to ``end`` (httpx);
the peer: a2a's ``message/stream`` read to the final status with a2a's own
client. Each server runs as a subprocess (``helix-agents serve`` for ours,
uvicorn with its defaults for the peer); the client runs here. Tasks run one
at a time, then 8 at once. Printed: tasks/s, p50/p99 per task, and the
server's CPU per streamed chunk (from ``/proc`` of the server process).
``peer_ratio`` is ours / a2a tasks/s; it is measured only when
``a2a-sdk[http-server]`` is importable (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import contextlib
import importlib.util
import itertools
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx
from _proc import cpu_seconds, free_port, helix_serve, server_process
from peer_agents import CHUNKS

CONCURRENCY = 8

Task = Callable[[int], Awaitable[int]]
Close = Callable[[], Awaitable[None]]


def _have_a2a() -> bool:
    return (
        importlib.util.find_spec("a2a") is not None
        and importlib.util.find_spec("a2a.server.routes") is not None
    )


async def _measure(pid: int, task: Task, tasks: int, concurrency: int) -> dict[str, Any]:
    """One round: ``tasks`` tasks, ``concurrency`` at a time; its rate, times and server CPU."""
    times: list[float] = []
    counter = iter(range(tasks))
    chunks = 0

    async def worker() -> None:
        nonlocal chunks
        for index in counter:
            start = time.perf_counter()
            got = await task(index)
            chunks += got
            times.append(time.perf_counter() - start)

    cpu = cpu_seconds(pid)
    wall = time.perf_counter()
    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(worker)
    wall = time.perf_counter() - wall
    cpu = cpu_seconds(pid) - cpu
    if chunks != tasks * CHUNKS:
        raise RuntimeError(f"expected {tasks * CHUNKS} chunks, read {chunks}")
    return {"tasks_per_s": tasks / wall, "times": times, "cpu": cpu, "wall": wall}


def _summarise(rounds: list[dict[str, Any]]) -> dict[str, float]:
    """The best round's rate (the machine is shared), times and CPU over all rounds."""
    times = sorted(t for r in rounds for t in r["times"])
    cpu = sum(r["cpu"] for r in rounds)
    wall = sum(r["wall"] for r in rounds)
    return {
        "tasks_per_s": max(r["tasks_per_s"] for r in rounds),
        "p50_ms": statistics.median(times) * 1000,
        "p99_ms": times[min(len(times) - 1, int(len(times) * 0.99))] * 1000,
        "cpu_us_per_event": cpu / (len(times) * CHUNKS) * 1e6,
        "server_cores": cpu / wall,
    }


def _ours(base: str, run: str) -> tuple[Close, Task]:
    client = httpx.AsyncClient(
        base_url=base, timeout=60, limits=httpx.Limits(max_keepalive_connections=64)
    )

    numbers = itertools.count()

    async def task(index: int) -> int:
        session_id = f"{run}-{next(numbers)}"
        response = await client.post(
            "/start", json={"sessionId": session_id, "agentType": "writer", "message": "go"}
        )
        response.raise_for_status()
        body = bytearray()
        async with client.stream("GET", "/sse", params={"sessionId": session_id}) as stream:
            async for data in stream.aiter_bytes():  # the stream closes after `end`
                body += data
        if b"event: end" not in body:
            raise RuntimeError(f"task {session_id} did not end: {bytes(body[-300:])!r}")
        return body.count(b'"type":"text_delta"')

    return client.aclose, task


def _a2a(base: str) -> tuple[Close, Task]:
    from a2a_peer import a2a_client, a2a_task

    client = a2a_client(base)

    async def task(index: int) -> int:
        return await a2a_task(client)

    return client.close, task


class _Server:
    """One server under test: its command line and how a client runs a task on it."""

    def __init__(self, name: str, args: list[str], port: int, make: Any) -> None:
        self.name = name
        self.args = args
        self.port = port
        self.make: Callable[[str], tuple[Close, Task]] = make
        self.pid = 0
        self.rounds: dict[str, list[dict[str, Any]]] = {"seq": [], "c8": []}


async def _interleaved(servers: list[_Server], tasks: int, rounds: int, warmup: int) -> None:
    """Every server's rounds in turn, so that a change in the machine's load hits them alike."""
    clients = [server.make(f"http://127.0.0.1:{server.port}") for server in servers]
    try:
        for _, task in clients:
            for index in range(warmup):
                await task(-1 - index)
        for mode, concurrency in (("seq", 1), ("c8", CONCURRENCY)):
            for _ in range(rounds):
                for server, (_, task) in zip(servers, clients, strict=True):
                    result = await _measure(server.pid, task, tasks // rounds, concurrency)
                    server.rounds[mode].append(result)
    finally:
        for close, _ in clients:
            await close()


def run_peer(*, quick: bool = False, loops: tuple[str, ...] = ("default",)) -> dict[str, Any]:
    """Run the peer benchmark, print a report, return the summary."""
    tasks, rounds = (40, 2) if quick else (300, 5)
    servers: list[_Server] = []
    with tempfile.TemporaryDirectory(prefix="helix-peer-") as tmp, contextlib.ExitStack() as stack:
        if _have_a2a():
            port = free_port()
            args = ["a2a_peer.py", "--port", str(port), "--chunks", str(CHUNKS)]
            servers.append(_Server("a2a-sdk", args, port, _a2a))
        for loop in loops:
            for store in ("memory", "sqlite"):
                url = "memory://" if store == "memory" else f"sqlite:///{tmp}/peer-{loop}.db"
                port = free_port()
                flag = None if loop == "default" else loop
                args = helix_serve(url, port, loop=flag, target="peer_agents:agents")
                run = f"{store}{loop}"
                servers.append(
                    _Server(
                        f"helix {store} {loop}",
                        args,
                        port,
                        lambda base, run=run: _ours(base, run),
                    )
                )
        for server in servers:
            log = Path(tmp, server.name.replace(" ", "-") + ".log")
            server.pid = stack.enter_context(server_process(server.args, server.port, log))
        anyio.run(_interleaved, servers, tasks, rounds, 5)
    rows = {server.name: {m: _summarise(r) for m, r in server.rounds.items()} for server in servers}
    print(
        f"peer workload: {CHUNKS} chunks per task, {tasks} tasks one at a time, then "
        f"{CONCURRENCY} at once; servers side by side, {rounds} interleaved rounds each "
        "(tasks/s: the best round; times and CPU: all rounds)"
    )
    print(
        f"{'server':<24} {'mode':<4} {'tasks/s':>8} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'us CPU/event':>13} {'cores':>6}"
    )
    for name, modes in rows.items():
        for mode, row in modes.items():
            print(
                f"{name:<24} {mode:<4} {row['tasks_per_s']:>8.1f} {row['p50_ms']:>8.2f} "
                f"{row['p99_ms']:>8.2f} {row['cpu_us_per_event']:>13.1f} "
                f"{row['server_cores']:>6.2f}"
            )
    summary: dict[str, Any] = {"bench": "peer", "chunks": CHUNKS, "tasks": tasks}
    for name, modes in rows.items():
        key = name.replace(" ", "_").replace("-", "_")
        for mode, row in modes.items():
            summary[f"{key}_{mode}_tasks_per_s"] = round(row["tasks_per_s"], 1)
            summary[f"{key}_{mode}_cpu_us_per_event"] = round(row["cpu_us_per_event"], 1)
            summary[f"{key}_{mode}_p50_ms"] = round(row["p50_ms"], 2)
    ours = rows.get(f"helix sqlite {loops[0]}")
    assert ours is not None
    summary["server_cpu_us_per_event"] = round(ours["seq"]["cpu_us_per_event"], 1)
    if "a2a-sdk" in rows:
        peer = rows["a2a-sdk"]
        for mode in ("seq", "c8"):
            for store in ("memory", "sqlite"):
                ratio = (
                    rows[f"helix {store} {loops[0]}"][mode]["tasks_per_s"]
                    / (peer[mode]["tasks_per_s"])
                )
                summary[f"peer_ratio_{store}_{mode}"] = round(ratio, 2)
        summary["peer_ratio"] = summary["peer_ratio_sqlite_seq"]
        print(f"peer ratio (SQLite, one at a time): {summary['peer_ratio']:.2f}")
    else:
        summary["peer_ratio"] = None
        print("peer ratio: a2a-sdk[http-server] is not installed (pip install -e '.[bench]')")
    return summary
