"""One HTTP client per model and event loop: connections reused across steps, closed with the
executor, never carried from one event loop to the next.

Fake servers on real uvicorn record the client address of every request:
distinct addresses are distinct TCP connections (each a TLS handshake on a
real network).
"""

from __future__ import annotations

import gc
import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from responses_fake import FakeResponses, Turn, serve_in_thread
from servers import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from helix_agents import AgentExecutor, define_agent, run_sync, tool
from helix_agents.models.connections import pools_of
from helix_agents.models.names import NamedModel
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

STEPS = 20


@tool
def tick(n: int) -> int:
    """Count one more."""
    return n + 1


def responses_answer(body: dict[str, Any]) -> Response:
    """Call ``tick`` until 19 results came back, then answer (20 model steps in all)."""
    done = sum(1 for item in body["input"] if item.get("type") == "function_call_output")
    if done < STEPS - 1:
        turn = Turn().call(f"call_{done}", "tick", [json.dumps({"n": done})])
    else:
        turn = Turn().message([f"counted {done}"])
    return turn.completed().reply()()


class FakeChat:
    """A chat-completions server doing the same, recording each request's client address."""

    def __init__(self) -> None:
        self.clients: list[tuple[str, int] | None] = []

    def app(self) -> Starlette:
        return Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        self.clients.append((request.client.host, request.client.port) if request.client else None)
        body = await request.json()
        done = sum(1 for message in body["messages"] if message["role"] == "tool")
        if done < STEPS - 1:
            call = {"index": 0, "id": f"c{done}", "type": "function"}
            call["function"] = {"name": "tick", "arguments": json.dumps({"n": done})}
            delta: dict[str, Any] = {"tool_calls": [call]}
            finish = "tool_calls"
        else:
            delta, finish = {"content": f"counted {done}"}, "stop"
        chunk = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": delta}]}
        end = {"id": "x", "model": "m", "choices": [{"index": 0, "delta": {}}]}
        end["choices"][0]["finish_reason"] = finish

        async def events() -> AsyncIterator[bytes]:
            for data in (chunk, end):
                yield b"data: " + json.dumps(data).encode() + b"\n\n"
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")


@pytest.mark.parametrize("name", ["openai:gpt-4o-mini", "openai-compatible:llama3.2"])
async def test_twenty_steps_go_over_one_connection_closed_with_the_executor(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """Before: a new client, so a new connection, per model call (20 handshakes a run)."""
    responses, chat = FakeResponses(answer=responses_answer), FakeChat()
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent("counter", tools=[tick], model=name, max_steps=STEPS + 1)
    with anyio.fail_after(30):
        async with (
            serve(responses.app()) as responses_url,
            serve(chat.app()) as chat_url,
        ):
            url = responses_url if name.startswith("openai:") else chat_url
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
                assert await executor.run(agent, "count") == f"counted {STEPS - 1}"
                open_during = sum(pool.open for pool in pools_of(agent.llm))
            open_after = sum(pool.open for pool in pools_of(agent.llm))
    clients = [r.client for r in responses.requests] or chat.clients
    assert len(clients) == STEPS
    assert len(set(clients)) == 1  # one TCP connection (one handshake) for the 20 steps
    assert (open_during, open_after) == (1, 0)  # the executor closed the client


async def test_an_executor_closing_leaves_the_client_another_one_holds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeResponses(replies=[Turn().message(["hi"]).completed().reply()])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent("greeter", model="openai:gpt-4o-mini")
    with anyio.fail_after(30):
        async with serve(server.app()) as url:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            async with AgentExecutor(MemoryEventStore(), [agent]) as second:
                async with AgentExecutor(MemoryEventStore(), [agent]) as first:
                    assert await first.run(agent, "one") == "hi"
                    assert await second.run(agent, "two") == "hi"
                # the first one closed: the client the second one holds is still open
                assert await second.run(agent, "three") == "hi"
                assert sum(pool.open for pool in pools_of(agent.llm)) == 1
            assert sum(pool.open for pool in pools_of(agent.llm)) == 0
    assert server.connections == 1


GREETER = define_agent("greeter", model="openai:gpt-4o-mini")  # as a module would define it


def test_run_sync_twice_runs_on_two_event_loops_without_carrying_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each ``run_sync`` is an event loop of its own: the second makes its own client."""
    server = FakeResponses(replies=[Turn().message(["hi ", "there"]).completed().reply()])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with serve_in_thread(server.app()) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        first = run_sync(GREETER, "hello", store=MemoryEventStore())
        second = run_sync(GREETER, "hello again", store=MemoryEventStore())
    assert first == second == "hi there"
    assert len(server.requests) == 2
    assert server.connections == 2  # one per event loop, each closed with its executor
    assert sum(pool.open for pool in pools_of(GREETER.llm)) == 0


# The dropped client was never closed: its socket goes with the garbage (a ResourceWarning).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_client_whose_loop_ended_is_dropped_not_reused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Used outside an executor and never closed: the next loop makes a client of its own."""
    server = FakeResponses(replies=[Turn().message(["hi"]).completed().reply()])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    model = NamedModel("openai:gpt-4o-mini")
    from helix_agents.messages import UserMessage
    from helix_agents.models import LLMRequest

    request = LLMRequest(messages=[UserMessage(content="hi")])

    async def call() -> None:
        async for _ in model.stream(request):
            pass

    with serve_in_thread(server.app()) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        # another event loop, in a thread: its client stays behind, unclosed
        await anyio.to_thread.run_sync(lambda: anyio.run(call))
        [pool] = pools_of(model)
        assert pool.open == 1
        await call()  # this loop: the dead loop's client is dropped, a new one made
        assert pool.open == 1
        gc.collect()  # the dropped client's socket, here rather than in a later test
        await model.aclose()
        assert pool.open == 0
    assert server.connections == 2
