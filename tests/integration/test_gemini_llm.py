"""``GeminiLLM`` through Google's own SDK against a fake Gemini API on real uvicorn.

The fake (``provider_fakes.FakeGemini``) answers
``POST /v1beta/models/{model}:streamGenerateContent?alt=sse`` with the JSON
chunks Gemini's REST reference documents, so the SDK parses them as it parses
Google's; it records each request, so the tests see what went out (the
thought signatures sent back, the function responses).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from provider_fakes import (
    FakeGemini,
    cut_stream,
    endless_stream,
    gemini_bytes,
    gemini_chunk,
    gemini_error,
    gemini_stream,
    gemini_usage,
    retry_info,
    signature,
)
from servers import closed_port, serve

from helix_agents import AgentExecutor, define_agent, tool
from helix_agents.errors import UsageError
from helix_agents.messages import (
    AssistantMessage,
    ReasoningPart,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.base import (
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
    TokenUsage,
    ToolSpec,
)
from helix_agents.models.google import GENERATED_ID_PREFIX, GeminiLLM
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

HELLO = LLMRequest(messages=[UserMessage(content="Hello")], session_id="s-1")
STOP = gemini_chunk(finish_reason="STOP", usage=gemini_usage(8, 2))


@pytest.fixture
async def fake() -> AsyncIterator[FakeGemini]:
    server = FakeGemini()
    async with serve(server.app) as url:
        server.url = url
        yield server


def gemini(fake: FakeGemini, **options: Any) -> GeminiLLM:
    return GeminiLLM("gemini-test", base_url=fake.url, api_key="gk-test", **options)


def endpoint(fake: FakeGemini) -> str:
    return f"{fake.url}/v1beta/models/gemini-test:streamGenerateContent"


async def collect(llm: GeminiLLM, request: LLMRequest = HELLO) -> list[LLMStreamEvent]:
    with anyio.fail_after(20):
        return [event async for event in llm.stream(request)]


def response_of(events: list[LLMStreamEvent]) -> LLMResponse:
    *_, last = events
    assert isinstance(last, LLMResponse)
    return last


async def failure(
    llm: GeminiLLM, request: LLMRequest = HELLO, seen: list[LLMStreamEvent] | None = None
) -> LLMError:
    """The ``LLMError`` the call ends in (what it yielded before goes into ``seen``)."""
    seen = [] if seen is None else seen
    with anyio.fail_after(20):
        try:
            async for event in llm.stream(request):
                seen.append(event)
        except LLMError as exc:
            return exc
    raise AssertionError(f"the call ended without an LLMError: {seen}")


# --- text and the request ---------------------------------------------------------


async def test_text_streams_as_deltas_then_one_response(fake: FakeGemini) -> None:
    fake.replies = [
        gemini_stream(
            gemini_chunk({"text": "Hel"}, usage=gemini_usage(8, 1)),
            gemini_chunk({"text": "lo"}, finish_reason="STOP", usage=gemini_usage(8, 2)),
        )
    ]
    async with gemini(fake) as llm:
        events = await collect(llm, LLMRequest(messages=HELLO.messages, system_prompt="Be brief."))
    assert events == [
        LLMTextDelta(text="Hel"),
        LLMTextDelta(text="lo"),
        LLMResponse(
            content="Hello",
            usage=TokenUsage(input_tokens=8, output_tokens=2),
            finish_reason="stop",
            model="gemini-fake-1",
        ),
    ]
    [sent] = fake.requests
    assert (sent.path, sent.query) == (
        "/v1beta/models/gemini-test:streamGenerateContent",
        {"alt": "sse"},
    )
    assert sent.headers["x-goog-api-key"] == "gk-test"
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "Hello"}]}]
    assert sent.body["systemInstruction"]["parts"] == [{"text": "Be brief."}]
    thinking = sent.body["generationConfig"]["thinkingConfig"]
    assert thinking in ({"includeThoughts": True}, {"include_thoughts": True})  # SDKs differ
    assert "tools" not in sent.body


async def test_the_conversation_maps_onto_contents(fake: FakeGemini) -> None:
    """Tool results share one user turn as function responses; system messages join the
    instruction; calls keep Gemini's own ids, never the ones made up for it."""
    fake.replies = [gemini_stream(gemini_chunk({"text": "ok"}, finish_reason="STOP"))]
    made_up = GENERATED_ID_PREFIX + "abc"
    request = LLMRequest(
        system_prompt="Be brief.",
        tools=[
            ToolSpec(
                name="weather",
                description="The weather in a city.",
                parameters={"type": "object", "properties": {"city": {"type": "string"}}},
            )
        ],
        temperature=0.2,
        max_tokens=100,
        messages=[
            SystemMessage(content="Use Celsius."),
            UserMessage(content="Weather?"),
            AssistantMessage(
                content="Looking.",
                tool_calls=[
                    ToolCall(id="g-1", name="weather", arguments={"city": "Paris"}),
                    ToolCall(id=made_up, name="weather", arguments={"city": "Lyon"}),
                ],
            ),
            ToolResultMessage(tool_call_id="g-1", tool_name="weather", content="18C"),
            ToolResultMessage(
                tool_call_id=made_up, tool_name="weather", content="no data", is_error=True
            ),
        ],
    )
    async with gemini(fake) as llm:
        await collect(llm, request)
    body = fake.requests[0].body
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "Weather?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "Looking."},
                {"functionCall": {"id": "g-1", "name": "weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "weather", "args": {"city": "Lyon"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {
                    "functionResponse": {
                        "id": "g-1",
                        "name": "weather",
                        "response": {"output": "18C"},
                    }
                },
                {"functionResponse": {"name": "weather", "response": {"error": "no data"}}},
            ],
        },
    ]
    assert body["systemInstruction"]["parts"] == [{"text": "Be brief.\n\nUse Celsius."}]
    [declaration] = body["tools"][0]["functionDeclarations"]
    assert declaration["name"] == "weather"
    schema = declaration.get("parametersJsonSchema", declaration.get("parameters_json_schema"))
    assert schema == {"type": "object", "properties": {"city": {"type": "string"}}}
    config = body["generationConfig"]
    assert (config["temperature"], config["maxOutputTokens"]) == (0.2, 100)


# --- function calls -------------------------------------------------------------------------


async def test_each_whole_call_is_one_piece_and_ids_are_made_deterministically(
    fake: FakeGemini,
) -> None:
    reply = gemini_stream(
        gemini_chunk({"text": "Checking."}),
        gemini_chunk({"functionCall": {"name": "weather", "args": {"city": "Paris"}}}),
        gemini_chunk(
            {"functionCall": {"name": "weather", "args": {"city": "Lyon"}}},
            {"functionCall": {"id": "g-own", "name": "noop"}},
            finish_reason="STOP",
        ),
    )
    fake.replies = [reply]
    async with gemini(fake) as llm:
        first = await collect(llm)
        again = await collect(llm)
        elsewhere = await collect(llm, LLMRequest(messages=HELLO.messages, session_id="s-2"))
    pieces = [e for e in first if isinstance(e, LLMToolCallDelta)]
    assert [(p.index, p.name, p.arguments) for p in pieces] == [
        (0, "weather", '{"city":"Paris"}'),
        (1, "weather", '{"city":"Lyon"}'),
        (2, "noop", "{}"),
    ]
    response = first[-1]
    assert isinstance(response, LLMResponse)
    assert (response.content, response.finish_reason) == ("Checking.", "tool_calls")
    assert [(c.name, c.arguments) for c in response.tool_calls] == [
        ("weather", {"city": "Paris"}),
        ("weather", {"city": "Lyon"}),
        ("noop", {}),
    ]
    ids = [c.id for c in response.tool_calls]
    assert [p.id for p in pieces] == ids
    assert ids[2] == "g-own"  # Gemini's own id is kept
    assert ids[0].startswith(GENERATED_ID_PREFIX)
    assert ids[0] != ids[1]
    assert [c.id for c in response_of(again).tool_calls] == ids  # the same reply, the same ids
    assert [c.id for c in response_of(elsewhere).tool_calls][:2] != ids[:2]


async def test_a_malformed_function_call_is_a_bad_reply_to_retry(fake: FakeGemini) -> None:
    """Gemini parses the model's arguments itself: JSON it cannot read ends the turn so."""
    fake.replies = [
        gemini_stream(
            {
                "candidates": [
                    {
                        "content": {"parts": [], "role": "model"},
                        "finishReason": "MALFORMED_FUNCTION_CALL",
                        "finishMessage": "Malformed function call: weather{city: Paris",
                        "index": 0,
                    }
                ],
                "modelVersion": "gemini-fake-1",
            }
        )
    ]
    async with gemini(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("bad_reply", True)
    assert str(error) == (
        f"LLM call failed for model 'gemini-test' at {endpoint(fake)}: the model wrote a "
        "malformed function call (finish_reason MALFORMED_FUNCTION_CALL)"
    )  # the SDK drops the Gemini API's finishMessage


# --- thinking and caching ---------------------------------------------------------------


async def test_thoughts_stream_as_reasoning_and_signatures_are_kept(fake: FakeGemini) -> None:
    fake.replies = [
        gemini_stream(
            gemini_chunk({"text": "Let me ", "thought": True}),
            gemini_chunk({"text": "think.", "thought": True}),
            gemini_chunk({"text": "42", "thoughtSignature": signature("on-text")}),
            gemini_chunk(finish_reason="STOP", usage=gemini_usage(9, 1, thoughts=30)),
        )
    ]
    async with gemini(fake, thinking_budget=1024) as llm:
        events = await collect(llm)
    assert events[:-1] == [
        LLMReasoningDelta(text="Let me "),
        LLMReasoningDelta(text="think."),
        LLMTextDelta(text="42"),
    ]
    response = events[-1]
    assert isinstance(response, LLMResponse)
    assert response.content == "42"
    assert response.reasoning == [
        ReasoningPart(text="Let me think.", provider="google"),
        ReasoningPart(provider="google", data={"signature": signature("on-text"), "on": "text"}),
    ]
    assert response.usage == TokenUsage(input_tokens=9, output_tokens=31, reasoning_tokens=30)
    thinking = fake.requests[0].body["generationConfig"]["thinkingConfig"]
    assert thinking.get("thinkingBudget", thinking.get("thinking_budget")) == 1024


async def test_an_agent_sends_thought_signatures_back_on_their_parts(fake: FakeGemini) -> None:
    """Gemini needs each signature back on the part it came with (the call's, the thought's)."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"18C in {city}"

    fake.replies = [
        gemini_stream(
            gemini_chunk(
                {"text": "I need the weather.", "thought": True, "thoughtSignature": signature("t")}
            ),
            gemini_chunk(
                {
                    "functionCall": {"name": "weather", "args": {"city": "Paris"}},
                    "thoughtSignature": signature("call"),
                },
                finish_reason="STOP",
            ),
        ),
        gemini_stream(gemini_chunk({"text": "It is 18C."}, finish_reason="STOP")),
    ]
    async with gemini(fake) as llm:
        agent = define_agent("forecaster", tools=[weather], llm=llm)
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            with anyio.fail_after(30):
                assert await executor.run(agent, "Weather in Paris?") == "It is 18C."
    _, model_turn, results = fake.requests[1].body["contents"]
    assert model_turn == {
        "role": "model",
        "parts": [
            {"text": "I need the weather.", "thought": True, "thoughtSignature": signature("t")},
            {
                "functionCall": {"name": "weather", "args": {"city": "Paris"}},
                "thoughtSignature": signature("call"),
            },
        ],
    }
    assert results == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "weather", "response": {"output": "18C in Paris"}}}
        ],
    }


async def test_cached_and_thought_tokens_are_counted(fake: FakeGemini) -> None:
    fake.replies = [
        gemini_stream(
            gemini_chunk(
                {"text": "ok"},
                finish_reason="STOP",
                usage=gemini_usage(5000, 4, cached=4096, thoughts=20),
            )
        )
    ]
    async with gemini(fake) as llm:
        response = (await collect(llm))[-1]
    assert isinstance(response, LLMResponse)
    assert response.usage == TokenUsage(
        input_tokens=5000, output_tokens=24, cached_input_tokens=4096, reasoning_tokens=20
    )


# --- errors ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(
            gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded.", details=[retry_info("7s")]),
            id="RetryInfo",
        ),
        pytest.param(
            gemini_error(
                429, "RESOURCE_EXHAUSTED", "Quota exceeded.", headers={"retry-after": "7"}
            ),
            id="Retry-After",
        ),
    ],
)
async def test_429_is_a_rate_limit_with_its_retry_delay_and_no_retry_of_its_own(
    fake: FakeGemini, reply: Any
) -> None:
    fake.replies = [reply, gemini_stream(gemini_chunk({"text": "late"}, finish_reason="STOP"))]
    async with gemini(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retry_after, error.status, error.retryable) == (
        "rate_limit",
        7.0,
        429,
        True,
    )
    assert str(error) == (
        f"LLM call failed (HTTP 429) for model 'gemini-test' at {endpoint(fake)}: "
        "RESOURCE_EXHAUSTED: Quota exceeded.; Gemini is rate limiting (or the quota is spent): "
        "retry after 7 s"
    )
    assert len(fake.requests) == 1  # the SDK's own retries are off: the shared layer retries


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (
            gemini_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
            "overloaded",
        ),
        (gemini_error(500, "INTERNAL", "An internal error has occurred."), "server"),
        (
            gemini_error(
                400,
                "INVALID_ARGUMENT",
                "The input token count (1200000) exceeds the maximum number of tokens allowed "
                "(1048576).",
            ),
            "context_length",
        ),
    ],
)
async def test_server_errors_have_their_kind(fake: FakeGemini, reply: Any, kind: str) -> None:
    fake.replies = [reply]
    async with gemini(fake) as llm:
        error = await failure(llm)
    assert error.kind == kind
    assert error.retryable is (kind != "context_length")
    assert "\n" not in str(error)
    assert len(fake.requests) == 1


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(
            cut_stream(gemini_bytes(gemini_chunk({"text": "Hel"}))), id="connection-dropped"
        ),
        pytest.param(gemini_stream(gemini_chunk({"text": "Hel"})), id="no-finish-reason"),
    ],
)
async def test_a_stream_cut_mid_way_is_an_error_not_an_empty_turn(
    fake: FakeGemini, reply: Any
) -> None:
    fake.replies = [reply]
    seen: list[LLMStreamEvent] = []
    async with gemini(fake) as llm:
        error = await failure(llm, HELLO, seen)
    assert (error.kind, error.retryable) == ("connection", True)
    assert seen == [LLMTextDelta(text="Hel")]  # no response after
    assert "\n" not in str(error)


async def test_an_error_chunk_mid_stream_is_the_providers_error(fake: FakeGemini) -> None:
    fake.replies = [
        gemini_stream(
            gemini_chunk({"text": "Hel"}),
            {
                "error": {
                    "code": 503,
                    "message": "The model is overloaded.",
                    "status": "UNAVAILABLE",
                }
            },
        )
    ]
    async with gemini(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("overloaded", True)
    assert "the stream broke off with an error: UNAVAILABLE: The model is overloaded." in str(error)


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(gemini_error(401, "UNAUTHENTICATED", "API keys are not supported."), id="401"),
        pytest.param(
            gemini_error(
                400,
                "INVALID_ARGUMENT",
                "API key not valid. Please pass a valid API key.",
                details=[
                    {
                        "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                        "reason": "API_KEY_INVALID",
                    }
                ],
            ),
            id="400-API_KEY_INVALID",
        ),
    ],
)
async def test_a_bad_key_is_one_line_naming_its_variable(
    fake: FakeGemini, monkeypatch: pytest.MonkeyPatch, reply: Any
) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "gk-wrong")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake.url)
    fake.replies = [reply]
    async with GeminiLLM("gemini-test") as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("auth", False)
    assert str(error).endswith("; check the API key in GOOGLE_API_KEY")
    assert "\n" not in str(error)
    assert fake.requests[0].headers["x-goog-api-key"] == "gk-wrong"


@pytest.mark.parametrize(
    ("chunk", "why"),
    [
        (
            {"promptFeedback": {"blockReason": "SAFETY"}, "modelVersion": "m"},
            "prompt blocked: SAFETY",
        ),
        (gemini_chunk({"text": "I"}, finish_reason="SAFETY"), "finish_reason SAFETY"),
    ],
)
async def test_a_safety_block_is_refused(fake: FakeGemini, chunk: dict[str, Any], why: str) -> None:
    fake.replies = [gemini_stream(chunk)]
    async with gemini(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("refused", False)
    assert f"Gemini refused to answer ({why})" in str(error)


async def test_no_server_is_a_connection_error_naming_the_address() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with GeminiLLM("gemini-test", base_url=url, api_key="k") as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("connection", True)
    assert error.hint == f"is a server running at {url}? (from base_url)"


async def test_cancelling_mid_stream_closes_the_connection(fake: FakeGemini) -> None:
    disconnected = anyio.Event()
    [tick] = gemini_bytes(gemini_chunk({"text": "tick"}))
    fake.replies = [endless_stream([], tick, disconnected)]
    received: list[LLMStreamEvent] = []
    async with gemini(fake) as llm:
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                async for event in llm.stream(HELLO):
                    received.append(event)
                    scope.cancel()
            assert scope.cancelled_caught
            await disconnected.wait()
    assert received == [LLMTextDelta(text="tick")]


def test_no_key_and_a_bad_base_url_are_usage_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    with pytest.raises(UsageError) as caught:
        GeminiLLM("gemini-test")
    assert str(caught.value) == (
        "GeminiLLM('gemini-test') needs an API key: set GEMINI_API_KEY or GOOGLE_API_KEY "
        "(or give api_key=)"
    )
    with pytest.raises(UsageError) as caught:
        GeminiLLM("gemini-test", api_key="k", base_url="localhost:8000")
    assert str(caught.value) == "base_url must be an http(s) URL, not 'localhost:8000'"
