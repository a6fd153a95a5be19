"""``anthropic:MODEL`` and ``google:MODEL``: native adapters by name, with the providers' variables.

Each named model runs an agent against its provider's fake (``provider_fakes``)
through the environment the SDKs read (``ANTHROPIC_BASE_URL``,
``GOOGLE_GEMINI_BASE_URL``). The name is checked when the agent is defined;
the key, the API root and the SDK when it runs: each missing one is one
``UsageError`` line naming what to set or install.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import anyio
import pytest
from provider_fakes import (
    FakeAnthropic,
    FakeGemini,
    anthropic_stream,
    anthropic_text_turn,
    anthropic_tool_turn,
    gemini_chunk,
    gemini_stream,
)
from servers import serve

from helix_agents import AgentExecutor, define_agent, tool
from helix_agents.errors import UsageError
from helix_agents.models.names import NamedModel, model_from_name, native_adapter
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

KEYS = ("ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
URLS = ("ANTHROPIC_BASE_URL", "GOOGLE_GEMINI_BASE_URL")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*KEYS, *URLS):
        monkeypatch.delenv(name, raising=False)


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def anthropic_fake() -> tuple[FakeAnthropic, str, str]:
    fake = FakeAnthropic()
    fake.replies = [
        anthropic_stream(*anthropic_tool_turn("toolu_1", "add", {"a": 2, "b": 3})),
        anthropic_stream(*anthropic_text_turn("5")),
    ]
    return fake, "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"


def gemini_fake() -> tuple[FakeGemini, str, str]:
    fake = FakeGemini()
    call = {"functionCall": {"name": "add", "args": {"a": 2, "b": 3}}}
    fake.replies = [
        gemini_stream(gemini_chunk(call, finish_reason="STOP")),
        gemini_stream(gemini_chunk({"text": "5"}, finish_reason="STOP")),
    ]
    return fake, "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"


@pytest.mark.parametrize(
    ("name", "make"),
    [("anthropic:claude-test", anthropic_fake), ("google:gemini-test", gemini_fake)],
)
async def test_a_named_native_model_runs_an_agent_with_its_tool(
    monkeypatch: pytest.MonkeyPatch, name: str, make: Callable[[], Any]
) -> None:
    fake, key_env, url_env = make()
    with anyio.fail_after(30):
        async with serve(fake.app) as url:
            monkeypatch.setenv(key_env, "key-123")
            monkeypatch.setenv(url_env, url)
            agent = define_agent("adder", model=name, tools=[add])
            async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
                assert await executor.run(agent, "2 + 3?") == "5"
    assert len(fake.requests) == 2
    sent = fake.requests[0]
    model = name.partition(":")[2]
    assert sent.body.get("model") == model or f"/models/{model}:" in sent.path  # Gemini: the path
    assert "key-123" in str(sent.headers)
    assert isinstance(agent.llm, NamedModel)
    assert "key-123" not in repr(agent.llm)


@pytest.mark.parametrize(
    ("name", "line"),
    [
        (
            "anthropic:claude-test",
            "model 'anthropic:claude-test' needs an Anthropic API key: set ANTHROPIC_API_KEY",
        ),
        (
            "google:gemini-test",
            "model 'google:gemini-test' needs a Gemini API key: set GEMINI_API_KEY or "
            "GOOGLE_API_KEY",
        ),
    ],
)
async def test_without_a_key_the_agent_defines_and_refuses_to_run_in_one_line(
    name: str, line: str
) -> None:
    agent = define_agent("a", model=name)  # a module defining it imports
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        with pytest.raises(UsageError) as caught:
            await executor.run(agent, "hi")
    assert str(caught.value) == line
    assert await store.list_sessions() == []


def test_either_gemini_variable_serves(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    model_from_name("google:gemini-test")  # no error


@pytest.mark.parametrize(
    ("name", "sdk", "line"),
    [
        (
            "anthropic:claude-test",
            "anthropic",
            "model 'anthropic:claude-test' needs the anthropic SDK: "
            "pip install 'helix-agents[anthropic]'",
        ),
        (
            "google:gemini-test",
            "google.genai",
            "model 'google:gemini-test' needs the google.genai SDK: "
            "pip install 'helix-agents[google]'",
        ),
    ],
)
def test_a_missing_sdk_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, name: str, sdk: str, line: str
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "k")
    monkeypatch.setenv("GEMINI_API_KEY", "k")
    monkeypatch.setitem(sys.modules, sdk, None)  # as if not installed: imports fail
    agent_model = NamedModel(name)  # the name alone is fine
    with pytest.raises(UsageError) as caught:
        agent_model.check()
    assert str(caught.value) == line
    provider, _, model = name.partition(":")
    for module in ("helix_agents.models.anthropic", "helix_agents.models.google"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(UsageError, match=r"pip install 'helix-agents\[") as made:
        native_adapter(provider, model)
    assert "\n" not in str(made.value)


@pytest.mark.parametrize(
    ("name", "key_env", "url_env"),
    [
        ("anthropic:claude-test", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
        ("google:gemini-test", "GEMINI_API_KEY", "GOOGLE_GEMINI_BASE_URL"),
    ],
)
def test_an_api_root_that_is_not_http_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, name: str, key_env: str, url_env: str
) -> None:
    monkeypatch.setenv(key_env, "k")
    monkeypatch.setenv(url_env, "localhost:8000")
    with pytest.raises(UsageError) as caught:
        model_from_name(name)
    assert str(caught.value) == (
        f"model {name!r}: {url_env} must be an http(s) URL, not 'localhost:8000'"
    )
