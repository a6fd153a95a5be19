"""``OpenAIResponsesLLM`` against a fake Responses API on uvicorn (``tests/responses_fake.py``).

The fake streams ``event:``/``data:`` pairs exactly as OpenAI's API reference
documents them (each event checked against the ``openai`` SDK's own model of
it) and answers errors in OpenAI's shape with its headers (``retry-after``,
``retry-after-ms``). The adapter's pieces, its one response, the request it
sent, and each failure as one line of a known kind.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from responses_fake import FakeResponses, Turn, error_reply, usage
from servers import serve
from starlette.responses import Response

from helix_agents import AgentExecutor, define_agent, tool
from helix_agents.events import MessageAppended, UsageRecorded
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from helix_agents.models import (
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
    OpenAIResponsesLLM,
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
async def fake() -> AsyncIterator[tuple[FakeResponses, str]]:
    server = FakeResponses()
    async with serve(server.app()) as url:
        yield server, f"{url}/v1"


async def collect(llm: OpenAIResponsesLLM, request: LLMRequest = HELLO) -> list[LLMStreamEvent]:
    with anyio.fail_after(10):
        return [event async for event in llm.stream(request)]


async def failure(llm: OpenAIResponsesLLM, request: LLMRequest = HELLO) -> LLMError:
    with anyio.fail_after(10), pytest.raises(LLMError) as caught:
        async for _ in llm.stream(request):
            pass
    assert "\n" not in str(caught.value)
    return caught.value


# --- what streams, and the one response ---------------------------------------------


async def test_text_streams_as_deltas_then_one_response_and_the_request_is_mapped(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    server.replies = [Turn().message(["Hel", "lo, ", "wörld"]).completed(usage(9, 3)).reply()]
    request = LLMRequest(
        messages=[UserMessage(content="Hello")],
        system_prompt="Be brief.",
        tools=[WEATHER],
        temperature=0.2,
        max_tokens=100,
    )
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="sk-test") as llm:
        events = await collect(llm, request)

    assert events == [
        LLMTextDelta(text="Hel"),
        LLMTextDelta(text="lo, "),
        LLMTextDelta(text="wörld"),
        LLMResponse(
            content="Hello, wörld",
            usage=TokenUsage(input_tokens=9, output_tokens=3),
            finish_reason="stop",
            model="gpt-fake-2025",
        ),
    ]
    [sent] = server.requests
    assert sent.headers["authorization"] == "Bearer sk-test"
    assert sent.body == {
        "model": "gpt-4o-mini",
        "input": [{"role": "user", "content": "Hello"}],
        "stream": True,
        "store": False,
        "instructions": "Be brief.",
        "tools": [
            {
                "type": "function",
                "name": "weather",
                "description": "The weather in a city.",
                "parameters": WEATHER.parameters,
                "strict": False,
            }
        ],
        "temperature": 0.2,
        "max_output_tokens": 100,
    }  # not a reasoning model: no include, no reasoning settings


async def test_one_tool_call_streams_its_arguments_split_across_events_and_writes(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    turn = Turn().call("call_1", "weather", ['{"ci', 'ty": "Zü', 'rich"}']).completed()
    server.replies = [turn.reply(piece=7)]  # the bytes cut through events and characters
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        events = await collect(llm)

    assert events[:-1] == [
        LLMToolCallDelta(index=0, arguments="", id="call_1", name="weather"),
        LLMToolCallDelta(index=0, arguments='{"ci'),
        LLMToolCallDelta(index=0, arguments='ty": "Zü'),
        LLMToolCallDelta(index=0, arguments='rich"}'),
    ]
    response = events[-1]
    assert isinstance(response, LLMResponse)
    assert response.tool_calls == [
        ToolCall(id="call_1", name="weather", arguments={"city": "Zürich"})
    ]
    assert response.finish_reason == "tool_calls"


async def test_several_tool_calls_after_text_are_indexed_in_turn_order(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    turn = (
        Turn()
        .message(["Checking."])
        .call("call_a", "weather", ['{"city": ', '"Paris"}'])
        .call("call_b", "time", ['{"tz": "Europe/', 'Paris"}'])
        .completed()
    )
    server.replies = [turn.reply()]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        events = await collect(llm)

    pieces = [event for event in events if isinstance(event, LLMToolCallDelta)]
    by_index: dict[int, str] = {}
    for piece in pieces:
        by_index[piece.index] = by_index.get(piece.index, "") + piece.arguments
    assert by_index == {0: '{"city": "Paris"}', 1: '{"tz": "Europe/Paris"}'}
    assert [(p.index, p.id, p.name) for p in pieces if p.id] == [
        (0, "call_a", "weather"),
        (1, "call_b", "time"),
    ]
    response = events[-1]
    assert isinstance(response, LLMResponse)
    assert response.content == "Checking."
    assert response.tool_calls == [
        ToolCall(id="call_a", name="weather", arguments={"city": "Paris"}),
        ToolCall(id="call_b", name="time", arguments={"tz": "Europe/Paris"}),
    ]


async def test_malformed_json_arguments_are_kept_raw_for_the_run_loop(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    server.replies = [Turn().call("call_1", "weather", ['{"city": "Par']).completed().reply()]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        response = (await collect(llm))[-1]
    assert isinstance(response, LLMResponse)
    assert response.tool_calls == [ToolCall(id="call_1", name="weather", arguments='{"city": "Par')]


async def test_cached_and_reasoning_tokens_are_counted(fake: tuple[FakeResponses, str]) -> None:
    server, base = fake
    used = usage(2000, 300, cached=1536, reasoning=256)
    server.replies = [Turn().message(["ok"]).completed(used).reply()]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        response = (await collect(llm))[-1]
    assert isinstance(response, LLMResponse)
    assert response.usage == TokenUsage(
        input_tokens=2000, output_tokens=300, cached_input_tokens=1536, reasoning_tokens=256
    )


# --- reasoning: streamed as reasoning, kept, and sent back ----------------------------


async def test_reasoning_streams_is_kept_and_goes_back_with_the_tool_result(
    fake: tuple[FakeResponses, str],
) -> None:
    """Through a run: the summary streams as reasoning, the encrypted item is in the log, and
    the next call's input holds it, verbatim, before the call and its output."""
    server, base = fake
    first = (
        Turn(model="o4-mini-2025")
        .reasoning(["Need the ", "weather."], encrypted="gAAAA-secret-1")
        .call("call_1", "weather", ['{"city": "Oslo"}'])
        .completed(usage(50, 40, reasoning=32))
    )
    second = Turn(model="o4-mini-2025").message(["It is ", "sunny."]).completed()
    server.replies = [first.reply(), second.reply()]

    @tool
    def weather(city: str) -> str:
        """The weather in a city."""
        return f"sunny in {city}"

    seen: list[LLMStreamEvent] = []

    class Watching(OpenAIResponsesLLM):
        async def _watch(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
            async for event in super().stream(request):
                seen.append(event)
                yield event

        def stream(self, request: LLMRequest) -> Any:
            return self._watch(request)

    llm = Watching("o4-mini", base_url=base, api_key="k")
    agent = define_agent("forecaster", tools=[weather], llm=llm)
    store = MemoryEventStore()
    with anyio.fail_after(20):
        async with AgentExecutor(store, [agent]) as executor:
            answer = await executor.run(agent, "Weather in Oslo?", session_id="s")
    assert answer == "It is sunny."
    assert [e.text for e in seen if isinstance(e, LLMReasoningDelta)] == ["Need the ", "weather."]

    log = await store.read("s")
    [thought] = [
        e.message
        for e in log
        if isinstance(e, MessageAppended)
        and isinstance(e.message, AssistantMessage)
        and e.message.tool_calls
    ]
    assert isinstance(thought.reasoning, list)
    [part] = thought.reasoning
    assert part.text == "Need the weather."
    assert part.provider == "openai-responses"
    assert part.data["encrypted_content"] == "gAAAA-secret-1"

    one, two = (recorded.body for recorded in server.requests)
    for body in (one, two):  # a reasoning model: summaries and encrypted items asked for
        assert body["include"] == ["reasoning.encrypted_content"]
        assert body["reasoning"] == {"summary": "auto"}
        assert body["store"] is False
    assert two["input"] == [
        {"role": "user", "content": "Weather in Oslo?"},
        first.output[0],  # the reasoning item as it came, its encrypted content included
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "weather",
            "arguments": '{"city":"Oslo"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny in Oslo"},
    ]
    tokens = [e for e in log if isinstance(e, UsageRecorded) and e.kind == "tokens"]
    assert [e.name for e in tokens] == ["o4-mini-2025", "o4-mini-2025"]


async def test_another_providers_reasoning_and_an_item_without_encrypted_content_stay_home(
    fake: tuple[FakeResponses, str],
) -> None:
    from helix_agents.messages import ReasoningPart

    server, base = fake
    server.replies = [Turn().message(["ok"]).completed().reply()]
    kept = [
        ReasoningPart(text="a", provider="anthropic", data={"signature": "x"}),
        ReasoningPart(text="b", provider="openai-responses", data={"id": "rs_9", "summary": []}),
    ]
    request = LLMRequest(
        messages=[
            UserMessage(content="hi"),
            AssistantMessage(content="hello", reasoning=kept),
            UserMessage(content="again"),
            AssistantMessage(tool_calls=[ToolCall(id="c", name="weather", arguments="{bad")]),
            ToolResultMessage(tool_call_id="c", tool_name="weather", content="oops"),
        ]
    )
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        await collect(llm, request)
    assert server.requests[0].body["input"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": "again"},
        {"type": "function_call", "call_id": "c", "name": "weather", "arguments": "{bad"},
        {"type": "function_call_output", "call_id": "c", "output": "oops"},
    ]


# --- failures: one line each, of a known kind -------------------------------------------


async def test_429_names_the_wait_the_server_asked_for(fake: tuple[FakeResponses, str]) -> None:
    server, base = fake
    server.replies = [
        error_reply(
            429,
            "Rate limit reached for gpt-4o-mini on tokens per min.",
            code="rate_limit_exceeded",
            kind="requests",
            headers={"retry-after": "0.1"},
        ),
        error_reply(429, "Slow down.", headers={"retry-after-ms": "250", "retry-after": "1"}),
    ]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        first = await failure(llm)
        second = await failure(llm)
    assert (first.kind, first.status, first.retry_after) == ("rate_limit", 429, 0.1)
    assert str(first) == (
        f"LLM call failed (HTTP 429) for model 'gpt-4o-mini' at {base}/responses: "
        "Rate limit reached for gpt-4o-mini on tokens per min.; "
        "the server is rate limiting (or the quota is spent): wait and try again"
    )
    assert second.retry_after == 0.25  # retry-after-ms wins: it is the finer one


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (500, "server_error", "server"),
        (502, None, "server"),
        (503, None, "overloaded"),
        (400, "context_length_exceeded", "context_length"),
        (400, "invalid_value", "bad_request"),
        (404, "model_not_found", "not_found"),
        (429, "insufficient_quota", "auth"),
    ],
)
async def test_a_refusal_maps_onto_its_kind(
    fake: tuple[FakeResponses, str], status: int, code: str | None, kind: str
) -> None:
    server, base = fake
    server.replies = [error_reply(status, "the server says no", code=code)]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        error = await failure(llm)
    assert (error.status, error.kind) == (status, kind)
    assert error.retryable == (kind in ("server", "overloaded"))


async def test_401_names_the_key_variable(
    fake: tuple[FakeResponses, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, base = fake
    monkeypatch.setenv("OPENAI_API_KEY", "sk-wrong")
    server.replies = [
        error_reply(401, "Incorrect API key provided: sk-wrong.", code="invalid_api_key")
    ]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base) as llm:
        error = await failure(llm)
    assert error.kind == "auth"
    assert not error.retryable
    assert str(error) == (
        f"LLM call failed (HTTP 401) for model 'gpt-4o-mini' at {base}/responses: "
        "Incorrect API key provided: sk-wrong.; check the API key in OPENAI_API_KEY"
    )


async def test_a_cut_stream_is_a_connection_failure_even_after_text(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    turn = Turn().message(["Hel", "lo"]).completed()
    server.replies = [turn.reply(cut_after=6)]  # created, in_progress, added, part, two deltas
    received: list[LLMStreamEvent] = []

    async def read(llm: OpenAIResponsesLLM) -> None:
        async for event in llm.stream(HELLO):
            received.append(event)

    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        with anyio.fail_after(10), pytest.raises(LLMError) as caught:
            await read(llm)
    assert received == [LLMTextDelta(text="Hel"), LLMTextDelta(text="lo")]
    assert caught.value.kind == "connection"
    assert caught.value.retryable
    assert "the stream ended before the response completed" in str(caught.value)


@pytest.mark.parametrize(
    ("turn", "kind", "said"),
    [
        (
            Turn().failed("server_error", "The server had an error."),
            "server",
            "The server had an error. (server_error)",
        ),
        (
            Turn().error("rate_limit_exceeded", "Too many tokens."),
            "rate_limit",
            "Too many tokens. (rate_limit_exceeded)",
        ),
        (
            Turn().error("context_length_exceeded", "Your input exceeds the context window."),
            "context_length",
            "Your input exceeds the context window.",
        ),
        (Turn().refusal("I can't help with that.").completed(), "refused", "the model refused"),
        (
            Turn().reasoning(["hm"]).incomplete("max_output_tokens"),
            "bad_reply",
            "the token limit came first",
        ),
    ],
    ids=["failed", "error-event", "context", "refusal", "token-limit"],
)
async def test_a_failure_inside_the_stream_maps_onto_its_kind(
    fake: tuple[FakeResponses, str], turn: Turn, kind: str, said: str
) -> None:
    server, base = fake
    server.replies = [turn.reply()]
    async with OpenAIResponsesLLM("o4-mini", base_url=base, api_key="k") as llm:
        error = await failure(llm)
    assert error.kind == kind
    assert said in str(error)
    assert error.model == "o4-mini"


async def test_text_cut_by_the_token_limit_is_kept_with_finish_reason_length(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    server.replies = [Turn().message(["Once upon"]).incomplete("max_output_tokens").reply()]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        response = (await collect(llm))[-1]
    assert isinstance(response, LLMResponse)
    assert (response.content, response.finish_reason) == ("Once upon", "length")


async def test_a_web_page_asks_whether_the_api_root_is_right(
    fake: tuple[FakeResponses, str],
) -> None:
    server, base = fake
    page = "<html><body>Welcome to nginx!</body></html>"
    server.replies = [lambda: Response(page, media_type="text/html")]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        error = await failure(llm)
    assert error.kind == "bad_reply"
    assert str(error).endswith(f"; is {base} an OpenAI-compatible API root? (from base_url)")


async def test_a_non_streamed_response_is_one_turn(fake: tuple[FakeResponses, str]) -> None:
    server, base = fake
    turn = Turn().message(["Hi there"]).call("c1", "weather", ['{"city":"Rome"}']).completed()
    body = json.dumps(turn.events[-1]["response"])
    server.replies = [lambda: Response(body, media_type="application/json")]
    async with OpenAIResponsesLLM("gpt-4o-mini", base_url=base, api_key="k") as llm:
        events = await collect(llm)
    assert events[0] == LLMTextDelta(text="Hi there")
    assert isinstance(events[-1], LLMResponse)
    assert events[-1].tool_calls == [ToolCall(id="c1", name="weather", arguments={"city": "Rome"})]
