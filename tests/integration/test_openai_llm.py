"""``OpenAIChatLLM`` against a fake OpenAI-compatible server on real uvicorn.

The fake records every request (body and headers) and answers byte for byte
in OpenAI's formats: ``chat.completion.chunk`` server-sent events ending in
``data: [DONE]``, a plain ``chat.completion`` JSON body, or OpenAI's error
shape ``{"error": {"message": ...}}``.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.to_thread
import httpx
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from helix_agents.errors import UsageError
from helix_agents.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.base import (
    LLMAdapter,
    LLMError,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
    TokenUsage,
    ToolSpec,
)
from helix_agents.models.openai import OpenAIChatLLM

pytestmark = pytest.mark.slow

Reply = Callable[[], Response]
HELLO = LLMRequest(messages=[UserMessage(content="Hello")])


# --- the fake server ---------------------------------------------------------


@dataclass
class Recorded:
    """One request the fake received: its JSON body and its (lower-cased) headers."""

    body: dict[str, Any]
    headers: dict[str, str]


class FakeOpenAI:
    """A scripted ``/v1/chat/completions``: plays ``replies`` in order, the last one repeating."""

    def __init__(self) -> None:
        self.base_url = ""
        self.requests: list[Recorded] = []
        self.replies: list[Reply] = []
        self.disconnected = threading.Event()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        self.requests.append(Recorded(await request.json(), dict(request.headers)))
        return self.replies[min(len(self.requests), len(self.replies)) - 1]()

    def endless(self) -> Response:
        """A reply that streams a text delta every few milliseconds until the client leaves."""
        return _Endless(self.disconnected)


class _Endless(Response):
    """Streams forever; sets ``disconnected`` once the ASGI ``http.disconnect`` arrives."""

    def __init__(self, disconnected: threading.Event) -> None:
        super().__init__()
        self.disconnected = disconnected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def drip() -> None:
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            while True:
                event = _event(chunk({"content": "tick"}))
                await send({"type": "http.response.body", "body": event, "more_body": True})
                await anyio.sleep(0.01)  # pacing, not synchronisation: "slowly, forever"

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drip)
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()
        finally:
            self.disconnected.set()


class _Uvicorn(uvicorn.Server):
    """A uvicorn server that says, through a ``threading.Event``, when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


@contextmanager
def serve(app: ASGIApp) -> Iterator[str]:
    """Run ``app`` on real uvicorn in a thread on an ephemeral loopback port; yield its URL."""
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=0,
        log_level="warning",
        lifespan="off",
        ws="none",
        timeout_graceful_shutdown=1,
    )
    server = _Uvicorn(config)
    thread = threading.Thread(target=server.run, name="fake-openai")
    thread.start()
    try:
        if not server.ready.wait(10) or not server.started:
            raise RuntimeError("uvicorn did not start")
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture
def fake() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI()
    with serve(server.app) as url:
        server.base_url = f"{url}/v1"
        yield server


# --- OpenAI's wire format ----------------------------------------------------


def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as OpenAI streams it (``usage`` null until the last)."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "gpt-fake",
        "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
        "usage": None,
    }


def usage_chunk(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The final chunk ``stream_options.include_usage`` asks for: no choices, only usage."""
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    return {**chunk({}), "choices": [], "usage": usage}


def start_call(index: int, call_id: str, name: str) -> dict[str, Any]:
    """The first fragment of a streamed tool call: its id and name, no arguments yet."""
    function = {"name": name, "arguments": ""}
    return {"index": index, "id": call_id, "type": "function", "function": function}


def more_args(index: int, piece: str) -> dict[str, Any]:
    """A later fragment: the next piece of the call's JSON arguments."""
    return {"index": index, "function": {"arguments": piece}}


def _event(data: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"


async def _parts(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def sse(
    *chunks: dict[str, Any], piece: int | None = None, preamble: bytes = b"", done: bool = True
) -> Reply:
    """A streamed reply: one body write per event, or ``piece``-byte writes cutting through them."""
    events = [preamble, *map(_event, chunks), b"data: [DONE]\n\n" if done else b""]
    body = b"".join(events)
    parts = [body[i : i + piece] for i in range(0, len(body), piece)] if piece else events
    return lambda: StreamingResponse(_parts(parts), media_type="text/event-stream")


def error(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    """OpenAI's error reply."""
    body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
    return lambda: JSONResponse(body, status_code=status, headers=headers)


HELLO_REPLY = sse(
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hi"}),
    chunk({}, "stop"),
    usage_chunk(3, 1),
)
HELLO_RESPONSE = LLMResponse(
    content="Hi",
    usage=TokenUsage(input_tokens=3, output_tokens=1),
    finish_reason="stop",
    model="gpt-fake",
)


async def collect(llm: LLMAdapter, request: LLMRequest = HELLO) -> list[LLMStreamEvent]:
    with anyio.fail_after(10):
        return [event async for event in llm.stream(request)]


def response_of(events: list[LLMStreamEvent]) -> LLMResponse:
    *_, last = events
    assert isinstance(last, LLMResponse)
    return last


# --- requests ----------------------------------------------------------------


async def test_request_is_mapped_to_openai_json_and_headers(fake: FakeOpenAI) -> None:
    fake.replies = [HELLO_REPLY]
    weather = {"type": "object", "properties": {"city": {"type": "string"}}}
    request = LLMRequest(
        system_prompt="Be brief.",
        messages=[
            UserMessage(content="Weather in Paris?"),
            AssistantMessage(
                tool_calls=[ToolCall(id="call_1", name="weather", arguments={"city": "Paris"})]
            ),
            ToolResultMessage(tool_call_id="call_1", tool_name="weather", content="18C"),
            # Invalid JSON the model produced earlier goes back verbatim.
            AssistantMessage(
                content="Logging.", tool_calls=[ToolCall(id="call_2", name="log", arguments="{bad")]
            ),
            ToolResultMessage(
                tool_call_id="call_2", tool_name="log", content="invalid JSON", is_error=True
            ),
            SystemMessage(content="Answer in French."),
            UserMessage(content="Merci"),
        ],
        tools=[
            ToolSpec(name="weather", description="Current weather", parameters=weather),
            ToolSpec(name="now"),
        ],
        model="gpt-override",
        temperature=0.2,
    )
    async with OpenAIChatLLM(
        "gpt-default",
        base_url=fake.base_url,
        api_key="sk-test",
        headers={"X-Tenant": "acme"},
        temperature=0.9,
        max_tokens=256,
    ) as llm:
        await collect(llm, request)

    [sent] = fake.requests
    assert sent.body == {
        "model": "gpt-override",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
            {
                "role": "assistant",
                "content": "Logging.",
                "tool_calls": [
                    {
                        "id": "call_2",
                        "type": "function",
                        "function": {"name": "log", "arguments": "{bad"},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_2", "content": "invalid JSON"},
            {"role": "system", "content": "Answer in French."},
            {"role": "user", "content": "Merci"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "weather",
                    "description": "Current weather",
                    "parameters": weather,
                },
            },
            {
                "type": "function",
                "function": {
                    "name": "now",
                    "description": "",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
        ],
        "temperature": 0.2,
        "max_tokens": 256,
    }
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.headers["x-tenant"] == "acme"
    assert sent.headers["content-type"] == "application/json"


@pytest.mark.parametrize("env_key", ["sk-env", None])
async def test_defaults_and_api_key_from_environment(
    fake: FakeOpenAI, monkeypatch: pytest.MonkeyPatch, env_key: str | None
) -> None:
    if env_key is None:
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    else:
        monkeypatch.setenv("OPENAI_API_KEY", env_key)
    fake.replies = [HELLO_REPLY]
    async with OpenAIChatLLM("gpt-default", base_url=fake.base_url + "/") as llm:
        await collect(llm)

    [sent] = fake.requests
    assert sent.body == {
        "model": "gpt-default",
        "messages": [{"role": "user", "content": "Hello"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    expected = None if env_key is None else f"Bearer {env_key}"
    assert sent.headers.get("authorization") == expected


# --- streamed replies ----------------------------------------------------------


async def test_streamed_text_arrives_as_deltas_then_one_response(fake: FakeOpenAI) -> None:
    fake.replies = [
        sse(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo, "}),
            chunk({"content": "wörld"}),
            chunk({}, "stop"),
            usage_chunk(9, 3),
            preamble=b": OPENROUTER PROCESSING\n\n",
        )
    ]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url) as llm:
        events = await collect(llm)

    assert events == [
        LLMTextDelta(text="Hel"),
        LLMTextDelta(text="lo, "),
        LLMTextDelta(text="wörld"),
        LLMResponse(
            content="Hello, wörld",
            usage=TokenUsage(input_tokens=9, output_tokens=3),
            finish_reason="stop",
            model="gpt-fake",
        ),
    ]


async def test_parallel_tool_calls_reassemble_from_fragments(fake: FakeOpenAI) -> None:
    fake.replies = [
        sse(
            chunk({"role": "assistant", "content": "Checking."}),
            chunk({"tool_calls": [start_call(0, "call_a", "weather")]}),
            chunk({"tool_calls": [start_call(1, "call_b", "time")]}),
            chunk({"tool_calls": [more_args(0, '{"ci')]}),
            chunk({"tool_calls": [more_args(1, '{"tz": "Eur')]}),
            chunk({"tool_calls": [more_args(0, 'ty": "Zü')]}),
            chunk(
                {"tool_calls": [more_args(1, 'ope/Paris"}'), more_args(0, 'rich", "u": ["C"]}')]}
            ),
            chunk({}, "tool_calls"),
            usage_chunk(20, 12),
            piece=7,  # cuts through events, lines and multi-byte characters
        )
    ]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url) as llm:
        events = await collect(llm)

    # Each fragment of a call's arguments streams as it comes, its id and name with the first.
    assert events == [
        LLMTextDelta(text="Checking."),
        LLMToolCallDelta(index=0, arguments="", id="call_a", name="weather"),
        LLMToolCallDelta(index=1, arguments="", id="call_b", name="time"),
        LLMToolCallDelta(index=0, arguments='{"ci'),
        LLMToolCallDelta(index=1, arguments='{"tz": "Eur'),
        LLMToolCallDelta(index=0, arguments='ty": "Zü'),
        LLMToolCallDelta(index=1, arguments='ope/Paris"}'),
        LLMToolCallDelta(index=0, arguments='rich", "u": ["C"]}'),
        LLMResponse(
            content="Checking.",
            tool_calls=[
                ToolCall(id="call_a", name="weather", arguments={"city": "Zürich", "u": ["C"]}),
                ToolCall(id="call_b", name="time", arguments={"tz": "Europe/Paris"}),
            ],
            usage=TokenUsage(input_tokens=20, output_tokens=12),
            finish_reason="tool_calls",
            model="gpt-fake",
        ),
    ]


async def test_invalid_tool_call_json_is_kept_raw(fake: FakeOpenAI) -> None:
    fake.replies = [
        sse(
            chunk({"tool_calls": [start_call(0, "call_a", "weather")]}),
            chunk({"tool_calls": [more_args(0, '{"city": ')]}),
            chunk({"tool_calls": [more_args(0, '"Par')]}),
            chunk({"tool_calls": [start_call(1, "call_b", "now")]}),
            chunk({}, "tool_calls"),
        )
    ]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url) as llm:
        response = response_of(await collect(llm))

    assert response.tool_calls == [
        ToolCall(id="call_a", name="weather", arguments='{"city": "Par'),
        ToolCall(id="call_b", name="now", arguments={}),
    ]
    assert response.usage is None


async def test_non_streamed_json_reply(fake: FakeOpenAI) -> None:
    body = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "llama3",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Let me check.",
                    "tool_calls": [
                        {
                            "id": "call_x",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city":"Oslo"}'},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
    }
    fake.replies = [lambda: JSONResponse(body)]
    async with OpenAIChatLLM("llama3", base_url=fake.base_url) as llm:
        events = await collect(llm)

    assert events == [
        LLMTextDelta(text="Let me check."),
        LLMToolCallDelta(index=0, arguments='{"city":"Oslo"}', id="call_x", name="weather"),
        LLMResponse(
            content="Let me check.",
            tool_calls=[ToolCall(id="call_x", name="weather", arguments={"city": "Oslo"})],
            usage=TokenUsage(input_tokens=5, output_tokens=7),
            finish_reason="tool_calls",
            model="llama3",
        ),
    ]


async def test_stream_cut_short_after_text_raises_without_retrying(fake: FakeOpenAI) -> None:
    fake.replies = [sse(chunk({"content": "Hel"}), done=False)]
    received: list[LLMStreamEvent] = []

    async def consume(llm: LLMAdapter) -> None:
        async for event in llm.stream(HELLO):
            received.append(event)

    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url, retry_base_delay=0) as llm:
        with anyio.fail_after(10), pytest.raises(LLMError) as caught:
            await consume(llm)

    assert received == [LLMTextDelta(text="Hel")]
    assert caught.value.retryable
    assert len(fake.requests) == 1


async def test_error_event_in_the_stream_raises_its_message(fake: FakeOpenAI) -> None:
    fake.replies = [sse({"error": {"message": "model overloaded", "type": "server_error"}})]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url) as llm:
        with pytest.raises(LLMError, match="model overloaded"):
            await collect(llm)


# --- retries and errors ------------------------------------------------------


async def test_429_is_retried_after_retry_after(fake: FakeOpenAI) -> None:
    fake.replies = [error(429, "Rate limit reached", {"Retry-After": "0"}), HELLO_REPLY]
    # A minute of backoff would trip collect()'s bound: Retry-After: 0 must win.
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url, retry_base_delay=60) as llm:
        events = await collect(llm)

    assert response_of(events).content == "Hi"
    assert len(fake.requests) == 2
    assert fake.requests[0].body == fake.requests[1].body


async def test_500_twice_then_success(fake: FakeOpenAI) -> None:
    fake.replies = [error(500, "boom"), error(500, "boom"), HELLO_REPLY]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url, retry_base_delay=0.001) as llm:
        events = await collect(llm)

    assert events == [LLMTextDelta(text="Hi"), HELLO_RESPONSE]
    assert len(fake.requests) == 3


async def test_500_beyond_max_retries_raises_retryable_error(fake: FakeOpenAI) -> None:
    fake.replies = [error(500, "The server had an error while processing your request.")]
    async with OpenAIChatLLM(
        "gpt-fake", base_url=fake.base_url, max_retries=2, retry_base_delay=0.001
    ) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm)

    assert caught.value.retryable
    assert caught.value.status == 500
    assert caught.value.message == "The server had an error while processing your request."
    assert len(fake.requests) == 3


async def test_400_raises_the_server_message_without_retrying(fake: FakeOpenAI) -> None:
    message = "Invalid 'messages[0].content': string too long."
    fake.replies = [error(400, message), HELLO_REPLY]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url, retry_base_delay=0) as llm:
        with pytest.raises(LLMError) as caught:
            await collect(llm)

    assert not caught.value.retryable
    assert caught.value.status == 400
    assert caught.value.message == message
    endpoint = f"{fake.base_url}/chat/completions"
    assert str(caught.value) == (
        f"LLM call failed (HTTP 400) for model 'gpt-fake' at {endpoint}: {message}"
    )
    assert len(fake.requests) == 1


async def test_connection_refused_raises_after_retries() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    attempts: list[httpx.Request] = []

    async def count(request: httpx.Request) -> None:
        attempts.append(request)

    async with httpx.AsyncClient(event_hooks={"request": [count]}) as client:
        llm = OpenAIChatLLM(
            "gpt-fake",
            base_url=f"http://127.0.0.1:{port}/v1",
            max_retries=2,
            retry_base_delay=0.001,
            client=client,
        )
        async with llm:
            with pytest.raises(LLMError) as caught:
                await collect(llm)
        assert not client.is_closed  # a client passed in belongs to its owner

    assert caught.value.retryable
    assert caught.value.status is None
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
    assert len(attempts) == 3


# --- cancellation --------------------------------------------------------------


async def test_cancelling_mid_stream_closes_the_connection(fake: FakeOpenAI) -> None:
    fake.replies = [fake.endless]
    received: list[LLMStreamEvent] = []
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url) as llm:
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                async for event in llm.stream(HELLO):
                    received.append(event)
                    scope.cancel()
            assert scope.cancelled_caught
            assert await anyio.to_thread.run_sync(fake.disconnected.wait, 5)

    assert received == [LLMTextDelta(text="tick")]


async def test_leaving_the_loop_under_aclosing_closes_the_connection(fake: FakeOpenAI) -> None:
    fake.replies = [fake.endless]
    async with OpenAIChatLLM("gpt-fake", base_url=fake.base_url) as llm:
        with anyio.fail_after(10):
            async with aclosing(llm.stream(HELLO)) as events:
                async for event in events:
                    assert event == LLMTextDelta(text="tick")
                    break
            assert await anyio.to_thread.run_sync(fake.disconnected.wait, 5)


@pytest.mark.parametrize(
    "base_url", ["localhost:8000/v1", "ftp://example.com/v1", "http://[::1/v1"]
)
def test_a_base_url_that_is_not_http_is_a_usage_error(base_url: str) -> None:
    with pytest.raises(UsageError, match="base_url"):
        OpenAIChatLLM("gpt-fake", base_url=base_url)
