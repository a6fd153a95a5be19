"""One agent tree by model name on every adapter and every runtime: they agree (issue 33).

The tree: a ``lead`` with a tool (``lookup``) and a local child (``helper``,
with a tool and a typed output). Each of four model names runs it against
its provider's fake on uvicorn, reached through the provider's own variables
(``ANTHROPIC_BASE_URL``, ``GOOGLE_GEMINI_BASE_URL``, ``OPENAI_BASE_URL``):

- ``anthropic:`` on Anthropic's Messages API, ``google:`` on the Gemini API,
  ``openai:`` on OpenAI's Responses API, each with reasoning in the lead's
  first turn (kept and sent back);
- ``openai-compatible:`` on chat completions (no reasoning on that wire).

Each fake answers by conversation (``conversation_fakes.py``): the lead's and
the helper's calls interleave, on three runtimes at once. Each runtime gets
one gateway (``serve``'s HTTP app over its ``AgentServer``: the built-in
runtime, Temporal, DBOS, as ``test_runtimes_agree.py`` makes them) serving
the four trees; a client starts each tree and records what it is shown: the
lead's and the helper's ``/sse`` frames and ``/status``.

- For each adapter, the client sees the same on the three runtimes (run ids
  and times aside, as in ``test_runtimes_agree.py``).
- For each runtime, the four adapters' logs agree once what is the model's own
  is taken out: model names, token counts, reasoning (its chunks and the
  provider data kept on the message), partial outputs (how many, and how far
  each got, follows how the provider splits a call's arguments: Gemini sends
  them whole), call ids (Gemini sends none: the adapter makes them up), and
  each tree's own names (its session and agent types).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import anyio
import httpx
import msgspec
import pytest
from conversation_fakes import WIRES, Call, Conversation, Said, answering
from provider_fakes import FakeAnthropic, FakeChat, FakeGemini
from pydantic import BaseModel
from responses_fake import FakeResponses
from servers import serve
from starlette.applications import Starlette
from temporal_server import TemporalDev
from test_runtimes_agree import Client, normalized

from helix_agents import AgentConfig, create_sub_agent_tool, define_agent, tool
from helix_agents.server import create_http_app
from helix_agents.stores import SqliteEventStore
from tests.integration._durable_kit import Runtime

pytestmark = [pytest.mark.slow]

LIMIT = 60.0
"""Seconds one tree may take on one runtime (all twelve run at once, on a shared machine)."""

RUNTIMES = ("builtin", "temporal", "dbos")
PAIRS = [("builtin", "temporal"), ("builtin", "dbos"), ("temporal", "dbos")]
NOTE = "notes on leaf, and all they say"
"""The helper's output: what its lookup found, and more (its arguments make a partial output)."""
ANSWER = f'I saw notes on tea; {{"note":"{NOTE}"}}'
"""The lead's answer: the two tool results it read (its lookup's, its helper's output)."""
SIGNATURE = "sig-lead"
"""The opaque reasoning of the lead's first turn, which its next requests must send back."""


class Adapter(NamedTuple):
    """A model name, its fake's wire, the tree's names on it (``slug``), and the model its
    fake's replies name (``answers_as``)."""

    model: str
    wire: str
    slug: str
    answers_as: str

    @property
    def session(self) -> str:
        """The session id of its tree's lead."""
        return f"{self.slug}-tree"


ADAPTERS = {
    "anthropic": Adapter("anthropic:claude-sonnet-4-6", "anthropic", "anthropic", "claude-fake-1"),
    "google": Adapter("google:gemini-2.5-flash", "gemini", "google", "gemini-fake-1"),
    "openai": Adapter("openai:gpt-5-mini", "responses", "openai", "gpt-fake-2025"),
    "openai-compatible": Adapter(
        "openai-compatible:llama3.2", "chat", "compatible", "gpt-fake-chat"
    ),
}
REASONS = ("anthropic", "google", "openai")
"""The adapters whose wire carries the lead's reasoning."""


# --- the tree, and the model its fakes play -------------------------------------------


class Topic(BaseModel):
    """What the lead asks its helper about."""

    topic: str


class Note(BaseModel):
    """The helper's output."""

    note: str


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"notes on {topic}"


def tree(adapter: Adapter) -> list[AgentConfig]:
    """The lead and its helper on ``adapter``'s model, named for it (one gateway serves all)."""
    helper = define_agent(
        f"{adapter.slug}_helper",
        system_prompt="You are the helper.",
        tools=[lookup],
        output_schema=Note,
        model=adapter.model,
    )
    lead = define_agent(
        f"{adapter.slug}_lead",
        system_prompt="You are the lead.",
        tools=[lookup, create_sub_agent_tool(helper, Topic)],
        model=adapter.model,
    )
    return [lead, helper]


def model(c: Conversation) -> Said:
    """The model behind every fake: which agent asks (its system prompt), and how far it got
    (how many tool results it has read).

    The lead reasons, looks tea up, asks its helper, then says what it read; the helper
    looks the leaf up and finishes with what it read, and more: its ``__finish__``
    arguments stream in three pieces (Gemini's whole), a ``partial_output`` on the way.
    """
    if c.system == "You are the helper.":
        if not c.results:
            return Said(calls=(Call("h1", "lookup", {"topic": "leaf"}),))
        finish = Call("h2", "__finish__", {"note": f"{c.results[0]}, and all they say"}, 3)
        return Said(text=("Done.",), calls=(finish,))
    assert c.system == "You are the lead.", c.system
    if not c.results:
        return Said(
            thinking=("Tea ", "first."),
            signature=SIGNATURE,
            text=("Let me ", "look."),
            calls=(Call("c1", "lookup", {"topic": "tea"}),),
        )
    if len(c.results) == 1:
        [helper] = [name for name in c.tools if name.startswith("subagent__")]
        return Said(text=("Asking.",), calls=(Call("c2", helper, {"topic": "leaf"}),))
    return Said(text=("I saw ", "; ".join(c.results)))


@dataclass
class Fakes:
    """Each provider's fake, answering by :func:`model`; OpenAI's two APIs on one server."""

    anthropic: FakeAnthropic
    gemini: FakeGemini
    responses: FakeResponses
    chat: FakeChat

    @classmethod
    def make(cls) -> Fakes:
        """The four fakes, each answering by conversation."""
        fakes = cls(FakeAnthropic(), FakeGemini(), FakeResponses(), FakeChat())
        fakes.anthropic.answer = answering("anthropic", model)
        fakes.gemini.answer = answering("gemini", model)
        fakes.responses.answer = answering("responses", model)
        fakes.chat.answer = answering("chat", model)
        return fakes

    def openai(self) -> Starlette:
        """``/v1/responses`` and ``/v1/chat/completions`` on one app (one ``OPENAI_BASE_URL``)."""
        return Starlette(routes=[*self.responses.app().routes, *self.chat.app.routes])

    def conversations(self, wire: str) -> list[Conversation]:
        """The requests ``wire``'s fake received, read."""
        fake = {"anthropic": self.anthropic, "gemini": self.gemini, "chat": self.chat}.get(wire)
        requests = fake.requests if fake is not None else self.responses.requests
        return [WIRES[wire].read(request.body) for request in requests]


@asynccontextmanager
async def served(fakes: Fakes) -> AsyncIterator[None]:
    """The fakes on uvicorn, each provider's variables pointing at its own (and a fake key)."""
    async with (
        serve(fakes.anthropic.app) as anthropic_url,
        serve(fakes.gemini.app) as gemini_url,
        serve(fakes.openai()) as openai_url,
    ):
        with pytest.MonkeyPatch.context() as env:
            for name in ("GOOGLE_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
                env.delenv(name, raising=False)
            env.setenv("ANTHROPIC_API_KEY", "sk-ant-fake")
            env.setenv("ANTHROPIC_BASE_URL", anthropic_url)
            env.setenv("GEMINI_API_KEY", "gemini-fake")
            env.setenv("GOOGLE_GEMINI_BASE_URL", gemini_url)
            env.setenv("OPENAI_API_KEY", "sk-fake")
            env.setenv("OPENAI_BASE_URL", f"{openai_url}/v1")
            yield


# --- one play of a tree on one gateway ----------------------------------------------------


@dataclass(frozen=True)
class Played:
    """What the client saw of one tree on one runtime, the tree's logs, and why it stopped
    short (``failure``) if it did."""

    seen: list[Any]
    logs: list[list[Any]]
    failure: str | None


async def _play(http: httpx.AsyncClient, adapter: Adapter) -> list[Any]:
    """Start the tree's lead; follow its stream to the end; its status; then its helper's."""
    lead = Client(http, adapter.session)
    await lead.start(f"{adapter.slug}_lead")
    await lead.sse()
    await lead.status()
    [helper_id] = {
        frame["chunk"]["subAgentId"]
        for _, event, _, frame in (item for item in lead.seen if item[0] == "sse")
        if event == "chunk" and frame["chunk"]["type"] == "subagent_start"
    }
    helper = Client(http, helper_id)
    await helper.sse()
    await helper.status()
    return lead.seen + helper.seen


@pytest.fixture(scope="module")
async def played(
    tmp_path_factory: pytest.TempPathFactory,
    temporal_dev: TemporalDev,
    dbos_system_template: Path,
) -> tuple[dict[tuple[str, str], Played], Fakes]:
    """Every adapter's tree played on every runtime, all at once (one gateway per runtime)."""
    results: dict[tuple[str, str], Played] = {}
    fakes = Fakes.make()
    agents = [agent for adapter in ADAPTERS.values() for agent in tree(adapter)]

    async def on(runtime: str) -> None:
        directory = tmp_path_factory.mktemp(f"adapters-{runtime}")
        store = SqliteEventStore(directory / "events.db")
        dev = temporal_dev if runtime == "temporal" else None
        template = dbos_system_template if runtime == "dbos" else None
        try:
            async with (
                Runtime(runtime, directory, dev, template).server(agents, store) as server,
                serve(create_http_app(server)) as url,
                httpx.AsyncClient(base_url=url, timeout=LIMIT) as http,
            ):

                async def one(name: str, adapter: Adapter) -> None:
                    seen: list[Any] = []
                    failure = None
                    try:
                        with anyio.fail_after(LIMIT):
                            seen = await _play(http, adapter)
                    except TimeoutError:
                        failure = f"not played to its end within {LIMIT:.0f} s"
                    except Exception as exc:  # recorded: the tests report it
                        failure = f"{type(exc).__name__}: {exc}"
                    sessions = sorted(await store.list_sessions())
                    logs = [
                        [msgspec.to_builtins(event) for event in await store.read(session)]
                        for session in sessions
                        if session.startswith(adapter.session)
                    ]
                    results[name, runtime] = Played(seen, logs, failure)

                async with anyio.create_task_group() as tg:
                    for name, adapter in ADAPTERS.items():
                        tg.start_soon(one, name, adapter)
        finally:
            await store.close()

    with anyio.fail_after(LIMIT + 60):
        async with served(fakes), anyio.create_task_group() as tg:
            for runtime in RUNTIMES:
                tg.start_soon(on, runtime)
    return results, fakes


def _played(played: dict[tuple[str, str], Played], name: str, runtime: str) -> Played:
    """The play, failing with what it saw if it stopped short."""
    play = played[name, runtime]
    shown = "\n".join(json.dumps(item) for item in normalized(play.seen))
    assert play.failure is None, f"{name} on {runtime}: {play.failure}; it saw:\n{shown}"
    return play


# --- what differs between adapters ----------------------------------------------------------

_TOKENS = ("inputTokens", "outputTokens", "cachedInputTokens", "reasoningTokens")


def _call_ids(value: Any) -> Iterator[str]:
    """The tool call ids in ``value``, in order (duplicates too)."""
    if isinstance(value, dict):
        if isinstance(value.get("toolCallId"), str):
            yield value["toolCallId"]
        for call in value.get("toolCalls", []) if isinstance(value.get("toolCalls"), list) else []:
            yield call["id"]
        for inner in value.values():
            yield from _call_ids(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _call_ids(inner)


def without_the_model(logs: list[list[Any]], adapter: Adapter) -> list[list[Any]]:
    """The tree's logs without what is the model's own (see the module's docstring).

    Reasoning and partial output chunks are dropped, and with them every
    sequence number (the order of the events stays); the tree's names become ``tree``, ``lead`` and
    ``helper``; call ids ``call-1``, ``call-2``... by first appearance.
    """
    ranks: dict[str, str] = {}
    for call_id in _call_ids(logs):
        ranks.setdefault(call_id, f"call-{len(ranks) + 1}")
    names = {
        adapter.session: "tree",
        f"{adapter.slug}_lead": "lead",
        f"{adapter.slug}_helper": "helper",
        **ranks,
    }
    order = sorted(names, key=len, reverse=True)  # a longer name first: none is cut

    def text(value: str) -> str:
        for name in order:
            value = value.replace(name, names[name])
        return value

    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if value.get("type") == "usage_recorded" and value.get("kind") == "tokens":
                value = {**value, "name": "MODEL", **dict.fromkeys(_TOKENS, "TOKENS")}
            return {
                key: walk(inner)
                for key, inner in value.items()
                if key not in ("seq", "childSeq", "ts", "runId", "reasoning")
            }
        if isinstance(value, list):
            return [walk(inner) for inner in value if not _streamed_by_the_model(inner)]
        return text(value) if isinstance(value, str) else value

    return [walk(log) for log in logs]


def _streamed_by_the_model(event: Any) -> bool:
    """A reasoning or partial output chunk (or a child's, forwarded)."""
    if not isinstance(event, dict):
        return False
    chunk = event.get("chunk") if event.get("type") == "child_chunk_forwarded" else event
    return isinstance(chunk, dict) and chunk.get("type") in ("reasoning_delta", "partial_output")


def _difference(ours: list[Any], theirs: list[Any]) -> str:
    """Where two records first differ, for the failure message."""
    for index, (a, b) in enumerate(zip(ours, theirs, strict=False)):
        if a != b:
            return f"item {index}:\n  {json.dumps(a)}\n  {json.dumps(b)}"
    shorter = min(len(ours), len(theirs))
    return f"lengths {len(ours)} and {len(theirs)}; then:\n  {ours[shorter:]}\n  {theirs[shorter:]}"


# --- the checks ---------------------------------------------------------------------------


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", list(ADAPTERS))
async def test_the_tree_answers_from_both_tool_results(
    played: tuple[dict[tuple[str, str], Played], Fakes], name: str, runtime: str
) -> None:
    """The lead read its lookup's result and its helper's output, through the provider's wire."""
    play = _played(played[0], name, runtime)
    statuses = [item[2] for item in play.seen if item[0] == "GET /status"]
    assert [status["status"] for status in statuses] == ["completed", "completed"]
    assert statuses[0]["output"] == ANSWER
    assert statuses[1]["output"] == {"note": NOTE}
    partials = [
        frame["chunk"]["output"]["note"]
        for _, event, _, frame in (item for item in play.seen if item[0] == "sse")
        if event == "chunk" and frame["chunk"]["type"] == "partial_output"
    ]
    assert partials, "the helper's output streamed as it was written"
    assert all(NOTE.startswith(note) for note in partials), partials
    assert len(play.logs) == 2  # the lead's and the helper's
    tokens = [
        event
        for log in play.logs
        for event in log
        if event["type"] == "usage_recorded" and event["kind"] == "tokens"
    ]
    assert len(tokens) == 5  # a model call each: the lead's three, the helper's two
    # the model's own usage, which the adapters' comparison leaves out: its name and counts
    assert {event["name"] for event in tokens} == {ADAPTERS[name].answers_as}
    assert all(event["inputTokens"] == 10 and event["outputTokens"] >= 5 for event in tokens)


@pytest.mark.parametrize("name", REASONS)
async def test_the_leads_reasoning_goes_back_to_its_provider(
    played: tuple[dict[tuple[str, str], Played], Fakes], name: str
) -> None:
    """Each later request of the lead, on every runtime, carries its first turn's reasoning."""
    results, fakes = played
    for runtime in RUNTIMES:
        _played(results, name, runtime)
    read = fakes.conversations(ADAPTERS[name].wire)
    later = [c for c in read if c.system == "You are the lead." and c.results]
    assert len(later) >= 2 * len(RUNTIMES)  # two later steps per tree
    assert all(conversation.kept == [SIGNATURE] for conversation in later), later


@pytest.mark.parametrize(("first", "second"), PAIRS, ids=[f"{a}-vs-{b}" for a, b in PAIRS])
@pytest.mark.parametrize("name", list(ADAPTERS))
async def test_a_client_sees_the_same_tree_on_both_runtimes(
    played: tuple[dict[tuple[str, str], Played], Fakes], name: str, first: str, second: str
) -> None:
    ours, theirs = _played(played[0], name, first), _played(played[0], name, second)
    a, b = normalized(ours.seen), normalized(theirs.seen)
    assert a == b, f"{name}: {first} vs {second} first differ at {_difference(a, b)}"


@pytest.mark.parametrize("runtime", RUNTIMES)
@pytest.mark.parametrize("name", [name for name in ADAPTERS if name != "anthropic"])
async def test_the_logs_agree_across_adapters_but_for_the_model(
    played: tuple[dict[tuple[str, str], Played], Fakes], name: str, runtime: str
) -> None:
    """Each adapter's logs against ``anthropic:``'s, on the same runtime."""
    ours = _played(played[0], "anthropic", runtime)
    theirs = _played(played[0], name, runtime)
    a = without_the_model(ours.logs, ADAPTERS["anthropic"])
    b = without_the_model(theirs.logs, ADAPTERS[name])
    for index, (log_a, log_b) in enumerate(zip(a, b, strict=True)):
        assert log_a == log_b, f"log {index}: anthropic vs {name}: {_difference(log_a, log_b)}"
