"""``idle`` benchmark: the CPU that idle running sessions cost (one poller per store).

N sessions run on an ``AgentExecutor`` over a SQLite store, each waiting in
a model call that never answers, and each followed by one reader (a tail, as
an SSE client would be): 2N idle tails, N of them the runs' own interrupt
watchers. The figure is the process's CPU time (every thread) over a window
of wall time. The baseline is the same number of tails on the same store
re-reading every 0.5 s each, as every tail did before the store had one
poller.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio

from helix_agents import AgentExecutor, EventStore, define_agent
from helix_agents.models import LLMRequest, LLMStreamEvent
from helix_agents.stores import SqliteEventStore

POLL = 0.5  # seconds: the old per-tail interval, and the store's poll interval


class _SilentLLM:
    """A model that never answers: every run waits in its call until cancelled."""

    def __init__(self) -> None:
        self.waiting = 0
        self.all_waiting = anyio.Event()
        self.expected = 0

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        self.waiting += 1
        if self.waiting >= self.expected:
            self.all_waiting.set()
        await anyio.sleep_forever()
        yield  # type: ignore[misc]  # pragma: no cover - never reached


async def _read_along(store: EventStore, session_id: str) -> None:
    tail = store.tail(session_id)
    try:
        async for _ in tail:
            pass
    finally:
        await tail.aclose()  # type: ignore[attr-defined]


async def _cpu_over(window: float) -> float:
    """The fraction of one core this process used over ``window`` seconds of wall time."""
    cpu, wall = time.process_time(), time.perf_counter()
    await anyio.sleep(window)
    return (time.process_time() - cpu) / (time.perf_counter() - wall)


async def idle_runs(path: str, sessions: int, window: float) -> float:
    """CPU fraction of ``sessions`` idle running sessions with one reader each."""
    llm = _SilentLLM()
    llm.expected = sessions
    agent = define_agent("waiter", llm=llm)  # type: ignore[arg-type]
    fraction = 0.0
    async with SqliteEventStore(path, poll_interval=POLL) as store:
        with anyio.CancelScope() as everything:
            async with AgentExecutor(store, [agent]) as executor, anyio.create_task_group() as tg:
                for index in range(sessions):
                    handle = await executor.execute(agent, "wait", session_id=f"idle-{index}")
                    tg.start_soon(_read_along, store, handle.session_id)
                await llm.all_waiting.wait()
                await anyio.sleep(2 * POLL)  # the poller's first look at every session
                fraction = await _cpu_over(window)
                everything.cancel()  # the runs, their watchers and the readers
    return fraction


async def _poll_forever(store: EventStore, session_id: str, cursor: int) -> None:
    while True:
        await anyio.sleep(POLL)
        events = await store.read(session_id, cursor)
        if events:
            cursor = events[-1].seq


async def polling_tails(path: str, tails: int, window: float) -> float:
    """Baseline: ``tails`` tails re-reading the same store every 0.5 s each."""
    async with SqliteEventStore(path, poll_interval=None) as store:
        sessions = await store.list_sessions()
        async with anyio.create_task_group() as tg:
            for index in range(tails):
                session_id = sessions[index % len(sessions)]
                cursor = len(await store.read(session_id))
                tg.start_soon(_poll_forever, store, session_id, cursor)
            await anyio.sleep(2 * POLL)
            fraction = await _cpu_over(window)
            tg.cancel_scope.cancel()
        return fraction


def run_idle(*, quick: bool = False) -> dict[str, Any]:
    """Measure, print, and return the summary."""
    sessions = 200 if quick else 2000
    window = 3.0 if quick else 10.0
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "idle.db")
        ours = anyio.run(idle_runs, path, sessions, window)
        baseline = anyio.run(polling_tails, path, 2 * sessions, window)
    print(
        f"{sessions} idle running sessions, {2 * sessions} tails, one poller: {ours:.3%} of a core"
    )
    print(f"{2 * sessions} tails each re-reading every {POLL} s:       {baseline:.3%} of a core")
    return {
        "bench": "idle",
        "sessions": sessions,
        "tails": 2 * sessions,
        "cpu_fraction": round(ours, 4),
        "per_tail_polling_cpu_fraction": round(baseline, 4),
        "window_s": window,
    }
