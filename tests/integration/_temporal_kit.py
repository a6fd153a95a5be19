"""Helpers of the Temporal tests: a worker and a gateway service in this process, log checks."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import msgspec
from temporal_server import TemporalDev, fresh_task_queue

from helix_agents.events import CustomChunk, Event, MessageAppended, TextDelta
from helix_agents.log.store import EventStore
from helix_agents.messages import ToolResultMessage
from helix_agents.protocol import EndEvent, ErrorEvent
from helix_agents.server import AgentServer
from helix_agents.temporal import TemporalOptions, TemporalWorker, temporal_server

__all__ = [
    "RECOVERY_BOUND",
    "comparable",
    "first_chunks_after",
    "gateway_and_worker",
    "options_for",
    "results_of",
    "seqs_contiguous",
    "stream_to_end",
    "wait_for",
]


def options_for(dev: TemporalDev, **knobs: Any) -> TemporalOptions:
    """Options on ``dev`` with a task queue of the test's own."""
    return TemporalOptions(address=dev.address, task_queue=fresh_task_queue(), **knobs)


@asynccontextmanager
async def gateway_and_worker(
    agents: dict[str, Any], store: EventStore, options: TemporalOptions
) -> AsyncIterator[tuple[AgentServer, TemporalWorker]]:
    """A worker polling ``options.task_queue`` and the gateway's server, both on ``store``."""
    async with TemporalWorker(agents.values(), store, options) as worker:
        server = temporal_server(agents, store, options)
        async with server:
            yield server, worker


async def stream_to_end(server: AgentServer, session_id: str, from_seq: int = 0) -> Any:
    """Read the session's stream to its end event; the output (AssertionError on an error)."""
    async for event in server.stream(session_id, from_seq):
        if isinstance(event, EndEvent):
            return event.output
        if isinstance(event, ErrorEvent):
            raise AssertionError(f"session {session_id} ended with an error: {event.error}")
    raise AssertionError("the stream ended without end")


async def wait_for(store: EventStore, session_id: str, predicate: Any) -> Event:
    """The first event of ``session_id``'s log (existing or new) satisfying ``predicate``."""
    async for event in store.tail(session_id, 0):
        if predicate(event):
            return event
    raise AssertionError("unreachable")


RECOVERY_BOUND = 8.0
"""Seconds a killed worker's session may take to stream again (issue 34).

The target is 5 s, measured 2-4 s (``bench/run.py temporal`` and ``dbos``);
the bound is generous for a loaded 2-core machine and still fails at the old
defaults (a 10 s heartbeat timeout or takeover silence: 9-14 s)."""


async def first_chunks_after(
    store: EventStore, held: dict[str, int], killed: float
) -> dict[str, float]:
    """Seconds from ``killed`` (a ``time.monotonic()``) to each session's first chunk
    (a text delta or a custom chunk) after seq ``held[session]``, read as it lands."""
    seconds: dict[str, float] = {}

    async def one(session_id: str) -> None:
        async for event in store.tail(session_id, held[session_id]):
            if isinstance(event, TextDelta | CustomChunk):
                seconds[session_id] = time.monotonic() - killed
                return

    async with anyio.create_task_group() as tg:
        for session_id in held:
            tg.start_soon(one, session_id)
    return seconds


def seqs_contiguous(log: Sequence[Event]) -> bool:
    """True when the log's seqs are exactly 1..N (no gap, no duplicate)."""
    return [event.seq for event in log] == list(range(1, len(log) + 1))


def results_of(log: Sequence[Event], call_id: str) -> list[Any]:
    """The tool result messages recorded for ``call_id``."""
    return [
        event
        for event in log
        if isinstance(event, MessageAppended)
        and isinstance(event.message, ToolResultMessage)
        and event.message.tool_call_id == call_id
    ]


_VOLATILE = {"ts", "run_id", "runId", "duration_ms", "durationMs", "host_id", "hostId"}


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _strip(item) for key, item in value.items() if key not in _VOLATILE}
    if isinstance(value, list):
        return [_strip(item) for item in value]
    return value


def comparable(log: Sequence[Event]) -> list[Any]:
    """The log as plain data without what differs between two runs (times, run ids)."""
    return [_strip(msgspec.to_builtins(event)) for event in log]
