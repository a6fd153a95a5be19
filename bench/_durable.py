"""What the durable-engine benchmarks share: the agents, the session timer, the report,
and the time to recovery.

``bench_durable.py`` runs the same two agents (for ``temporal`` and ``dbos``) on the
built-in runtime and on their engine, on the same SQLite store, side by side.

Time to recovery: a worker running sessions is SIGKILLed; how soon another goes
on. The sessions are ``served/durable_agents.py``'s (a chunk every 0.1 s: a long
tool, a model streaming, many short steps), run by worker subprocesses on one
SQLite store; once each has streamed a few chunks, a second worker is up and the
first is SIGKILLed. The figure is, per session, the seconds from the kill to the
first chunk appended after it (read from the store: the killed process writes
nothing after its death), and the seconds until every session has completed.
"""

from __future__ import annotations

import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from _proc import SERVED
from pydantic import BaseModel

from helix_agents import AgentConfig, create_sub_agent_tool, define_agent, define_tool
from helix_agents.events import Completed, CustomChunk, Event, TextDelta
from helix_agents.log.store import EventStore
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest

__all__ = [
    "SESSIONS",
    "TARGET",
    "Recovery",
    "WorkerProc",
    "build",
    "measure_recovery",
    "report",
    "sessions",
    "until_logged",
]


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


# --- time to recovery ---------------------------------------------------------------

SESSIONS = (("ticker", 2), ("streamer", 2), ("looper", 2))
"""The agent types started, and how many sessions of each (six, as in the issue's probe)."""
TARGET = "durable_agents:agents"
READY = b"helix-agents: worker for"


class WorkerProc:
    """``helix-agents ARGS`` as a subprocess (``bench/served``): a worker, or ``serve``.

    Ready once its output shows ``ready`` (and, given ``port``, it listens there).
    """

    def __init__(
        self, log: Path, args: list[str], ready: bytes = READY, port: int | None = None
    ) -> None:
        self.log = log
        self.args = args
        self.ready = ready
        self.port = port
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait (bounded) for its readiness line."""
        env = dict(os.environ, PYTHONPATH=str(SERVED), PYTHONUNBUFFERED="1")
        command = [sys.executable, "-m", "helix_agents.server", *self.args]
        with self.log.open("ab") as out:
            offset = out.tell()
            self.process = subprocess.Popen(
                command, cwd=SERVED, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out
            )
        deadline = time.monotonic() + timeout
        while not self._ready(offset):
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"worker did not start: {self.log.read_text()[-3000:]}")
            time.sleep(0.05)

    def _ready(self, offset: int) -> bool:
        if self.ready not in self.log.read_bytes()[offset:]:
            return False
        if self.port is None:
            return True
        with socket.socket() as sock:
            return sock.connect_ex(("127.0.0.1", self.port)) == 0

    def kill(self) -> None:
        """SIGKILL it and reap it."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM it (SIGKILL if it lingers)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class Recovery:
    """What one kill measured: seconds to each session's first new chunk, and to all done."""

    def __init__(self, first_chunk: dict[str, float], done: float | None) -> None:
        self.first_chunk = first_chunk
        self.done = done

    def summary(self) -> dict[str, Any]:
        """The figures, for the JSON line."""
        values = list(self.first_chunk.values())
        return {
            "first_chunk_p50_s": round(statistics.median(values), 2),
            "first_chunk_max_s": round(max(values), 2),
            "first_chunk_s": {key: round(value, 2) for key, value in self.first_chunk.items()},
            "all_done_s": None if self.done is None else round(self.done, 2),
        }

    def lines(self, label: str) -> list[str]:
        """Printable lines."""
        values = list(self.first_chunk.values())
        done = "not all" if self.done is None else f"{self.done:.2f} s"
        return [
            f"time to recovery after {label}: first new chunk p50 "
            f"{statistics.median(values):.2f} s, max {max(values):.2f} s "
            f"({len(values)} sessions); all completed after {done}",
            "  by session: "
            + ", ".join(f"{key} {value:.2f}" for key, value in sorted(self.first_chunk.items())),
        ]


def _chunk(event: Event) -> bool:
    return isinstance(event, CustomChunk | TextDelta)


async def measure_recovery(
    store: EventStore,
    start: Callable[[str, str], Awaitable[None]],
    kill: Callable[[], None],
    *,
    prefix: str,
    then: Callable[[], None] | None = None,
    within: float = 90.0,
) -> Recovery:
    """Start :data:`SESSIONS` with ``start(agent_type, session_id)``; ``kill()`` once each
    has streamed three chunks; time the first chunk after the kill and the end of all.

    ``then`` (in a thread) runs once the kill is done, while the clock runs: a
    restart. Polling the store is the measurement (every 20 ms): it changes
    nothing it measures.
    """
    ids = [f"{prefix}-{kind}-{n}" for kind, count in SESSIONS for n in range(count)]
    for session_id in ids:
        await start(session_id.split("-")[1], session_id)
    with anyio.fail_after(within):
        for session_id in ids:
            await until_logged(store, session_id, lambda log_: sum(map(_chunk, log_)) >= 3)
    await anyio.to_thread.run_sync(kill)
    killed = time.monotonic()
    held = {session_id: (await store.read(session_id))[-1].seq for session_id in ids}
    async with anyio.create_task_group() as tg:
        if then is not None:
            tg.start_soon(anyio.to_thread.run_sync, then)
        first, done = await _watch(store, ids, held, killed, within)
    missing = set(ids) - set(first)
    if missing:
        raise RuntimeError(f"no new chunk within {within:.0f} s for {sorted(missing)}")
    return Recovery(first, done)


async def _watch(
    store: EventStore, ids: list[str], held: dict[str, int], killed: float, within: float
) -> tuple[dict[str, float], float | None]:
    """Seconds from ``killed`` to each session's first chunk past ``held``, and to all done."""
    first: dict[str, float] = {}
    done: float | None = None
    with anyio.move_on_after(within):
        while done is None:
            finished = 0
            for session_id in ids:
                log_ = await store.read(session_id)
                if session_id not in first and any(
                    _chunk(e) and e.seq > held[session_id] for e in log_
                ):
                    first[session_id] = time.monotonic() - killed
                finished += isinstance(log_[-1], Completed)
            if finished == len(ids):
                done = time.monotonic() - killed
            await anyio.sleep(0.02)  # polling the log: a measurement, not a test
    return first, done


async def until_logged(
    store: EventStore, session_id: str, done: Callable[[list[Event]], bool]
) -> None:
    """Return once ``done(log)`` holds for the session's log (the caller bounds the wait)."""
    while True:
        if done(await store.read(session_id)):
            return
        await anyio.sleep(0.02)  # polling the log: a measurement, not a test
