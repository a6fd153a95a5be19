"""Where a helix durable step's time goes: the wrappers, and the itemized figures.

Installed in a contender's process (one run of one contender per process),
they wrap: every :class:`~helix_agents.engines.durable.steps.DurableSteps` and
``CallSteps`` step (the outermost only: a round's calls run inside its step),
the SQLite store's reads and appends made inside a step (a reader streaming
the log to the client is not counted), and on DBOS ``DBOS.run_step_async``
(the engine's step: its checkpoint around our work) and ``StepHost.call``
(our work handed to the worker's loop). Only the time inside the sessions'
windows counts (``Tally.sums``); the totals are divided by the agent steps run.
"""

from __future__ import annotations

import contextvars
import functools
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Callable
from typing import Any

__all__ = ["Tally", "install_dbos", "install_steps", "itemize", "profiled_sessions"]

_IN_STEP: contextvars.ContextVar[bool] = contextvars.ContextVar("in_step", default=False)
_STEPS = ("turn", "begin", "model_step", "round_open", "tool_round", "round_close", "stopped")
_CALLS = ("tool_call", "tool_failed", "child_open", "child_follow", "companion_call")


class Tally:
    """The intervals of the wrapped calls, by key (the DBOS steps run on another thread:
    locked), and the sessions' windows (from the start to the client reading the end)."""

    def __init__(self) -> None:
        self.intervals: list[tuple[str, float, float]] = []
        self.windows: list[tuple[float, float]] = []
        self._lock = threading.Lock()

    def add(self, key: str, began: float) -> None:
        """Record a call of ``key`` that began at ``began`` and ends now."""
        ended = time.perf_counter()
        with self._lock:
            self.intervals.append((key, began, ended))

    def clear(self) -> None:
        """Forget everything (after a warm-up)."""
        with self._lock:
            self.intervals.clear()
            self.windows.clear()

    def sums(self) -> tuple[dict[str, float], Counter[str], float]:
        """Per key, the seconds and calls begun inside the windows, clipped to their ends; the
        launches (from a window's start to its first step).

        A session's last step may still be recording its completion once the
        client has read the end, over the next session's start: that tail is
        no session's latency.
        """
        seconds: defaultdict[str, float] = defaultdict(float)
        calls: Counter[str] = Counter()
        launch = 0.0
        with self._lock:
            intervals = sorted(self.intervals, key=lambda item: item[1])
        first_key = "engine_step" if any(k == "engine_step" for k, _, _ in intervals) else "step"
        for low, high in self.windows:
            first = high
            for key, began, ended in intervals:
                if low <= began < high:
                    seconds[key] += min(ended, high) - began
                    calls[key] += 1
                    if key == first_key:
                        first = min(first, began)
            launch += first - low
        return seconds, calls, launch


async def profiled_sessions(service: Any, count: int, prefix: str, tally: Tally) -> list[float]:
    """``_durable.sessions`` of ``stepper``, each session's window kept in ``tally``."""
    from helix_agents.protocol import EndEvent, RemoteStartRequest

    times: list[float] = []
    for n in range(count):
        session_id = f"{prefix}-stepper-{n}"
        began = time.perf_counter()
        await service.start(
            RemoteStartRequest(session_id=session_id, agent_type="stepper", message="go")
        )
        async for event in service.stream(session_id):
            if isinstance(event, EndEvent):
                break
        ended = time.perf_counter()
        times.append(ended - began)
        tally.windows.append((began, ended))
    return times


def _wrap(owner: Any, name: str, wrapper: Callable[[Callable[..., Awaitable[Any]]], Any]) -> None:
    original = getattr(owner, name)
    setattr(owner, name, functools.wraps(original)(wrapper(original)))


def _step(tally: Tally, name: str) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
    def wrapper(original: Callable[..., Awaitable[Any]]) -> Any:
        async def step(*args: Any, **kwargs: Any) -> Any:
            if _IN_STEP.get():
                return await original(*args, **kwargs)
            token = _IN_STEP.set(True)
            began = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                tally.add("step", began)
                tally.add(f"step:{name}", began)
                _IN_STEP.reset(token)

        return step

    return wrapper


def _inside(tally: Tally, key: str) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
    def wrapper(original: Callable[..., Awaitable[Any]]) -> Any:
        async def inside(*args: Any, **kwargs: Any) -> Any:
            if not _IN_STEP.get():
                return await original(*args, **kwargs)
            began = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                tally.add(key, began)

        return inside

    return wrapper


def _always(tally: Tally, key: str) -> Callable[[Callable[..., Awaitable[Any]]], Any]:
    def wrapper(original: Callable[..., Awaitable[Any]]) -> Any:
        async def always(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return await original(*args, **kwargs)
            finally:
                tally.add(key, began)

        return always

    return wrapper


def install_steps(tally: Tally) -> None:
    """Wrap helix's durable steps and the SQLite store's reads and appends inside them."""
    from helix_agents.engines.durable.calls import CallSteps
    from helix_agents.engines.durable.steps import DurableSteps
    from helix_agents.stores import SqliteEventStore

    for name in _STEPS:
        _wrap(DurableSteps, name, _step(tally, name))
    for name in _CALLS:
        _wrap(CallSteps, name, _step(tally, name))
    _wrap(SqliteEventStore, "read", _inside(tally, "read"))
    _wrap(SqliteEventStore, "read_page", _inside(tally, "read"))
    _wrap(SqliteEventStore, "append", _inside(tally, "append"))


def install_dbos(tally: Tally) -> None:
    """Also wrap DBOS's steps (``DBOS.run_step_async``) and the hand-off to our loop."""
    from dbos import DBOS

    from helix_agents.engines.dbos.stephost import StepHost

    _wrap(DBOS, "run_step_async", _always(tally, "engine_step"))
    _wrap(StepHost, "call", _always(tally, "host_call"))


def _ms(seconds: float, per: int) -> float:
    return round(seconds / per * 1000, 3)


def itemize(tally: Tally, total_s: float, agent_steps: int) -> dict[str, Any]:
    """Per agent step: the engine, our appends, reads and code, the rest; steps by kind."""
    s, calls, launch = tally.sums()
    ours = s["step"] - s["read"] - s["append"]
    out: dict[str, Any] = {
        "total_ms": _ms(total_s, agent_steps),
        "log_appends_ms": _ms(s["append"], agent_steps),
        "log_reads_ms": _ms(s["read"], agent_steps),
        "appends_per_step": round(calls["append"] / agent_steps, 2),
        "reads_per_step": round(calls["read"] / agent_steps, 2),
        "durable_steps_per_step": round(calls["step"] / agent_steps, 2),
        "steps_by_kind": {
            key.split(":", 1)[1]: round(count / agent_steps, 2)
            for key, count in sorted(calls.items())
            if key.startswith("step:")
        },
    }
    if "engine_step" in s:  # DBOS: the engine's checkpoints are its step minus our work
        out["engine_checkpoints_ms"] = _ms(s["engine_step"] - s["host_call"], agent_steps)
        out["our_code_ms"] = _ms(ours + s["host_call"] - s["step"], agent_steps)
        out["loop_hop_ms"] = _ms(s["host_call"] - s["step"], agent_steps)
        out["rest_ms"] = _ms(total_s - s["engine_step"], agent_steps)
        out["engine_steps_per_step"] = round(calls["engine_step"] / agent_steps, 2)
        outside = total_s - s["engine_step"]
    else:  # Temporal: everything outside our steps is the engine's (round trips, tasks, SDK)
        out["engine_and_rest_ms"] = _ms(total_s - s["step"], agent_steps)
        out["our_code_ms"] = _ms(ours, agent_steps)
        outside = total_s - s["step"]
    # outside the steps: the launch (the start until the first step), and between the steps
    out["launch_ms"] = _ms(launch, agent_steps)
    out["between_steps_ms"] = _ms(outside - launch, agent_steps)
    return out
