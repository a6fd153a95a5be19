"""``http`` benchmark: SSE throughput and remote sub-agent call latency vs raw baselines.

Same process layout for both sides: uvicorn in a thread of this process, an
httpx client on the main event loop; events are counted the same way.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import msgspec
import uvicorn
from pydantic import BaseModel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from helix_agents import AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.events import (
    Completed,
    Event,
    RunStarted,
    SessionCreated,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport

_PAYLOAD = msgspec.json.encode(
    {"chunk": {"type": "text_delta", "delta": "hello world ", "agentId": "s"}, "sequence": 1}
)


@contextmanager
def _served(app: Any) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


def _raw_app(events: int) -> Starlette:
    async def sse(request: Request) -> StreamingResponse:
        count = int(request.query_params.get("n", events))

        async def body() -> AsyncIterator[bytes]:
            for seq in range(1, count + 1):
                yield b"id: %d\nevent: chunk\ndata: %s\n\n" % (seq, _PAYLOAD)
            yield b'event: end\ndata: {"output":null}\n\n'

        return StreamingResponse(body(), media_type="text/event-stream")

    async def start(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"sessionId": "s", "streamId": "s", "runId": "r"})

    return Starlette(routes=[Route("/sse", sse), Route("/start", start, methods=["POST"])])


async def _read_stream(client: httpx.AsyncClient, url: str, params: dict[str, Any]) -> int:
    frames = 0
    last = b""  # a frame's blank line may be split between two reads
    async with client.stream("GET", url, params=params) as response:
        async for data in response.aiter_bytes():
            frames += (last + data).count(b"\n\n")
            last = data[-1:]
    return frames


async def _sse_rate(base: str, params: dict[str, Any], expected: int, repeats: int) -> float:
    best = 0.0
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for _ in range(repeats):
            start = time.perf_counter()
            frames = await _read_stream(client, "/sse", params)
            elapsed = time.perf_counter() - start
            assert frames >= expected, (frames, expected)
            best = max(best, expected / elapsed)
    return best


async def _fill_log(store: SqliteEventStore, session_id: str, chunks: int) -> None:
    events: list[Event] = [
        SessionCreated(session_id=session_id, seq=1, ts=0.0, agent_type="writer", run_id="r"),
        RunStarted(session_id=session_id, seq=2, ts=0.0, run_id="r"),
    ]
    for seq in range(3, chunks + 3):
        events.append(
            TextDelta(
                session_id=session_id,
                seq=seq,
                ts=0.0,
                agent_id=session_id,
                agent_type="writer",
                delta="hello world ",
            )
        )
    events.append(Completed(session_id=session_id, seq=chunks + 3, ts=0.0, output=None))
    for start in range(0, len(events), 1000):
        batch = events[start : start + 1000]
        await store.append(session_id, batch, start)


class _Query(BaseModel):
    query: str


class _Found(BaseModel):
    findings: str


class _Out(BaseModel):
    summary: str


def _agents(chunks: int) -> tuple[Any, Any]:
    words = " ".join(f"w{i}" for i in range(chunks))
    child = define_agent(
        "researcher",
        output_schema=_Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"}, text=words)], chunk_words=1),
    )
    return child, words


async def _raw_round_trip(base: str, repeats: int) -> list[float]:
    times = []
    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        for _ in range(repeats):
            start = time.perf_counter()
            response = await client.post("/start", json={"sessionId": "s"})
            response.raise_for_status()
            await _read_stream(client, "/sse", {"n": 10})
            times.append(time.perf_counter() - start)
    return times


async def _remote_calls(base: str, tmp: str, repeats: int) -> list[float]:
    transport = HttpRemoteAgentTransport(base, retry_base_delay=0.05)
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="research",
        input_schema=_Query,
        output_schema=_Found,
        transport=transport,
        remote_agent_type="researcher",
    )
    parent = define_agent(
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
    store = SqliteEventStore(os.path.join(tmp, "parent.db"))
    times = []
    async with AgentExecutor(store, [parent]) as executor:
        for index in range(repeats):
            handle = await executor.execute(parent, "go", session_id=f"p{index}")
            result = await handle.result()
            assert result.status == "completed", result
            log = await store.read(f"p{index}")
            start = next(e.ts for e in log if isinstance(e, ToolStart))
            end = next(e.ts for e in log if isinstance(e, ToolEnd))
            times.append(end - start)
    await transport.aclose()
    await store.close()
    return times


def run_http(*, quick: bool = False) -> dict[str, Any]:
    """Run the http benchmark, print a report, return the summary."""
    n = 2_000 if quick else 20_000
    repeats = 2 if quick else 3
    calls = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        with _served(_raw_app(n)) as base:
            raw_rate = anyio.run(_sse_rate, base, {"n": n}, n, repeats)
            raw_times = anyio.run(_raw_round_trip, base, calls)
        store = SqliteEventStore(os.path.join(tmp, "sse.db"))
        anyio.run(_fill_log, store, "sse-bench", n)
        child, _ = _agents(10)
        server = AgentServer([child], store)
        with _served(create_http_app(server)) as base:
            ours_rate = anyio.run(_sse_rate, base, {"sessionId": "sse-bench"}, n, repeats)
            call_times = anyio.run(_remote_calls, base, tmp, calls)
        anyio.run(store.close)
    raw_p50 = statistics.median(raw_times)
    call_p50 = statistics.median(call_times)
    print(f"SSE, bare Starlette endpoint:        {raw_rate:>10,.0f} events/s")
    print(f"SSE, our /sse over a SQLite log:     {ours_rate:>10,.0f} events/s")
    print(f"sse ratio:                           {ours_rate / raw_rate:>10.2f}")
    print(f"raw POST + 10-event SSE, p50:        {raw_p50 * 1000:>10.2f} ms")
    print(f"remote sub-agent call (10 chunks), p50: {call_p50 * 1000:>7.2f} ms")
    print(f"remote call ratio:                   {call_p50 / raw_p50:>10.2f}")
    return {
        "bench": "http",
        "sse_ratio": round(ours_rate / raw_rate, 3),
        "remote_call_ratio": round(call_p50 / raw_p50, 3),
        "raw_sse_events_per_s": round(raw_rate),
        "sse_events_per_s": round(ours_rate),
        "raw_round_trip_p50_ms": round(raw_p50 * 1000, 3),
        "remote_call_p50_ms": round(call_p50 * 1000, 3),
    }
