"""Retries, fallbacks and the concurrency limit, for every adapter, through real runs.

Fake Responses API servers on real uvicorn (``tests/responses_fake.py``)
refuse, break off or answer as each test says; the agent runs through
``AgentExecutor``, whose steps wrap the agent's model in its retry policy.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest
from responses_fake import FakeResponses, Turn, error_reply
from servers import serve
from starlette.responses import Response

from helix_agents import AgentExecutor, define_agent
from helix_agents.agents import LLMConfig
from helix_agents.errors import UsageError
from helix_agents.events import UsageRecorded
from helix_agents.log.state import SessionState
from helix_agents.models import (
    FallbackModel,
    OpenAIChatLLM,
    OpenAIResponsesLLM,
    RetryPolicy,
)
from helix_agents.models.names import NamedModel
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

ANSWER = Turn().message(["All ", "good."]).completed()


async def run(agent: Any, store: MemoryEventStore | None = None) -> SessionState:
    """Run ``agent`` once on a fresh session; its end state."""
    store = store or MemoryEventStore()
    with anyio.fail_after(30):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "hi", session_id="s")
            await handle.result()
            return await executor.state("s")


# --- retries ------------------------------------------------------------------------


async def test_a_429_with_retry_after_is_retried_until_the_call_passes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    limited = error_reply(429, "Rate limit reached.", headers={"retry-after": "0.1"})
    server = FakeResponses(replies=[limited, limited, ANSWER.reply()])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent("a", model="openai:gpt-4o-mini")
    with caplog.at_level(logging.INFO, logger="helix_agents"):
        async with serve(server.app()) as url:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            state = await run(agent)
    assert state.status == "completed"
    assert state.output == "All good."
    assert len(server.requests) == 3
    waits = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(waits) == 2
    assert all("(rate_limit), retry" in wait and "in 0.10 s" in wait for wait in waits)


async def test_a_failure_after_text_streamed_is_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run fails (recoverably) with the cut: a retry would stream the text again."""
    cut = Turn().message(["Half an ans", "wer"]).completed().reply(cut_after=6)
    server = FakeResponses(replies=[cut, ANSWER.reply()])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent("a", model="openai:gpt-4o-mini")
    async with serve(server.app()) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        state = await run(agent)
    assert state.status == "failed"
    assert state.error is not None
    assert "the stream ended before the response completed" in state.error
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    ("policy", "reply", "calls"),
    [
        (RetryPolicy(attempts=1), error_reply(503, "Overloaded."), 1),
        (RetryPolicy(attempts=3, base_delay=0.01), error_reply(503, "Overloaded."), 3),
        (RetryPolicy(base_delay=0.01), error_reply(400, "Bad input.", code="invalid_value"), 1),
        (RetryPolicy(base_delay=0.01), error_reply(401, "Bad key.", code="invalid_api_key"), 1),
    ],
    ids=["no-retries", "three-attempts", "bad-request", "auth"],
)
async def test_the_policy_bounds_the_attempts_and_only_passing_kinds_are_retried(
    monkeypatch: pytest.MonkeyPatch, policy: RetryPolicy, reply: Any, calls: int
) -> None:
    server = FakeResponses(replies=[reply])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent("a", model="openai:gpt-4o-mini", llm_config=LLMConfig(retry=policy))
    async with serve(server.app()) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        state = await run(agent)
    assert state.status == "failed"
    assert len(server.requests) == calls


async def test_an_adapter_that_retries_itself_is_not_retried_again_by_the_run() -> None:
    """``OpenAIChatLLM(max_retries=2)``: 3 calls, not 3 for each of the policy's 4 attempts."""
    seen: list[int] = []

    async def chat(scope: Any, receive: Any, send: Any) -> None:
        seen.append(1)
        await error_reply(503, "Overloaded.", headers={"retry-after": "0"})()(scope, receive, send)

    async with serve(chat, lifespan="off") as url:
        llm = OpenAIChatLLM("m", base_url=f"{url}/v1", api_key="k", max_retries=2)
        state = await run(define_agent("a", llm=llm))
    assert state.status == "failed"
    assert len(seen) == 3


def test_a_bad_policy_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="attempts must be >= 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(UsageError, match="delays must be >= 0"):
        RetryPolicy(max_delay=-1)
    with pytest.raises(UsageError, match="max_concurrency must be a positive integer"):
        NamedModel("openai:gpt-4o", max_concurrency=0)


# --- the concurrency limit ------------------------------------------------------------------


@pytest.mark.parametrize(("limit", "most"), [(2, 2), (None, 5)])
async def test_at_most_n_calls_are_in_flight(
    monkeypatch: pytest.MonkeyPatch, limit: int | None, most: int
) -> None:
    """Five sessions at once on a slow model: with ``max_concurrency=2``, two calls at a time."""
    server = FakeResponses(replies=[ANSWER.reply()], delay=0.3)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent("a", llm=NamedModel("openai:gpt-4o-mini", max_concurrency=limit))
    with anyio.fail_after(30):
        async with serve(server.app()) as url:
            monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
            async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
                handles = [
                    await executor.execute(agent, "hi", session_id=f"s{i}") for i in range(5)
                ]
                outputs = [(await handle.result()).unwrap() for handle in handles]
    assert outputs == ["All good."] * 5
    assert server.most_in_flight == most


# --- fallbacks ----------------------------------------------------------------------


def by_model(down: dict[str, Any]) -> Any:
    """A server answering each model by name: the ones in ``down`` with their error reply."""

    def answer(body: dict[str, Any]) -> Response:
        model = body["model"]
        if model in down:
            return down[model]()
        return Turn(model=f"{model}-2025").message([f"{model} here"]).completed().reply()()

    return answer


async def test_a_list_of_names_falls_back_and_the_log_names_who_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server = FakeResponses(answer=by_model({"big": error_reply(503, "Overloaded.")}))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    agent = define_agent(
        "a",
        model=["openai:big", "openai:small"],
        llm_config=LLMConfig(retry=RetryPolicy(attempts=1)),
    )
    assert isinstance(agent.llm, FallbackModel)
    store = MemoryEventStore()
    async with serve(server.app()) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        state = await run(agent, store)
    assert state.output == "small here"
    assert [r.body["model"] for r in server.requests] == ["big", "small"]
    [usage] = [e for e in await store.read("s") if isinstance(e, UsageRecorded)]
    assert usage.name == "small-2025"


async def test_two_servers_the_first_overloaded_the_second_answers() -> None:
    first = FakeResponses(replies=[error_reply(503, "The engine is overloaded.")])
    second = FakeResponses(
        replies=[Turn(model="backup-1").message(["Backup ", "here."]).completed().reply()]
    )
    store = MemoryEventStore()
    async with serve(first.app()) as one, serve(second.app()) as two:
        llm = FallbackModel(
            OpenAIResponsesLLM("main", base_url=f"{one}/v1", api_key="k"),
            OpenAIResponsesLLM("backup", base_url=f"{two}/v1", api_key="k"),
        )
        state = await run(define_agent("a", llm=llm), store)
    assert state.output == "Backup here."
    # the run's retries wrap the list: the first model failed over at once, not retried
    assert (len(first.requests), len(second.requests)) == (1, 1)
    [usage] = [e for e in await store.read("s") if isinstance(e, UsageRecorded)]
    assert usage.name == "backup-1"


@pytest.mark.parametrize(
    ("reply", "falls"),
    [
        (error_reply(401, "Bad key.", code="invalid_api_key"), True),
        (error_reply(400, "Too long.", code="context_length_exceeded"), True),
        (error_reply(400, "Bad input.", code="invalid_value"), False),
        (Turn().refusal("No.").completed().reply(), False),
        (Turn().message(["Half"]).completed().reply(cut_after=5), False),  # output began
    ],
    ids=["auth", "context-length", "bad-request", "refused", "after-output"],
)
async def test_what_falls_through_to_the_next_model(reply: Any, falls: bool) -> None:
    first = FakeResponses(replies=[reply])
    second = FakeResponses(replies=[ANSWER.reply()])
    async with serve(first.app()) as one, serve(second.app()) as two:
        llm = FallbackModel(
            OpenAIResponsesLLM("main", base_url=f"{one}/v1", api_key="k"),
            OpenAIResponsesLLM("backup", base_url=f"{two}/v1", api_key="k"),
        )
        agent = define_agent("a", llm=llm, llm_config=LLMConfig(retry=RetryPolicy(attempts=1)))
        state = await run(agent)
    assert state.status == ("completed" if falls else "failed")
    assert len(second.requests) == (1 if falls else 0)


async def test_every_model_failing_says_what_each_one_said_in_one_line() -> None:
    first = FakeResponses(replies=[error_reply(503, "Overloaded.")])
    second = FakeResponses(replies=[error_reply(429, "Slow down.", headers={"retry-after": "0"})])
    async with serve(first.app()) as one, serve(second.app()) as two:
        llm = FallbackModel(
            OpenAIResponsesLLM("main", base_url=f"{one}/v1", api_key="k"),
            OpenAIResponsesLLM("backup", base_url=f"{two}/v1", api_key="k"),
        )
        agent = define_agent("a", llm=llm, llm_config=LLMConfig(retry=RetryPolicy(attempts=2)))
        state = await run(agent)
    assert state.status == "failed"
    assert state.error is not None
    assert "\n" not in state.error
    assert state.error.startswith("LLM call failed: every model failed: main: LLM call failed")
    assert "(HTTP 503)" in state.error
    assert "; backup: LLM call failed (HTTP 429)" in state.error
    assert (len(first.requests), len(second.requests)) == (2, 2)  # the list, tried twice


async def test_a_fallback_runs_when_only_a_later_model_can(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check passes when some model can run; the one without its key fails over."""
    server = FakeResponses(replies=[ANSWER.reply()])
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    async with serve(server.app()) as url:
        local = OpenAIResponsesLLM("local", base_url=f"{url}/v1", api_key="k")
        agent = define_agent("a", llm=FallbackModel("openai:gpt-4o", local))
        no_key = define_agent("b", model=["openai:gpt-4o", "openai-chat:gpt-4o-mini"])
        async with AgentExecutor(MemoryEventStore(), [agent, no_key]) as executor:
            with pytest.raises(UsageError, match="set OPENAI_API_KEY"):
                await executor.execute(no_key, "hi")
            assert await executor.run(agent, "hi") == "All good."
    assert [r.body["model"] for r in server.requests] == ["local"]


def test_a_bad_model_list_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="a name or a list of names"):
        define_agent("a", model=[])
    with pytest.raises(UsageError, match="unknown provider"):
        define_agent("a", model=["openai:x", "nope:y"])
    with pytest.raises(UsageError, match="at least one model"):
        FallbackModel()
