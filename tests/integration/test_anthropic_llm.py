"""``AnthropicLLM`` through Anthropic's own SDK against a fake Messages API on real uvicorn.

The fake (``provider_fakes.FakeAnthropic``) answers ``POST /v1/messages`` with
the server-sent events Anthropic's API reference documents, so the SDK parses
them as it parses Anthropic's; it records each request, so the tests see what
went out on the wire (the kept thinking sent back, the cache marks).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from provider_fakes import (
    MESSAGE_STOP,
    FakeAnthropic,
    anthropic_bytes,
    anthropic_error,
    anthropic_error_event,
    anthropic_stream,
    anthropic_text_turn,
    cut_stream,
    endless_stream,
    message_delta,
    message_start,
    redacted_thinking_block,
    text_block,
    thinking_block,
    tool_use_block,
)
from servers import closed_port, serve

from helix_agents import AgentExecutor, define_agent, tool
from helix_agents.errors import UsageError
from helix_agents.messages import (
    AssistantMessage,
    ReasoningPart,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.anthropic import AnthropicLLM
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
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

HELLO = LLMRequest(messages=[UserMessage(content="Hello")])
WEATHER = ToolSpec(
    name="weather",
    description="The weather in a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
async def fake() -> AsyncIterator[FakeAnthropic]:
    server = FakeAnthropic()
    async with serve(server.app) as url:
        server.url = url
        yield server


def claude(fake: FakeAnthropic, **options: Any) -> AnthropicLLM:
    return AnthropicLLM("claude-test", base_url=fake.url, api_key="sk-ant-test", **options)


async def collect(llm: AnthropicLLM, request: LLMRequest = HELLO) -> list[LLMStreamEvent]:
    with anyio.fail_after(20):
        return [event async for event in llm.stream(request)]


async def failure(
    llm: AnthropicLLM, request: LLMRequest = HELLO, seen: list[LLMStreamEvent] | None = None
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


async def test_text_streams_as_deltas_then_one_response(fake: FakeAnthropic) -> None:
    fake.replies = [anthropic_stream(*anthropic_text_turn("Hel", "lo", model="claude-test-0929"))]
    async with claude(fake) as llm:
        events = await collect(
            llm, LLMRequest(messages=[UserMessage(content="Hi")], system_prompt="Be brief.")
        )
    assert events == [
        LLMTextDelta(text="Hel"),
        LLMTextDelta(text="lo"),
        LLMResponse(
            content="Hello",
            usage=TokenUsage(input_tokens=10, output_tokens=5),
            finish_reason="stop",
            model="claude-test-0929",
        ),
    ]
    [sent] = fake.requests
    assert sent.body == {
        "model": "claude-test",
        "max_tokens": 8192,
        "stream": True,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}],
            }
        ],
    }
    assert "sk-ant-test" in (
        sent.headers.get("x-api-key", "") + sent.headers.get("authorization", "")
    )
    assert sent.headers["anthropic-version"]


async def test_the_conversation_maps_onto_messages(fake: FakeAnthropic) -> None:
    """Tool results share one user turn (``is_error`` kept); cache marks on the last tool and block.

    No temperature goes out: API version 2026-10-21 refuses sampling parameters.
    """
    fake.replies = [anthropic_stream(*anthropic_text_turn("ok"))]
    calls = [
        ToolCall(id="toolu_1", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_2", name="weather", arguments='{"city": "Lyo'),  # the model's bad JSON
    ]
    request = LLMRequest(
        system_prompt="Be brief.",
        tools=[WEATHER, ToolSpec(name="noop")],
        temperature=0.2,
        max_tokens=100,
        messages=[
            UserMessage(content="Weather?"),
            AssistantMessage(content="Looking.", tool_calls=calls),
            ToolResultMessage(tool_call_id="toolu_1", tool_name="weather", content="18C"),
            ToolResultMessage(
                tool_call_id="toolu_2", tool_name="weather", content="bad JSON", is_error=True
            ),
            UserMessage(content="And?"),
        ],
    )
    async with claude(fake) as llm:
        await collect(llm, request)
    body = fake.requests[0].body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "weather",
                    "input": {"city": "Paris"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": "bad JSON",
                    "is_error": True,
                },
                {"type": "text", "text": "And?", "cache_control": {"type": "ephemeral"}},
            ],
        },
    ]
    assert body["tools"] == [
        {
            "name": "weather",
            "description": "The weather in a city.",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {
            "name": "noop",
            "description": "",
            "input_schema": {"type": "object", "properties": {}},
            "cache_control": {"type": "ephemeral"},
        },
    ]
    assert body["max_tokens"] == 100
    assert "temperature" not in body


async def test_cache_false_marks_nothing(fake: FakeAnthropic) -> None:
    fake.replies = [anthropic_stream(*anthropic_text_turn("ok"))]
    async with claude(fake, cache=False) as llm:
        await collect(llm, LLMRequest(messages=HELLO.messages, system_prompt="S", tools=[WEATHER]))
    assert "cache_control" not in json.dumps(fake.requests[0].body)


# --- tool calls -------------------------------------------------------------------------


async def test_one_tool_call_with_arguments_split_across_events(fake: FakeAnthropic) -> None:
    fake.replies = [
        anthropic_stream(
            message_start(),
            *tool_use_block(0, "toolu_1", "weather", "", '{"ci', 'ty": "Pa', 'ris"}'),
            message_delta("tool_use", 12),
            MESSAGE_STOP,
        )
    ]
    async with claude(fake) as llm:
        events = await collect(llm)
    assert events[:-1] == [
        LLMToolCallDelta(index=0, id="toolu_1", name="weather"),
        LLMToolCallDelta(index=0, arguments='{"ci'),
        LLMToolCallDelta(index=0, arguments='ty": "Pa'),
        LLMToolCallDelta(index=0, arguments='ris"}'),
    ]
    response = events[-1]
    assert isinstance(response, LLMResponse)
    assert response.tool_calls == [
        ToolCall(id="toolu_1", name="weather", arguments={"city": "Paris"})
    ]
    assert (response.content, response.finish_reason) == ("", "tool_calls")


async def test_several_tool_calls_after_text_keep_their_order(fake: FakeAnthropic) -> None:
    fake.replies = [
        anthropic_stream(
            message_start(),
            *text_block(0, "Checking both."),
            *tool_use_block(1, "toolu_a", "weather", '{"city":', ' "Paris"}'),
            *tool_use_block(2, "toolu_b", "weather", '{"city": "Ly', 'on"}'),
            *tool_use_block(3, "toolu_c", "noop"),  # no input deltas: {}
            message_delta("tool_use"),
            MESSAGE_STOP,
        )
    ]
    async with claude(fake) as llm:
        events = await collect(llm)
    pieces = [e for e in events if isinstance(e, LLMToolCallDelta)]
    assert [(p.index, p.id, p.arguments) for p in pieces] == [
        (0, "toolu_a", ""),
        (0, None, '{"city":'),
        (0, None, ' "Paris"}'),
        (1, "toolu_b", ""),
        (1, None, '{"city": "Ly'),
        (1, None, 'on"}'),
        (2, "toolu_c", ""),
    ]
    response = events[-1]
    assert isinstance(response, LLMResponse)
    assert response.content == "Checking both."
    assert response.tool_calls == [
        ToolCall(id="toolu_a", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="toolu_b", name="weather", arguments={"city": "Lyon"}),
        ToolCall(id="toolu_c", name="noop", arguments={}),
    ]


async def test_malformed_json_arguments_reach_the_model_as_a_tool_error(
    fake: FakeAnthropic,
) -> None:
    """The adapter keeps the broken JSON as the raw string; the run tells the model what broke."""

    @tool
    def word_count(text: str) -> int:
        """Count the words of a text."""
        return len(text.split())

    fake.replies = [
        anthropic_stream(
            message_start(),
            *tool_use_block(0, "toolu_1", "word_count", '{"text": ', '"abc'),
            message_delta("tool_use"),
            MESSAGE_STOP,
        ),
        anthropic_stream(*anthropic_text_turn("sorry")),
    ]
    async with claude(fake) as llm:
        agent = define_agent("counter", tools=[word_count], llm=llm)
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            with anyio.fail_after(30):
                assert await executor.run(agent, "count") == "sorry"
    [result] = [
        block
        for message in fake.requests[1].body["messages"]
        for block in message["content"]
        if block["type"] == "tool_result"
    ]
    assert json.loads(result["content"]) == {
        "error": "invalid arguments: not valid JSON (Unterminated string starting at line 1 "
        'column 10): \'{"text": "abc\''
    }
    assert result["is_error"] is True


# --- thinking and caching ------------------------------------------------------------------


async def test_thinking_streams_as_reasoning_and_is_kept_with_its_signature(
    fake: FakeAnthropic,
) -> None:
    fake.replies = [
        anthropic_stream(
            message_start(),
            *thinking_block(0, "Let me ", "think.", signature="sig-A"),
            *redacted_thinking_block(1, "ENCRYPTED"),
            *text_block(2, "42"),
            message_delta("end_turn", 30, thinking_tokens=20),
            MESSAGE_STOP,
        )
    ]
    async with claude(fake, thinking_budget=2048) as llm:
        events = await collect(llm)
    assert events[:-1] == [
        LLMReasoningDelta(text="Let me "),
        LLMReasoningDelta(text="think."),
        LLMTextDelta(text="42"),
    ]
    response = events[-1]
    assert isinstance(response, LLMResponse)
    assert response.content == "42"  # never the thinking
    assert response.reasoning == [
        ReasoningPart(text="Let me think.", provider="anthropic", data={"signature": "sig-A"}),
        ReasoningPart(provider="anthropic", data={"redacted": "ENCRYPTED"}),
    ]
    assert response.usage == TokenUsage(input_tokens=10, output_tokens=30, reasoning_tokens=20)
    assert fake.requests[0].body["thinking"] == {"type": "enabled", "budget_tokens": 2048}


async def test_an_agent_sends_its_kept_thinking_back_before_its_tool_use(
    fake: FakeAnthropic,
) -> None:
    """Anthropic requires the thinking blocks, signed, at the start of a tool-use turn."""

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"18C in {city}"

    fake.replies = [
        anthropic_stream(
            message_start(),
            *thinking_block(0, "I need the weather.", signature="sig-B"),
            *redacted_thinking_block(1, "OPAQUE"),
            *tool_use_block(2, "toolu_w", "weather", '{"city": "Paris"}'),
            message_delta("tool_use"),
            MESSAGE_STOP,
        ),
        anthropic_stream(
            message_start(),
            *thinking_block(0, "Done.", signature="sig-C"),
            *text_block(1, "It is 18C."),
            message_delta(),
            MESSAGE_STOP,
        ),
    ]
    async with claude(fake, thinking_budget=1024) as llm:
        agent = define_agent("forecaster", tools=[weather], llm=llm)
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            with anyio.fail_after(30):
                assert await executor.run(agent, "Weather in Paris?") == "It is 18C."
    question, assistant, results = fake.requests[1].body["messages"]
    assert question == {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}
    assert assistant == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "I need the weather.", "signature": "sig-B"},
            {"type": "redacted_thinking", "data": "OPAQUE"},
            {"type": "tool_use", "id": "toolu_w", "name": "weather", "input": {"city": "Paris"}},
        ],
    }
    assert results == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_w",
                "content": "18C in Paris",
                "cache_control": {"type": "ephemeral"},  # the breakpoint moved to the new end
            }
        ],
    }


async def test_cache_reads_and_writes_count_as_input(fake: FakeAnthropic) -> None:
    fake.replies = [
        anthropic_stream(
            message_start(input_tokens=12, cache_read=3000, cache_creation=200),
            *text_block(0, "ok"),
            message_delta(output_tokens=4),
            MESSAGE_STOP,
        )
    ]
    async with claude(fake) as llm:
        response = (await collect(llm))[-1]
    assert isinstance(response, LLMResponse)
    assert response.usage == TokenUsage(
        input_tokens=3212, output_tokens=4, cached_input_tokens=3000
    )


# --- errors ---------------------------------------------------------------------------------


async def test_429_is_a_rate_limit_with_its_retry_after_and_no_retry_of_its_own(
    fake: FakeAnthropic,
) -> None:
    fake.replies = [
        anthropic_error(429, "rate_limit_error", "Too many requests.", {"retry-after": "7"}),
        anthropic_stream(*anthropic_text_turn("late")),
    ]
    async with claude(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retry_after, error.status, error.retryable) == (
        "rate_limit",
        7.0,
        429,
        True,
    )
    assert str(error) == (
        f"LLM call failed (HTTP 429) for model 'claude-test' at {fake.url}/v1/messages: "
        "rate_limit_error: Too many requests.; Anthropic is rate limiting (or the quota is "
        "spent): retry after 7 s"
    )
    assert len(fake.requests) == 1  # the SDK's own retries are off: the shared layer retries


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(anthropic_error(529, "overloaded_error", "Overloaded"), id="529"),
        pytest.param(
            anthropic_stream(
                message_start(),
                *text_block(0, "Hi")[:2],
                anthropic_error_event("overloaded_error", "Overloaded"),
            ),
            id="error-event-mid-stream",
        ),
    ],
)
async def test_overloaded_is_its_own_kind(fake: FakeAnthropic, reply: Any) -> None:
    fake.replies = [reply]
    async with claude(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("overloaded", True)
    assert "overloaded_error: Overloaded; Anthropic is overloaded" in str(error)
    assert "\n" not in str(error)
    assert len(fake.requests) == 1


async def test_a_prompt_too_long_is_context_length(fake: FakeAnthropic) -> None:
    fake.replies = [
        anthropic_error(
            400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"
        )
    ]
    async with claude(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable, error.status) == ("context_length", False, 400)
    assert error.hint == "the conversation is longer than the model's context window: shorten it"


@pytest.mark.parametrize(
    "reply",
    [
        pytest.param(
            cut_stream(anthropic_bytes(message_start(), *text_block(0, "Hel", "lo")[:3])),
            id="connection-dropped",
        ),
        pytest.param(
            anthropic_stream(message_start(), *text_block(0, "Hel", "lo")), id="no-message_stop"
        ),
    ],
)
async def test_a_stream_cut_mid_way_is_an_error_not_an_empty_turn(
    fake: FakeAnthropic, reply: Any
) -> None:
    fake.replies = [reply]
    seen: list[LLMStreamEvent] = []
    async with claude(fake) as llm:
        error = await failure(llm, HELLO, seen)
    assert (error.kind, error.retryable) == ("connection", True)
    assert seen == [LLMTextDelta(text="Hel"), LLMTextDelta(text="lo")]  # no response after
    assert "\n" not in str(error)


async def test_a_401_is_one_line_naming_the_key_variable(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-wrong")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
    fake.replies = [anthropic_error(401, "authentication_error", "invalid x-api-key")]
    async with AnthropicLLM("claude-test") as llm:
        error = await failure(llm)
    assert str(error) == (
        f"LLM call failed (HTTP 401) for model 'claude-test' at {fake.url}/v1/messages: "
        "authentication_error: invalid x-api-key; check the API key in ANTHROPIC_API_KEY"
    )
    assert (error.kind, error.retryable) == ("auth", False)
    assert "sk-ant-wrong" in json.dumps(fake.requests[0].headers)  # the key from the variable


async def test_a_refusal_is_refused(fake: FakeAnthropic) -> None:
    fake.replies = [
        anthropic_stream(
            message_start(), *text_block(0, "I can"), message_delta("refusal"), MESSAGE_STOP
        )
    ]
    async with claude(fake) as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("refused", False)
    assert "stop_reason 'refusal'" in str(error)


async def test_no_server_is_a_connection_error_naming_the_address() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    async with AnthropicLLM("claude-test", base_url=url, api_key="k") as llm:
        error = await failure(llm)
    assert (error.kind, error.retryable) == ("connection", True)
    assert error.hint == f"is a server running at {url}? (from base_url)"


async def test_cancelling_mid_stream_closes_the_connection(fake: FakeAnthropic) -> None:
    disconnected = anyio.Event()
    head = anthropic_bytes(message_start(), *text_block(0)[:1])
    tick = anthropic_bytes(*text_block(0, "tick")[1:2])[0]
    fake.replies = [endless_stream(head, tick, disconnected)]
    received: list[LLMStreamEvent] = []
    async with claude(fake) as llm:
        with anyio.fail_after(10):
            with anyio.CancelScope() as scope:
                async for event in llm.stream(HELLO):
                    received.append(event)
                    scope.cancel()
            assert scope.cancelled_caught
            await disconnected.wait()
    assert received == [LLMTextDelta(text="tick")]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"thinking_budget": 512},
            "thinking_budget must be >= 1024 and below max_tokens (8192), not 512",
        ),
        (
            {"thinking_budget": 4096, "max_tokens": 4096},
            "thinking_budget must be >= 1024 and below max_tokens (4096), not 4096",
        ),
        ({"max_tokens": 0}, "max_tokens must be >= 1, not 0"),
        ({"base_url": "ftp://x"}, "base_url must be an http(s) URL, not 'ftp://x'"),
    ],
)
def test_bad_options_are_usage_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        AnthropicLLM("claude-test", api_key="k", **options)
    assert str(caught.value) == message
