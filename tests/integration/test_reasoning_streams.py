"""Reasoning and typed output on ``/sse``, on each runtime; their tokens priced (issue 33).

A real uvicorn server on 127.0.0.1 serves agents whose scripted models think
aloud (``reasoning_delta`` chunks, never the answer) and write their typed
output in pieces (``partial_output`` chunks: each a JSON object, the fields
so far, growing; then the validated ``output``). The built-in runtime and the
durable engines (Temporal, DBOS) run the same step, so each stream carries
them; a child's arrive on its parent's stream. The cached input and reasoning
tokens the model reports are counted on ``/status`` and priced apart.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from _served_agents import read_sse
from reasoning_agents import (
    ANSWER,
    LEAD_ANSWER,
    LEAD_THOUGHT,
    THOUGHT,
    TRIP,
    USAGE,
    agents,
    growing,
)
from servers import serve

from helix_agents.events import (
    MessageAppended,
    OutputChunk,
    PartialOutput,
    ReasoningDelta,
    TextDelta,
)
from helix_agents.log import ModelPrice, Prices, project_state
from helix_agents.messages import AssistantMessage, ReasoningPart
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteStartRequest, TransportEvent
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

LIMIT = 60


async def _started(runtime: Runtime, server: AgentServer, session_id: str, agent: str) -> None:
    await server.start_agent(
        RemoteStartRequest(session_id=session_id, agent_type=agent, message="plan a trip")
    )
    await runtime.settled(server, session_id)


def _chunks(events: list[TransportEvent], kind: type[Any], agent_id: str) -> list[Any]:
    return [
        event.chunk
        for event in events
        if isinstance(event, ChunkEvent)
        and isinstance(event.chunk, kind)
        and event.chunk.agent_id == agent_id
    ]


async def test_reasoning_streams_as_its_own_chunks_never_as_the_answer(runtime: Runtime) -> None:
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(agents(), store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, "think-1", "thinker")
            events = await read_sse(client, url, "think-1")
            status = (await client.get(f"{url}/status", params={"sessionId": "think-1"})).json()

    thoughts = _chunks(events, ReasoningDelta, "think-1")
    assert len(thoughts) > 1  # streamed in pieces, as text is
    assert "".join(chunk.delta for chunk in thoughts) == THOUGHT
    assert "".join(chunk.delta for chunk in _chunks(events, TextDelta, "think-1")) == ANSWER
    end = events[-1]
    assert isinstance(end, EndEvent)
    assert end.output == ANSWER  # the reasoning is no part of the answer
    # The reasoning the provider needs back is kept with the turn in the log.
    log = await store.read("think-1")
    (turn,) = [
        e.message
        for e in log
        if isinstance(e, MessageAppended) and isinstance(e.message, AssistantMessage)
    ]
    assert turn.reasoning == [ReasoningPart(text=THOUGHT, provider="scripted")]
    # Cached input and reasoning tokens are counted.
    usage = status["usage"]
    assert (usage["inputTokens"], usage["cachedInputTokens"]) == (1_200, 1_000)
    assert (usage["outputTokens"], usage["reasoningTokens"]) == (90, 60)
    assert usage["models"]["scripted"]["cachedInputTokens"] == 1_000


async def test_typed_output_streams_as_it_is_written_then_is_validated(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(agents(), MemoryEventStore()) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, "plan-1", "planner")
            events = await read_sse(client, url, "plan-1")
            partials = [
                e
                for e in events
                if isinstance(e, ChunkEvent) and isinstance(e.chunk, PartialOutput)
            ]
            # A reader resuming in the middle of the output gets the rest, each once.
            middle = partials[1].sequence
            resumed = await read_sse(
                client, url, "plan-1", None, headers={"Last-Event-ID": str(middle)}
            )

    values = [event.chunk.output for event in partials]
    assert len(values) >= 3
    assert all(isinstance(value, dict) for value in values)
    assert growing(values, TRIP)
    (output,) = [
        e for e in events if isinstance(e, ChunkEvent) and isinstance(e.chunk, OutputChunk)
    ]
    assert output.chunk.output == TRIP
    assert output.sequence > partials[-1].sequence
    end = events[-1]
    assert isinstance(end, EndEvent)
    assert end.output == TRIP
    assert "".join(c.delta for c in _chunks(events, ReasoningDelta, "plan-1")) == THOUGHT
    after = [
        (type(e.chunk), e.sequence, e.chunk.output)
        for e in resumed
        if isinstance(e, ChunkEvent) and isinstance(e.chunk, PartialOutput | OutputChunk)
    ]
    assert after == [
        *((PartialOutput, e.sequence, e.chunk.output) for e in partials[2:]),
        (OutputChunk, output.sequence, TRIP),
    ]
    assert resumed[-1] == end


async def test_a_childs_reasoning_and_output_so_far_reach_its_parents_stream(
    runtime: Runtime,
) -> None:
    store = MemoryEventStore()
    child = "lead-1-sub-c1"
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(agents(), store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, "lead-1", "lead")
            events = await read_sse(client, url, "lead-1")

    assert "".join(c.delta for c in _chunks(events, ReasoningDelta, "lead-1")) == LEAD_THOUGHT
    assert "".join(c.delta for c in _chunks(events, ReasoningDelta, child)) == THOUGHT
    values = [chunk.output for chunk in _chunks(events, PartialOutput, child)]
    assert len(values) >= 3
    assert growing(values, TRIP)
    assert [chunk.output for chunk in _chunks(events, OutputChunk, child)] == [TRIP]
    assert [chunk.output for chunk in _chunks(events, OutputChunk, "lead-1")] == [LEAD_ANSWER]
    assert project_state(await store.read("lead-1")).output == LEAD_ANSWER


@pytest.mark.parametrize("runtime", ["builtin"], indirect=True)
async def test_cached_input_and_reasoning_tokens_are_priced_apart(runtime: Runtime) -> None:
    price = ModelPrice(
        input_per_million=3.0,
        output_per_million=15.0,
        cached_input_per_million=0.3,
        reasoning_per_million=20.0,
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(agents(), store) as server,
            serve(create_http_app(server, prices={"scripted": price})) as url,
            httpx.AsyncClient() as client,
        ):
            await _started(runtime, server, "think-2", "thinker")
            snap = (await client.get(f"{url}/snapshot", params={"sessionId": "think-2"})).json()
            rollup = await server.executor.usage_rollup(
                "think-2", prices=Prices({"scripted": price})
            )

    uncached = USAGE.input_tokens - USAGE.cached_input_tokens
    answered = USAGE.output_tokens - USAGE.reasoning_tokens
    expected = (
        uncached * 3.0
        + USAGE.cached_input_tokens * 0.3
        + answered * 15.0
        + USAGE.reasoning_tokens * 20.0
    ) / 1_000_000
    node = snap["view"]["agents"]["think-2"]
    assert node["cost"] == {"usd": pytest.approx(expected), "unpriced": []}
    assert node["usage"]["cachedInputTokens"] == USAGE.cached_input_tokens
    assert (rollup.cached_input_tokens, rollup.reasoning_tokens) == (1_000, 60)
    assert rollup.cost_usd == pytest.approx(expected)
    # Not the price of the same tokens with nothing cached and no reasoning price.
    assert expected != pytest.approx(price.cost(USAGE.input_tokens, USAGE.output_tokens))
