"""``models`` benchmark: the OpenAI adapters' own CPU per streamed token, and connection reuse.

A fake model in a subprocess (``served/model_server.py``) streams the same
event stream again and again. Per token, in this process: the adapter
(``OpenAIResponsesLLM``, ``OpenAIChatLLM``) reading the stream into its
deltas and its response, against the floor, a raw parse of the same stream
on the same HTTP client (read the lines, decode each ``data:`` line's JSON,
nothing else); rounds interleaved, medians kept. Then an agent's 100 steps
through the executor on ``openai:``, the TCP connections (a TLS handshake
each on a real network) the server saw: the adapter's one client per event
loop, against a client per call (as models by name did before).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
from _proc import free_port, server_process

from helix_agents import AgentExecutor, define_agent, tool
from helix_agents.messages import UserMessage
from helix_agents.models import (
    LLMRequest,
    LLMStreamEvent,
    LLMTextDelta,
    OpenAIChatLLM,
    OpenAIResponsesLLM,
)
from helix_agents.stores import MemoryEventStore

REQUEST = LLMRequest(messages=[UserMessage(content="Stream something.")])
STEPS = 100


@tool
def tick(n: int) -> int:
    """Count one more."""
    return n + 1


async def _floor(client: httpx.AsyncClient, url: str) -> int:
    """Read the stream as a bare parser would: lines, and each ``data:`` line's JSON."""
    decode = msgspec.json.decode
    count = 0
    async with client.stream("POST", url, json={"model": "bench", "input": []}) as response:
        async for line in response.aiter_lines():
            if line.startswith("data:") and line != "data: [DONE]":
                decode(line[5:])
                count += 1
    return count


async def _adapter(llm: OpenAIResponsesLLM | OpenAIChatLLM) -> int:
    count = 0
    async for event in llm.stream(REQUEST):
        count += isinstance(event, LLMTextDelta)
    return count


async def _cpu_per_token(base: str, tokens: int, rounds: int) -> dict[str, float]:
    """Median microseconds of this process's CPU per streamed token, each reader."""
    samples: dict[str, list[float]] = {}
    async with httpx.AsyncClient(timeout=60) as client:
        readers: dict[str, Any] = {
            "responses_floor": lambda: _floor(client, f"{base}/responses"),
            "chat_floor": lambda: _floor(client, f"{base}/chat/completions"),
        }
        responses = OpenAIResponsesLLM("bench", base_url=base, api_key="k")
        chat = OpenAIChatLLM("bench", base_url=base, api_key="k", max_retries=0)
        readers["responses"] = lambda: _adapter(responses)
        readers["chat"] = lambda: _adapter(chat)
        for _ in range(rounds + 1):  # the first round warms up and is dropped
            for name, read in readers.items():
                start = time.process_time()
                await read()
                samples.setdefault(name, []).append((time.process_time() - start) / tokens * 1e6)
        await responses.aclose()
        await chat.aclose()
    return {name: statistics.median(values[1:]) for name, values in samples.items()}


class _ClientPerCall:
    """A model that makes a new adapter (so a new client) for every call, as before."""

    def __init__(self, model: str, base: str) -> None:
        self.model, self.base = model, base

    async def _stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        async with OpenAIResponsesLLM(self.model, base_url=self.base, api_key="k") as llm:
            async for event in llm.stream(request):
                yield event

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        return self._stream(request)


async def _handshakes(base: str, root: str) -> dict[str, int]:
    """TCP connections the server saw for an agent's 100 steps, per way of holding clients."""
    seen: dict[str, int] = {}
    async with httpx.AsyncClient() as probe:
        await probe.get(f"{root}/connections")  # forget the earlier rounds
        for label, llm in (
            ("reused", OpenAIResponsesLLM(f"steps-{STEPS}", base_url=base, api_key="k")),
            ("client_per_call", _ClientPerCall(f"steps-{STEPS}", base)),
        ):
            agent = define_agent("counter", tools=[tick], llm=llm, max_steps=STEPS + 1)
            async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
                assert await executor.run(agent, "count") == "done"
            seen[label] = (await probe.get(f"{root}/connections")).json()["connections"]
    return seen


def run_models(*, quick: bool = False) -> dict[str, Any]:
    """Run the benchmark, print a report, return the summary."""
    tokens, rounds = (500, 3) if quick else (4000, 7)
    port = free_port()
    root = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="helix-bench-") as tmp:
        log = Path(tmp) / "model_server.log"
        with server_process(["model_server.py", str(port), str(tokens)], port, log):
            cpu = anyio.run(_cpu_per_token, f"{root}/v1", tokens, rounds)
            handshakes = anyio.run(_handshakes, f"{root}/v1", root)
    for api in ("responses", "chat"):
        own, floor = cpu[api], cpu[f"{api}_floor"]
        print(
            f"{api:>9}: adapter {own:6.2f} us CPU per token, raw parse {floor:6.2f} us "
            f"({own / floor:.2f}x the floor; {tokens} tokens, median of {rounds} rounds)"
        )
    print(
        f"handshakes per {STEPS} steps: {handshakes['reused']} with the adapter's client, "
        f"{handshakes['client_per_call']} with a client per call"
    )
    return {
        "bench": "models",
        "tokens": tokens,
        "responses_us_per_token": round(cpu["responses"], 2),
        "responses_floor_us_per_token": round(cpu["responses_floor"], 2),
        "responses_vs_floor": round(cpu["responses"] / cpu["responses_floor"], 2),
        "chat_us_per_token": round(cpu["chat"], 2),
        "chat_floor_us_per_token": round(cpu["chat_floor"], 2),
        "chat_vs_floor": round(cpu["chat"] / cpu["chat_floor"], 2),
        "handshakes_per_100_steps": handshakes["reused"],
        "handshakes_per_100_steps_client_per_call": handshakes["client_per_call"],
    }
