"""Models by name: ``define_agent(model="openai:...")`` with the provider's usual variables.

The named model talks to a fake OpenAI-compatible server on uvicorn (loopback)
through ``OPENAI_BASE_URL``; the key goes out as the bearer token. Without a
key (or, for ``openai-compatible``, without a base URL) the definition still
works (a module naming a model imports without it), and running the agent is
one ``UsageError`` line naming the variable.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from responses_fake import Turn
from servers import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from helix_agents import AgentExecutor, define_agent
from helix_agents.errors import UsageError
from helix_agents.models.names import NamedModel, model_from_name
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore


def fake_openai(seen: list[dict[str, Any]]) -> Starlette:
    """Answers "hello from MODEL" on chat completions and on the Responses API; records each
    request's model, authorization and API."""

    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        seen.append(
            {"model": body["model"], "auth": request.headers.get("authorization"), "api": "chat"}
        )

        async def events() -> AsyncIterator[bytes]:
            delta = {"choices": [{"index": 0, "delta": {"content": f"hello from {body['model']}"}}]}
            yield b"data: " + json.dumps(delta).encode() + b"\n\n"
            yield b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def responses(request: Request) -> Response:
        body = await request.json()
        seen.append(
            {
                "model": body["model"],
                "auth": request.headers.get("authorization"),
                "api": "responses",
            }
        )
        return (
            Turn(model=body["model"]).message([f"hello from {body['model']}"]).completed().reply()()
        )

    return Starlette(
        routes=[
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/v1/responses", responses, methods=["POST"]),
        ]
    )


@pytest.mark.parametrize(
    ("name", "key", "auth", "api"),
    [
        ("openai:gpt-4o-mini", "sk-test", "Bearer sk-test", "responses"),
        ("openai-chat:gpt-4o-mini", "sk-test", "Bearer sk-test", "chat"),
        ("openai-compatible:llama3.2", None, None, "chat"),
        ("openai-compatible:llama3.2", "local-key", "Bearer local-key", "chat"),
    ],
)
async def test_a_named_model_calls_the_server_with_the_usual_variables(
    monkeypatch: pytest.MonkeyPatch, name: str, key: str | None, auth: str | None, api: str
) -> None:
    """``openai:`` speaks the Responses API, ``openai-chat:`` and ``openai-compatible:`` chat
    completions."""
    seen: list[dict[str, Any]] = []
    with anyio.fail_after(20):
        async with serve(fake_openai(seen)) as url:
            monkeypatch.setenv("OPENAI_BASE_URL", url + "/v1")
            if key is None:
                monkeypatch.delenv("OPENAI_API_KEY", raising=False)
            else:
                monkeypatch.setenv("OPENAI_API_KEY", key)
            agent = define_agent("greeter", model=name)
            async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
                first = await executor.run(agent, "hi")
                second = await executor.run(agent, "again")
    model = name.partition(":")[2]
    assert first == second == f"hello from {model}"
    assert seen == [{"model": model, "auth": auth, "api": api}] * 2
    assert isinstance(agent.llm, NamedModel)
    assert key is None or key not in repr(agent.llm)


async def test_openai_without_a_key_defines_and_refuses_to_run_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The name is checked at definition, the key when the agent runs: nothing is written."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = define_agent("a", model="openai:gpt-4o-mini")  # a module defining it imports
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        with pytest.raises(UsageError, match="set OPENAI_API_KEY") as caught:
            await executor.execute(agent, "hi", session_id="s")
        with pytest.raises(UsageError, match="set OPENAI_API_KEY"):
            await executor.run(agent, "hi")
    assert "\n" not in str(caught.value)
    assert await store.list_sessions() == []


async def test_a_run_started_without_the_key_fails_with_the_line_at_its_model_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """As a server starts it (no check before): the run fails, its error names the variable."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = define_agent("a", model="openai:gpt-4o-mini")
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            await executor.service.start(
                RemoteStartRequest(session_id="s", agent_type="a", message="hi")
            )
            await executor.wait_idle("s")
            state = await executor.state("s")
    assert state.status == "failed"
    assert state.error is not None
    assert "\n" not in state.error
    assert state.error.startswith("LLM call failed: model 'openai:gpt-4o-mini' needs an OpenAI")
    assert "set OPENAI_API_KEY" in state.error


def test_openai_compatible_without_a_base_url_names_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(UsageError, match="set OPENAI_BASE_URL"):
        model_from_name("openai-compatible:llama3.2")


@pytest.mark.parametrize(
    ("name", "needle"),
    [
        ("gpt-4o-mini", "expected PROVIDER:MODEL"),
        ("openai:", "expected PROVIDER:MODEL"),
        ("mistral:large", "unknown provider 'mistral'"),
    ],
)
def test_a_bad_model_name_is_a_usage_error(name: str, needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        define_agent("a", model=name)


async def test_a_bad_base_url_and_llm_with_model_are_usage_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_BASE_URL", "localhost:11434")
    agent = define_agent("a", model="openai:gpt-4o-mini")
    async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
        with pytest.raises(UsageError, match="OPENAI_BASE_URL must be an http"):
            await executor.execute(agent, "hi")
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(UsageError, match="not both"):
        define_agent("a", model="openai:gpt-4o-mini", llm=model_from_name("openai:gpt-4o"))
