"""A model reply that is not a reply, and every model failure, read as one line.

A fake OpenAI-compatible server on real uvicorn (loopback) answers
``POST /v1/chat/completions`` as each test says; the agent names it as
``model="openai-compatible:x"`` through ``OPENAI_BASE_URL`` and runs through
``AgentExecutor``. A ``200`` that holds no model reply (no ``choices``, an
empty turn, a body that is not JSON, a stream with no chunk) ends the run
``failed`` with an error naming what was wrong, never ``completed`` with
``''``; a refusal (401, 404, 429, 5xx), a port nobody listens on and a
silent server name the model, the endpoint and the fix.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
import pytest
from servers import closed_port, serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from helix_agents import AgentExecutor, define_agent
from helix_agents.errors import AgentRunError
from helix_agents.log.state import SessionState
from helix_agents.messages import UserMessage
from helix_agents.models import LLMError, OpenAIChatLLM
from helix_agents.models.base import LLMRequest
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

Reply = Callable[[], Response]


def app(reply: Reply, seen: list[dict[str, Any]] | None = None) -> Starlette:
    """A chat-completions route answering every call with ``reply()``."""

    async def completions(request: Request) -> Response:
        if seen is not None:
            seen.append(await request.json())
        return reply()

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def sse(*data: str) -> Reply:
    """An event stream of ``data:`` lines, as given (``[DONE]`` included only if given)."""
    body = "".join(f"data: {item}\n\n" for item in data).encode()

    async def parts() -> AsyncIterator[bytes]:
        yield body

    return lambda: StreamingResponse(parts(), media_type="text/event-stream")


def raw(body: str, media_type: str, status: int = 200) -> Reply:
    return lambda: Response(body, media_type=media_type, status_code=status)


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return lambda: JSONResponse(body, status_code=status, headers=headers)


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> str:
    choice = {"index": 0, "delta": delta, "finish_reason": finish_reason}
    return json.dumps({"id": "c", "model": "x", "choices": [choice]})


async def failed_run(
    monkeypatch: pytest.MonkeyPatch,
    base_url: str,
    *,
    key: str | None = "sk-test",
) -> SessionState:
    """Run an ``openai-compatible:x`` agent at ``base_url``; the run's end state."""
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    if key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", key)
    agent = define_agent("a", model="openai-compatible:x")
    async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
        handle = await executor.execute(agent, "hi", session_id="s")
        await handle.result()
        state = await executor.state("s")
        with pytest.raises(AgentRunError) as caught:  # run() says the same, in one line
            await executor.run(agent, "again", session_id="s2")
    assert state.error is not None
    assert state.error in str(caught.value)
    assert "\n" not in str(caught.value)
    return state


NOT_A_REPLY = {
    "json-without-choices": (
        lambda: JSONResponse({"not": "what you expected"}),
        'the reply has no choices: \'{"not":"what you expected"}\'',
    ),
    "stream-without-choices": (
        sse('{"not": "what you expected"}', "[DONE]"),
        'the reply has no choices: \'{"not": "what you expected"}\'',
    ),
    "json-empty-choice": (
        lambda: JSONResponse(
            {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": ""}},
                ]
            }
        ),
        "the reply holds no text and no tool call (finish_reason None)",
    ),
    "stream-empty-turn": (
        sse(chunk({"role": "assistant", "content": ""}), chunk({}, "stop"), "[DONE]"),
        "the reply holds no text and no tool call (finish_reason 'stop')",
    ),
    "stream-cut-by-the-token-limit": (
        sse(chunk({"content": ""}, "length"), "[DONE]"),
        "(finish_reason 'length': the token limit came first; raise max_tokens)",
    ),
    "json-that-is-not-json": (
        raw("<html>502 Bad Gateway</html>", "application/json"),
        "the reply is not a chat completion (JSON is malformed",
    ),
    "a-web-page": (
        raw("<html><body>Welcome to nginx!</body></html>", "text/html"),
        "the reply holds no chat completion chunk (it held text/html; charset=utf-8, "
        "'<html><body>Welcome to nginx!</body></html>')",
    ),
    "a-stream-of-nothing-but-done": (
        sse("[DONE]"),
        "the reply holds no chat completion chunk before [DONE]",
    ),
    "an-empty-stream": (sse(), "the reply holds no chat completion chunk (it held nothing)"),
}


@pytest.mark.parametrize(("reply", "what"), NOT_A_REPLY.values(), ids=NOT_A_REPLY.keys())
async def test_a_200_that_holds_no_model_reply_fails_the_run_naming_what_was_wrong(
    monkeypatch: pytest.MonkeyPatch, reply: Reply, what: str
) -> None:
    with anyio.fail_after(30):
        async with serve(app(reply)) as url:
            state = await failed_run(monkeypatch, f"{url}/v1")
    assert state.status == "failed"
    assert state.output is None
    assert state.error is not None
    assert state.error.startswith(
        f"LLM call failed for model 'x' at {url}/v1/chat/completions: "
    ), state.error
    assert what in state.error
    assert "\n" not in state.error


async def test_a_reply_without_choices_asks_whether_the_api_root_is_right(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with anyio.fail_after(30):
        async with serve(app(lambda: JSONResponse({"not": "what you expected"}))) as url:
            state = await failed_run(monkeypatch, f"{url}/v1")
    assert state.error is not None
    assert state.error.endswith(
        f"; is {url}/v1 an OpenAI-compatible API root? (from OPENAI_BASE_URL)"
    )


# --- refusals and networks: the model, the endpoint, the fix -------------------------


async def test_401_names_the_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    reply = error(401, "Incorrect API key provided: sk-wrong.")
    with anyio.fail_after(30):
        async with serve(app(reply)) as url:
            state = await failed_run(monkeypatch, f"{url}/v1", key="sk-wrong")
            no_key = await failed_run(monkeypatch, f"{url}/v1", key=None)
    assert state.error == (
        f"LLM call failed (HTTP 401) for model 'x' at {url}/v1/chat/completions: "
        "Incorrect API key provided: sk-wrong.; check the API key in OPENAI_API_KEY"
    )
    assert no_key.error is not None
    assert no_key.error.endswith("; no API key was sent: set OPENAI_API_KEY (or give api_key=)")


async def test_404_names_the_model_and_the_api_root(monkeypatch: pytest.MonkeyPatch) -> None:
    # The base URL lacks /v1: the server's own 404 page, not OpenAI's error shape.
    with anyio.fail_after(30):
        async with serve(app(error(500, "never reached"))) as url:
            state = await failed_run(monkeypatch, url)
    assert state.error == (
        f"LLM call failed (HTTP 404) for model 'x' at {url}/chat/completions: 'Not Found'; "
        f"check the model name 'x' and the API root {url} (from OPENAI_BASE_URL; most end in /v1)"
    )


@pytest.mark.parametrize(
    ("status", "needle"),
    [
        (429, "; the server is rate limiting (or the quota is spent): wait and try again"),
        (503, ": the model is overloaded"),
    ],
)
async def test_429_and_5xx_name_the_status_after_the_retries(
    monkeypatch: pytest.MonkeyPatch, status: int, needle: str
) -> None:
    seen: list[dict[str, Any]] = []
    reply = error(status, "the model is overloaded", {"Retry-After": "0"})
    with anyio.fail_after(30):
        async with serve(app(reply, seen)) as url:
            state = await failed_run(monkeypatch, f"{url}/v1")
    assert state.error is not None
    assert state.error.startswith(
        f"LLM call failed (HTTP {status}) for model 'x' at {url}/v1/chat/completions: "
        "the model is overloaded"
    )
    assert needle in state.error
    assert len(seen) == 2 * 4  # two runs, each the first try and 3 retries


async def test_a_refused_port_asks_whether_the_server_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    port = closed_port()
    with anyio.fail_after(30):
        state = await failed_run(monkeypatch, f"http://127.0.0.1:{port}/v1")
    assert state.error is not None
    assert state.error.startswith(
        f"LLM call failed for model 'x' at http://127.0.0.1:{port}/v1/chat/completions: "
        "cannot connect: "
    )
    assert state.error.endswith(
        f"; is a server running at http://127.0.0.1:{port}/v1? (from OPENAI_BASE_URL)"
    )


async def test_a_server_that_says_nothing_is_a_read_timeout() -> None:
    never = anyio.Event()

    async def silent() -> AsyncIterator[bytes]:
        await never.wait()  # the headers went out; the body never comes
        yield b""

    reply: Reply = lambda: StreamingResponse(silent(), media_type="text/event-stream")  # noqa: E731
    request = LLMRequest(messages=[UserMessage(content="hi")])
    with anyio.fail_after(30):
        async with serve(app(reply)) as url:
            async with OpenAIChatLLM(
                "x", base_url=f"{url}/v1", api_key="k", timeout=0.3, max_retries=0
            ) as llm:
                with pytest.raises(LLMError) as caught:
                    async for _ in llm.stream(request):
                        pass
            never.set()
    assert str(caught.value) == (
        f"LLM call failed for model 'x' at {url}/v1/chat/completions: "
        "the server sent nothing for 0.3 s (the read timeout)"
    )
    assert caught.value.retryable


async def test_truncated_arguments_from_the_server_reach_the_model_as_malformed_json(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The adapter keeps the broken JSON; the tool result the model reads says where it broke."""
    from helix_agents import tool

    @tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    seen: list[dict[str, Any]] = []
    call = {"index": 0, "id": "c1", "type": "function"}
    call["function"] = {"name": "word_count", "arguments": '{"text": "abc'}

    def reply() -> Response:
        if len(seen) == 1:
            return sse(chunk({"tool_calls": [call]}), chunk({}, "tool_calls"), "[DONE]")()
        return sse(chunk({"content": "sorry"}, "stop"), "[DONE]")()

    monkeypatch.setenv("OPENAI_API_KEY", "k")
    with anyio.fail_after(30):
        async with serve(app(reply, seen)) as url:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            agent = define_agent("counter", tools=[word_count], model="openai-compatible:x")
            async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
                assert await executor.run(agent, "count") == "sorry"  # the run went on
    [result] = [m for m in seen[1]["messages"] if m["role"] == "tool"]
    assert json.loads(result["content"]) == {
        "error": "invalid arguments: not valid JSON (Unterminated string starting at line 1 "
        'column 10): \'{"text": "abc\''
    }
