"""``interop`` benchmark, A2A half: a remote child over A2A vs over our own HTTP, in one run.

One gateway (uvicorn in a thread of this process) serves a scripted
``researcher`` that streams ``WORDS`` one-word text deltas and finishes with
a typed output. The same parent agent calls it as a remote sub-agent twice
over: through ``HttpRemoteAgentTransport`` (``/start`` + ``/sse``) and through
``A2ARemoteAgentTransport`` (the gateway's ``/a2a/researcher``: SendMessage,
SubscribeToTask). A call is timed from the parent's ``tool_start`` to its
``tool_end`` (both in its log). The bare protocols are timed too: a task
read to its end with a2a-sdk's client (SendStreamingMessage) against
``POST /start`` then ``GET /sse`` with httpx. Calls alternate between the two
sides so both see the same machine. Ratios are A2A / ours.

Needs ``a2a-sdk[http-server]`` (the ``a2a`` extra).
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import httpx
import uvicorn
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    RemoteAgentTransport,
    create_remote_sub_agent_tool,
    define_agent,
)
from helix_agents.events import ToolEnd, ToolStart
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

WORDS = 20


class _Query(BaseModel):
    query: str


class _Found(BaseModel):
    findings: str


def _researcher() -> AgentConfig:
    words = " ".join(f"w{i}" for i in range(WORDS))
    return define_agent(
        "researcher",
        output_schema=_Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"}, text=words)], chunk_words=1),
    )


def _parent(name: str, transport: RemoteAgentTransport) -> AgentConfig:
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="research",
        input_schema=_Query,
        output_schema=_Found,
        transport=transport,
        remote_agent_type="researcher",
    )
    return define_agent(
        name,
        tools=[tool],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("subagent__researcher", {"query": "q"})], ScriptedLLM.reply("ok")]
        ),
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


Timed = Callable[[int], Awaitable[float]]


def _remote_call(executor: AgentExecutor, parent: AgentConfig, tag: str) -> Timed:
    async def call(index: int) -> float:
        session = f"{tag}-{index}"
        handle = await executor.execute(parent, "go", session_id=session)
        result = await handle.result()
        assert result.status == "completed", result
        log = await executor.store.read(session)
        start = next(e.ts for e in log if isinstance(e, ToolStart))
        end = next(e.ts for e in log if isinstance(e, ToolEnd))
        return end - start

    return call


def _bare_http(client: httpx.AsyncClient) -> Timed:
    async def task(index: int) -> float:
        started = time.perf_counter()
        session = f"bare-http-{uuid.uuid4().hex}"
        body = {"sessionId": session, "agentType": "researcher", "message": "q"}
        (await client.post("/start", json=body)).raise_for_status()
        params = {"sessionId": session}
        async with client.stream("GET", "/sse", params=params) as response:
            async for line in response.aiter_lines():
                if line in ("event: end", "event: error"):
                    break
        return time.perf_counter() - started

    return task


async def _bare_a2a(http: httpx.AsyncClient, url: str) -> Timed:
    from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
    from a2a.types import Message, Part, Role, SendMessageRequest

    card = await A2ACardResolver(http, f"{url}/a2a/researcher").get_agent_card()
    client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)

    async def task(index: int) -> float:
        started = time.perf_counter()
        message = Message(role=Role.ROLE_USER, message_id=uuid.uuid4().hex, parts=[Part(text="q")])
        async for _ in client.send_message(SendMessageRequest(message=message)):
            pass
        return time.perf_counter() - started

    return task


async def _alternate(sides: dict[str, Timed], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in sides}
    for index in range(-1, rounds):  # round -1 warms both up
        for name, timed in sides.items():
            elapsed = await timed(index)
            if index >= 0:
                times[name].append(elapsed)
    return times


async def _measure(url: str, rounds: int) -> dict[str, list[float]]:
    from helix_agents.a2a import A2ARemoteAgentTransport

    store = MemoryEventStore()
    async with (
        HttpRemoteAgentTransport(url, retry_base_delay=0.05) as http_transport,
        A2ARemoteAgentTransport(f"{url}/a2a/researcher") as a2a_transport,
        httpx.AsyncClient(base_url=url, timeout=60) as http,
    ):
        over_http = _parent("over_http", http_transport)
        over_a2a = _parent("over_a2a", a2a_transport)
        async with AgentExecutor(store, [over_http, over_a2a]) as executor:
            calls = await _alternate(
                {
                    "call_http": _remote_call(executor, over_http, "h"),
                    "call_a2a": _remote_call(executor, over_a2a, "a"),
                },
                rounds,
            )
        bare = await _alternate(
            {"bare_http": _bare_http(http), "bare_a2a": await _bare_a2a(http, url)}, rounds
        )
    return {**calls, **bare}


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": statistics.median(ordered) * 1000,
        "p90_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))] * 1000,
    }


def run_a2a(quick: bool = False) -> dict[str, Any]:
    """Run the A2A half of ``interop``: print a report, return a JSON-able summary."""
    rounds = 8 if quick else 40
    app = create_http_app(AgentServer([_researcher()], MemoryEventStore()))
    with _served(app) as url:
        times = anyio.run(_measure, url, rounds)
    summary: dict[str, Any] = {"rounds": rounds, "words": WORDS}
    for name, values in times.items():
        summary[name] = _ms(values)
    call_ratio = summary["call_a2a"]["p50_ms"] / summary["call_http"]["p50_ms"]
    bare_ratio = summary["bare_a2a"]["p50_ms"] / summary["bare_http"]["p50_ms"]
    summary["call_ratio_a2a_over_http"] = call_ratio
    summary["bare_ratio_a2a_over_http"] = bare_ratio
    print(f"a2a interop: {rounds} rounds, a child streaming {WORDS} deltas, typed output")
    for name in ("call_http", "call_a2a", "bare_http", "bare_a2a"):
        p = summary[name]
        print(f"  {name:10s} p50 {p['p50_ms']:7.2f} ms   p90 {p['p90_ms']:7.2f} ms")
    print(f"  remote sub-agent call, A2A / our HTTP: {call_ratio:.2f}x (p50)")
    print(f"  bare task round trip, a2a-sdk client / our HTTP: {bare_ratio:.2f}x (p50)")
    return summary
