"""``nats`` benchmark: a remote sub-agent call over NATS vs its physical floor; 1 vs 2 hosts.

Each part runs against its own ``nats-server -js`` (temporary store dir,
loopback), started and stopped by this run.

- **Floor**: one raw nats-py request/reply to a trivial responder, plus K
  messages published to a JetStream stream (pipelined with ``publish_async``,
  every ack awaited) and read back through a consumer, where K is the number
  of JetStream messages (appends) one of our remote calls stores, counted
  from a real call.
- **Ours**: a parent agent calls a remote sub-agent tool over
  ``NatsRemoteAgentTransport``; the child (10 one-word chunks) runs on a
  ``NatsAgentHost`` in this process; both logs are in JetStream. Each side
  has one connection, its store's (as ``helix-agents host`` wires a host and
  its store; the floor, too, uses one). Timed from the parent's
  ``tool_start`` to its ``tool_end`` (event timestamps).
- **Throughput**: sessions/s of the child agent started through the
  transport (start, then its stream read to ``end``) by one client with many
  sessions in flight, against one ``helix-agents host`` subprocess, then two
  (``--lease-ttl 60``, so no orphan scan falls inside the run). The report
  shows how many cores each process kept busy: the client, the hosts and
  nats-server share the machine. ``consumers_left``: the consumers on the
  stream once the one-host run is over (its client gone, the hosts still up,
  ``WATCH_LINGER`` past).
- **New tails/s**: streams of finished sessions opened and read to ``end``
  one after another through the transport (each a new tail of the store).
- **Orphan scan**: 2,000 finished sessions (500 with ``--quick``) and 3
  running ones a live host holds: a host's first round sweeps every log (its
  running index is new), its next reads the index (``server/fleet/running.py``).
"""

from __future__ import annotations

import contextlib
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import nats
from _nats import cpu_seconds, nats_server, raw_floor, stop_process
from nats_agents import CHUNKS, Found, Query, researcher
from pydantic import BaseModel

from helix_agents import AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.events import (
    Completed,
    HostClaimed,
    RunStarted,
    SessionCreated,
    ToolEnd,
    ToolStart,
)
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.server.fleet.host import NatsAgentHost
from helix_agents.server.fleet.leases import DEFAULT_LEASE_TTL, LEASE_BUCKET, lease_key
from helix_agents.server.fleet.runtime import NatsRuntime
from helix_agents.stores.jetstream.store import WATCH_LINGER, JetStreamEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

BENCH_DIR = Path(__file__).resolve().parent / "served"
CALL_STREAM = "BENCH_CALLS"
HOST_LEASE_TTL = 60.0
"""The hosts' lease TTL: their orphan scan (every TTL/3) stays out of the run."""


class _Out(BaseModel):
    summary: str


# --- our remote call ---------------------------------------------------------------------------


def _parent(transport: NatsRemoteAgentTransport) -> Any:
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="research",
        input_schema=Query,
        output_schema=Found,
        transport=transport,
        remote_agent_type="researcher",
    )
    return define_agent(
        "parent",
        output_schema=_Out,
        tools=[tool],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__researcher", {"query": "q"})],
                ScriptedLLM.finish({"summary": "ok"}),
            ]
        ),
    )


async def _stream_state(nc: Any, stream: str) -> tuple[int, int]:
    state = (await nc.jsm().stream_info(stream)).state
    return state.messages, state.bytes


async def _remote_calls(url: str, repeats: int) -> tuple[list[float], int, int, int]:
    """Call times; messages and bytes a call stores in the log stream (median call); KV puts."""
    host_store = await JetStreamEventStore.connect(url, stream=CALL_STREAM)
    parent_store = await JetStreamEventStore.connect(url, stream=CALL_STREAM)
    # One connection per side, as ``helix-agents host`` wires its host and store.
    host_nc = host_store.connection
    client_nc = parent_store.connection
    transport = NatsRemoteAgentTransport(client_nc, parent_store, retry_base_delay=0.05)
    parent = _parent(transport)
    fleet = NatsRuntime(host_nc, lease_ttl=HOST_LEASE_TTL)
    server = AgentServer([researcher(CHUNKS)], host_store, runtime=fleet)
    times: list[float] = []
    counts: list[tuple[int, int, int]] = []  # per call: messages, bytes, KV puts
    try:
        async with (
            NatsAgentHost(server),
            AgentExecutor(parent_store, [parent]) as executor,
        ):
            for index in range(repeats + 1):  # the first call warms up
                before, before_bytes = await _stream_state(client_nc, CALL_STREAM)
                kv_before, _ = await _stream_state(client_nc, f"KV_{LEASE_BUCKET}")
                handle = await executor.execute(parent, "go", session_id=f"p{index}")
                result = await handle.result()
                assert result.status == "completed", result
                after, after_bytes = await _stream_state(client_nc, CALL_STREAM)
                kv_after, _ = await _stream_state(client_nc, f"KV_{LEASE_BUCKET}")
                counts.append((after - before, after_bytes - before_bytes, kv_after - kv_before))
                log = await parent_store.read(f"p{index}")
                start = next(e.ts for e in log if isinstance(e, ToolStart))
                end = next(e.ts for e in log if isinstance(e, ToolEnd))
                if index > 0:
                    times.append(end - start)
    finally:
        await parent_store.close()
        await host_store.close()
    # How many messages a call stores depends a little on timing (how events batch).
    counts.sort()
    appends, size, kv_puts = counts[len(counts) // 2]
    return times, appends, size, kv_puts


# --- throughput against host subprocesses ------------------------------------------------------


def _start_host(
    url: str,
    log_path: Path,
    *,
    target: str = "nats_agents:agents",
    lease_ttl: float | None = HOST_LEASE_TTL,
) -> subprocess.Popen[bytes]:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")])
    )
    with open(log_path, "wb") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from helix_agents.server.cli.main import main; sys.exit(main())",
                "host",
                target,
                "--nats",
                url,
                *(["--lease-ttl", str(lease_ttl)] if lease_ttl is not None else []),
            ],
            cwd=BENCH_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 30
    while b"helix-agents: hosting" not in log_path.read_bytes():
        if process.poll() is not None or time.monotonic() > deadline:
            stop_process(process)
            raise RuntimeError(f"host did not start:\n{log_path.read_text(errors='replace')}")
        time.sleep(0.05)
    return process


async def _sessions_per_s(
    url: str, tag: str, sessions: int, concurrency: int, pids: dict[str, int]
) -> tuple[float, dict[str, float]]:
    """Sessions/s (start each through the transport, read its stream to the end); CPU used."""
    store = await JetStreamEventStore.connect(url)  # the hosts' default stream
    nc = await nats.connect(url)
    transport = NatsRemoteAgentTransport(nc, store, timeout=30)
    limiter = anyio.Semaphore(concurrency)
    failures: list[str] = []

    async def one(session_id: str) -> None:
        async with limiter:
            await transport.start(
                RemoteStartRequest(session_id=session_id, agent_type="researcher", message="go")
            )
            last = None
            async for event in transport.stream(session_id):
                last = event
            if not isinstance(last, EndEvent):
                failures.append(session_id)

    async def batch(prefix: str, count: int) -> float:
        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for index in range(count):
                tg.start_soon(one, f"{prefix}-{index}")
        return time.perf_counter() - start

    try:
        await batch(f"{tag}-warm", concurrency)
        before = {name: cpu_seconds(pid) for name, pid in pids.items()}
        client_before = time.process_time()
        elapsed = await batch(tag, sessions)
        cpu = {name: cpu_seconds(pid) - before[name] for name, pid in pids.items()}
        cpu["client"] = time.process_time() - client_before
    finally:
        await store.close()
    try:
        await anyio.sleep(WATCH_LINGER + 1.0)  # let the hosts' last consumers go
        cpu["consumers_left"] = (await nc.jsm().stream_info("HELIX_EVENTS")).state.consumer_count
    finally:
        await nc.close()
    if failures:
        raise RuntimeError(f"{len(failures)} sessions did not end: {failures[:3]}")
    left = cpu.pop("consumers_left")
    rates = {name: used / elapsed for name, used in cpu.items()}
    rates["consumers_left"] = left
    return sessions / elapsed, rates


async def _new_tails_per_s(url: str, tails: int) -> float:
    """Streams of finished sessions opened and read to ``end`` one after another."""
    store = await JetStreamEventStore.connect(url, stream="BENCH_TAILS")
    nc = await nats.connect(url)
    transport = NatsRemoteAgentTransport(nc, store)
    sessions = [f"t{n}" for n in range(50)]
    try:
        for sid in sessions:
            events = [
                SessionCreated(session_id=sid, seq=1, ts=1.0, agent_type="researcher", run_id="r"),
                RunStarted(session_id=sid, seq=2, ts=1.0, run_id="r"),
                Completed(session_id=sid, seq=3, ts=1.0, output={"findings": "f"}),
            ]
            await store.append(sid, events, 0)
        start = time.perf_counter()
        for n in range(tails):
            last = None
            async for event in transport.stream(sessions[n % len(sessions)]):
                last = event
            assert isinstance(last, EndEvent), last
        elapsed = time.perf_counter() - start
    finally:
        await nc.close()
        await store.close()
    return tails / elapsed


async def _await_claim(url: str, session_id: str, started: bool) -> float:
    """Start ``session_id`` (a napper) or wait for its claim by another host; the time then."""
    store = await JetStreamEventStore.connect(url)
    nc = await nats.connect(url)
    try:
        transport = NatsRemoteAgentTransport(nc, store, timeout=30)
        if not started:
            await transport.start(
                RemoteStartRequest(session_id=session_id, agent_type="napper", message="nap")
            )
        while True:
            log = await store.read(session_id)
            if not started and any(isinstance(event, ToolStart) for event in log):
                return time.monotonic()  # in its tool on the first host
            if started and any(isinstance(event, HostClaimed) for event in log):
                return time.monotonic()
            await anyio.sleep(0.02)  # polling the log: a measurement, not a test
    finally:
        await nc.close()
        await store.close()


async def _scan_cost(url: str, finished: int, running: int) -> tuple[float, float, int]:
    """One orphan scan's seconds: a full sweep of every log, then a pass over the running index.

    ``finished`` completed sessions and ``running`` ones that a live host
    ("other") holds, on a stream of their own; a host in this process scans
    (its first round sweeps, as its bucket is new; the next reads the index).
    The index pass's sessions looked at are returned too.
    """
    store = await JetStreamEventStore.connect(url, stream="BENCH_SCAN")
    nc = await nats.connect(url)
    limiter = anyio.Semaphore(64)

    async def write(sid: str, done: bool) -> None:
        events: list[Any] = [
            SessionCreated(session_id=sid, seq=1, ts=1.0, agent_type="researcher", run_id="r"),
            RunStarted(session_id=sid, seq=2, ts=1.0, run_id="r"),
        ]
        if done:
            events.append(Completed(session_id=sid, seq=3, ts=1.0, output={"findings": "f"}))
        async with limiter:
            await store.append(sid, events, 0)

    try:
        async with anyio.create_task_group() as tg:
            for n in range(finished):
                tg.start_soon(write, f"done-{n}", True)
            for n in range(running):
                tg.start_soon(write, f"run-{n}", False)
        fleet = NatsRuntime(nc, lease_ttl=HOST_LEASE_TTL)
        server = AgentServer([researcher(CHUNKS)], store, recover=False, runtime=fleet)
        async with NatsAgentHost(server) as host:
            leases = await nc.jetstream().key_value(LEASE_BUCKET)
            for n in range(running):
                await leases.put(lease_key(f"run-{n}"), b"other")  # a live host holds them
            began = time.perf_counter()
            assert await host.take_over_orphans() == []
            swept = time.perf_counter() - began
            began = time.perf_counter()
            assert await host.take_over_orphans() == []
            indexed = time.perf_counter() - began
            looked_at = host.takeover.looked_at
            for n in range(running):
                await leases.delete(lease_key(f"run-{n}"))
    finally:
        await nc.close()
        await store.close()
    return swept, indexed, looked_at


def _time_to_takeover(tmp: Path) -> float:
    """Seconds from a host's SIGKILL to another host's claim of its running session."""
    with nats_server() as (url, _):
        first = _start_host(url, tmp / "takeover-a.log", target=_NAPPING, lease_ttl=None)
        second: subprocess.Popen[bytes] | None = None
        try:
            anyio.run(_await_claim, url, "takeover-1", False)
            second = _start_host(url, tmp / "takeover-b.log", target=_NAPPING, lease_ttl=None)
            first.kill()
            killed = time.monotonic()
            claimed = anyio.run(_await_claim, url, "takeover-1", True)
            return claimed - killed
        finally:
            stop_process(first)
            if second is not None:
                stop_process(second)


_NAPPING = "nats_agents:napping_agents"


def _with_hosts(
    tmp: Path, count: int, sessions: int, concurrency: int
) -> tuple[float, dict[str, float]]:
    """Sessions/s against ``count`` host subprocesses; each process's CPU use (cores busy).

    Each configuration gets a fresh server, so one's consumers (or their
    absence) never count in the next's ``consumers_left``.
    """
    hosts: list[subprocess.Popen[bytes]] = []
    with nats_server() as (url, server_pid):
        try:
            for index in range(count):
                hosts.append(_start_host(url, tmp / f"host{count}-{index}.log"))
            pids = {f"host{index + 1}": process.pid for index, process in enumerate(hosts)}
            pids["nats-server"] = server_pid
            return anyio.run(_sessions_per_s, url, f"h{count}", sessions, concurrency, pids)
        finally:
            for process in hosts:
                stop_process(process)


def run_nats(*, quick: bool = False) -> dict[str, Any]:
    """Run the nats benchmark, print a report, return the summary."""
    calls = 10 if quick else 50
    sessions = 100 if quick else 400
    rounds = 1 if quick else 3
    concurrency = 32
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        with nats_server() as (url, _):
            with contextlib.redirect_stdout(io.StringIO()):  # the host prints each session
                call_times, appends, size, kv_puts = anyio.run(_remote_calls, url, calls)
            payload_size = max(1, size // max(appends, 1))
            raw_times = anyio.run(raw_floor, url, appends, payload_size, calls)
            new_tails = anyio.run(_new_tails_per_s, url, 500 if quick else 2000)
            scanned = 500 if quick else 2000
            swept, indexed, looked_at = anyio.run(_scan_cost, url, scanned, 3)
        takeover = _time_to_takeover(Path(tmp))
        # Best of alternating rounds: the runs are short and the machine is shared.
        one_host, one_cpu = two_hosts, two_cpu = 0.0, {}
        consumers_left = 0
        for _ in range(rounds):
            rate, cpu = _with_hosts(Path(tmp), 1, sessions, concurrency)
            consumers_left = max(consumers_left, int(cpu.pop("consumers_left")))
            if rate > one_host:
                one_host, one_cpu = rate, cpu
            rate, cpu = _with_hosts(Path(tmp), 2, sessions, concurrency)
            cpu.pop("consumers_left")
            if rate > two_hosts:
                two_hosts, two_cpu = rate, cpu
    raw_p50 = statistics.median(raw_times)
    call_p50 = statistics.median(call_times)
    rows = [
        ("appends (JetStream messages) per call", f"{appends} ({size:,} bytes in the stream)"),
        ("  plus lease KV puts per call", f"{kv_puts}"),
        (
            f"floor: request/reply + {appends} pipelined acked publishes read back, p50",
            f"{raw_p50 * 1000:.2f} ms",
        ),
        (f"remote sub-agent call ({CHUNKS} chunks) over NATS, p50", f"{call_p50 * 1000:.2f} ms"),
        ("remote call ratio", f"{call_p50 / raw_p50:.2f}"),
        (
            f"sessions/s, one host process ({concurrency} in flight, best of {rounds})",
            f"{one_host:,.0f}",
        ),
        ("sessions/s, two host processes", f"{two_hosts:,.0f}"),
        ("two-host speedup", f"{two_hosts / one_host:.2f} (on {os.cpu_count()} cores)"),
        (f"consumers left on the stream after {sessions} sessions, one host", f"{consumers_left}"),
        ("new tails/s (finished sessions streamed one after another)", f"{new_tails:,.0f}"),
        (
            f"orphan scan, full sweep of {scanned + 3:,} sessions (first round)",
            f"{swept * 1000:.0f} ms",
        ),
        (
            f"orphan scan pass, running index ({looked_at} sessions looked at)",
            f"{indexed * 1000:.1f} ms",
        ),
        (
            f"time to takeover after a host's SIGKILL (lease TTL {DEFAULT_LEASE_TTL:g} s)",
            f"{takeover:.2f} s",
        ),
    ]
    for label, value in rows:
        print(f"{label + ':':<64} {value}")
    for label, cpu in (("one host", one_cpu), ("two hosts", two_cpu)):
        busy = ", ".join(f"{name} {used:.2f}" for name, used in cpu.items())
        print(f"  cores busy, {label}: {busy} (total {sum(cpu.values()):.2f})")
    return {
        "bench": "nats",
        "remote_call_ratio": round(call_p50 / raw_p50, 3),
        "two_host_speedup": round(two_hosts / one_host, 3),
        "raw_floor_p50_ms": round(raw_p50 * 1000, 3),
        "remote_call_p50_ms": round(call_p50 * 1000, 3),
        "appends_per_call": appends,
        "sessions_per_s_one_host": round(one_host, 1),
        "sessions_per_s_two_hosts": round(two_hosts, 1),
        "consumers_left": consumers_left,
        "new_tails_per_s": round(new_tails, 1),
        "time_to_takeover_s": round(takeover, 2),
        "scan_sweep_ms": round(swept * 1000, 1),
        "scan_index_pass_ms": round(indexed * 1000, 2),
        "scan_index_sessions_looked_at": looked_at,
    }
