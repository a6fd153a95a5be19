"""``load`` benchmark: N live sessions in one serving process, one raw-socket SSE reader each.

The server is ``helix-agents serve`` (a subprocess, SQLite store) running an
agent that streams ``TICKS`` chunks ``TICK_GAP`` seconds apart (ideal: first
chunk at 0.45 s, done at 3.6 s). For each N, N clients at once each open a
socket, ``POST /start`` and then ``GET /sse`` on it, and read to ``end``:
plain sockets on uvloop (where installed), since an httpx client is itself
the bottleneck at this scale. Printed per N: sessions completed, time to
the first chunk (from sending the start) and between chunks (p50/p99), the
server's peak RSS, CPU and open descriptors, the server's CPU per session
(the figure a loaded machine does not change much) and the client's (it
must stay well below the server's, or the client is what is measured), the
memory each live session costs (its run and its open stream: the peak RSS
over the RSS before), and the memory each idle session costs a serving
process (the store with N ended sessions served afresh, its RSS over an
empty store's). Each N is bounded in time; what has not ended by then
counts as failed.
"""

from __future__ import annotations

import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
from _proc import cpu_seconds, free_port, helix_serve, open_fds, rss_bytes, server_process
from peer_agents import TICK_GAP, TICKS

SIZES = (100, 300, 1000)
BIG = 3000


class _Reader:
    """One session's client: the times its chunks and its end arrived."""

    __slots__ = ("answered", "chunks", "done", "error", "opened", "started")

    def __init__(self) -> None:
        self.started = 0.0
        self.answered = 0.0  # the start's answer came
        self.opened = 0.0  # the stream's head came
        self.chunks: list[float] = []
        self.done: float | None = None
        self.error: str | None = None


async def _read_head(stream: Any, buffer: bytes) -> tuple[bytes, bytes]:
    while b"\r\n\r\n" not in buffer:
        data = await stream.receive()
        buffer += data
    head, _, rest = buffer.partition(b"\r\n\r\n")
    return head, rest


async def _session(port: int, session_id: str, reader: _Reader) -> None:
    body = msgspec.json.encode({"sessionId": session_id, "agentType": "ticker", "message": "go"})
    request = (
        b"POST /start HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n%s" % (len(body), body)
    )
    try:
        async with await anyio.connect_tcp("127.0.0.1", port) as stream:
            reader.started = time.perf_counter()
            await stream.send(request)
            head, rest = await _read_head(stream, b"")
            if not head.startswith(b"HTTP/1.1 200"):
                reader.error = head.split(b"\r\n", 1)[0].decode()
                return
            length = int(head.lower().split(b"content-length: ", 1)[1].split(b"\r\n", 1)[0])
            while len(rest) < length:
                rest += await stream.receive()
            reader.answered = time.perf_counter()
            await stream.send(
                b"GET /sse?sessionId=%s HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n" % session_id.encode()
            )
            head, pending = await _read_head(stream, rest[length:])
            reader.opened = time.perf_counter()
            if not head.startswith(b"HTTP/1.1 200"):
                reader.error = head.split(b"\r\n", 1)[0].decode()
                return
            while True:
                *frames, pending = pending.split(b"\n\n")
                now = time.perf_counter()
                for frame in frames:
                    if b"event: chunk" in frame and b'"text_delta"' in frame:
                        reader.chunks.append(now)
                    elif b"event: end" in frame:
                        reader.done = now
                        return
                    elif b"event: error" in frame:
                        reader.error = frame.decode(errors="replace")
                        return
                pending += await stream.receive()
    except (OSError, anyio.EndOfStream, anyio.BrokenResourceError) as exc:
        reader.error = f"{type(exc).__name__}: {exc}"


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))]


async def _round(port: int, pid: int, n: int, limit: float) -> dict[str, Any]:
    readers = [_Reader() for _ in range(n)]
    client_cpu = _own_cpu()
    peaks = {"rss": rss_bytes(pid), "fds": open_fds(pid)}
    baseline = rss_bytes(pid)
    cpu = cpu_seconds(pid)
    wall = time.perf_counter()

    async def sample(done: anyio.Event) -> None:
        while not done.is_set():
            peaks["rss"] = max(peaks["rss"], rss_bytes(pid))
            peaks["fds"] = max(peaks["fds"], open_fds(pid))
            with anyio.move_on_after(0.2):
                await done.wait()

    finished = anyio.Event()
    with anyio.move_on_after(limit):
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample, finished)
            async with anyio.create_task_group() as sessions:
                for index, reader in enumerate(readers):
                    sessions.start_soon(_session, port, f"load{n}-{index}", reader)
            finished.set()
    finished.set()
    wall = time.perf_counter() - wall
    cpu = cpu_seconds(pid) - cpu
    client_cpu = _own_cpu() - client_cpu
    completed = [r for r in readers if r.done is not None and len(r.chunks) == TICKS]
    firsts = [r.chunks[0] - r.started for r in readers if r.chunks]
    gaps = [b - a for r in readers for a, b in zip(r.chunks, r.chunks[1:], strict=False)]
    dones = [r.done - r.started for r in completed if r.done is not None]
    errors = sorted({r.error for r in readers if r.error})
    answered = [r.answered - r.started for r in readers if r.answered]
    opened = [r.opened - r.answered for r in readers if r.opened]
    return {
        "n": n,
        "completed": len(completed),
        "failed": n - len(completed),
        "errors": errors[:3],
        "first_p50_s": _pct(firsts, 0.5),
        "first_p99_s": _pct(firsts, 0.99),
        "start_p50_s": _pct(answered, 0.5),
        "start_p99_s": _pct(answered, 0.99),
        "open_p99_s": _pct(opened, 0.99),
        "gap_p50_s": _pct(gaps, 0.5),
        "gap_p99_s": _pct(gaps, 0.99),
        "done_p50_s": statistics.median(dones) if dones else float("nan"),
        "wall_s": wall,
        "server_cpu_s": cpu,
        "server_cores": cpu / wall,
        "server_cpu_ms_per_session": cpu / n * 1000,
        "client_cpu_ms_per_session": client_cpu / n * 1000,
        "rss_peak_mb": peaks["rss"] / 2**20,
        "fds_peak": peaks["fds"],
        "kb_per_live_session": max(peaks["rss"] - baseline, 0) / n / 1024,
    }


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _client_loop() -> dict[str, Any]:
    """anyio's options for the client's loop: uvloop when installed (a cheaper client)."""
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return {}
    return {"use_uvloop": True}


def _settled_rss(args: list[str], port: int, log: Path) -> int:
    """The RSS of a server started with ``args``, once it has started and settled."""
    with server_process(args, port, log) as pid:
        time.sleep(2.0)
        return rss_bytes(pid)


def _raise_descriptor_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def run_load(*, quick: bool = False, big: bool = False) -> dict[str, Any]:
    """Run the load benchmark, print a report, return the summary."""
    sizes = (50, 200) if quick else SIZES + ((BIG,) if big else ())
    _raise_descriptor_limit(max(sizes) * 2 + 256)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="helix-load-") as tmp:
        port = free_port()
        args = helix_serve(f"sqlite:///{tmp}/empty.db", port, target="peer_agents:load_agents")
        empty = _settled_rss(args, port, Path(tmp, "empty.log"))
        for n in sizes:
            port = free_port()
            url = f"sqlite:///{tmp}/load-{n}.db"
            args = helix_serve(url, port, target="peer_agents:load_agents")
            cap = str(n + 200)
            args += ["--max-connections", cap, "--max-streams", cap, "--header-timeout", "60"]
            with server_process(args, port, Path(tmp, f"load-{n}.log")) as pid:
                limit = 30 + n * 0.05
                row = anyio.run(_round, port, pid, n, limit, backend_options=_client_loop())
            # The same store served afresh: its N sessions are idle (ended), and
            # what the serving process keeps for them is its RSS over an empty store's.
            idle = _settled_rss(args, port, Path(tmp, f"load-{n}-idle.log"))
            row["kb_per_idle_session"] = max(idle - empty, 0) / n / 1024
            rows.append(row)
    print(
        f"load: one raw-socket SSE reader per session; {TICKS} chunks {TICK_GAP} s apart "
        f"(ideal: first {TICK_GAP} s, done {TICKS * TICK_GAP:.1f} s); SQLite"
    )
    print(
        f"{'N':>5} {'done':>5} {'fail':>4} {'first p50':>9} {'p99':>6} {'gap p50':>8} "
        f"{'p99':>6} {'done p50':>8} {'cores':>5} {'RSS MB':>7} {'fds':>5} "
        f"{'KB/live':>7} {'KB/idle':>7}"
    )
    for row in rows:
        print(
            f"{row['n']:>5} {row['completed']:>5} {row['failed']:>4} {row['first_p50_s']:>9.2f} "
            f"{row['first_p99_s']:>6.2f} {row['gap_p50_s']:>8.2f} {row['gap_p99_s']:>6.2f} "
            f"{row['done_p50_s']:>8.2f} {row['server_cores']:>5.2f} {row['rss_peak_mb']:>7.0f} "
            f"{row['fds_peak']:>5} {row['kb_per_live_session']:>7.1f} "
            f"{row['kb_per_idle_session']:>7.1f}"
        )
        print(
            f"      start answered p50 {row['start_p50_s']:.2f} s, p99 {row['start_p99_s']:.2f} s;"
            f" stream head after it p99 {row['open_p99_s']:.2f} s; CPU per session: server"
            f" {row['server_cpu_ms_per_session']:.2f} ms, client"
            f" {row['client_cpu_ms_per_session']:.2f} ms"
        )
        if row["errors"]:
            print(f"      errors: {row['errors']}")
    summary: dict[str, Any] = {"bench": "load"}
    for row in rows:
        n = row["n"]
        for key in (
            "completed",
            "failed",
            "first_p50_s",
            "first_p99_s",
            "gap_p99_s",
            "server_cores",
            "server_cpu_ms_per_session",
            "client_cpu_ms_per_session",
            "rss_peak_mb",
            "fds_peak",
            "kb_per_live_session",
            "kb_per_idle_session",
        ):
            value = row[key]
            summary[f"n{n}_{key}"] = round(value, 3) if isinstance(value, float) else value
    return summary
