"""Reasoning and typed output as they stream: the chunks a model step emits (no sockets).

``RunActions.step`` turns a model's reasoning pieces into ``reasoning_delta``
chunks and the pieces of its ``__finish__`` arguments into ``partial_output``
chunks (each a JSON object, the fields so far, at a bounded rate); the final
output is validated as before. ``ScriptedLLM`` scripts both.
"""

from __future__ import annotations

import itertools
from typing import Any

import msgspec
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent
from helix_agents.events import (
    Event,
    MessageAppended,
    OutputChunk,
    PartialOutput,
    ReasoningDelta,
    TextDelta,
    UsageRecorded,
)
from helix_agents.log import project_state, project_stream
from helix_agents.messages import AssistantMessage, ReasoningPart, UserMessage
from helix_agents.models import (
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMTextDelta,
    LLMToolCallDelta,
    ReplayLLM,
    ScriptedLLM,
    ScriptStep,
    TokenUsage,
)
from helix_agents.runtime.actions import PARTIAL_OUTPUT_MIN_CHARS, StepChunks, partial_json
from helix_agents.server.cli.replay import format_state
from helix_agents.server.cli.timeline import format_event
from helix_agents.server.ui.view import OutputEntry, ReasoningEntry, fold_view
from helix_agents.stores import MemoryEventStore


class Trip(BaseModel):
    title: str
    days: list[str]
    budget: int


TRIP = {
    "title": "Three days in Lyon, slowly",
    "days": ["Vieux Lyon and Fourviere", "Presqu'ile and the museums", "Croix-Rousse"],
    "budget": 450,
}
THOUGHT = "Lyon or Nice? Lyon: the food, and the trains are easy."


def grows_into(partial: Any, whole: Any) -> bool:
    """True if ``partial`` is what a prefix of ``whole``'s JSON holds (the fields so far)."""
    if isinstance(partial, dict):
        return isinstance(whole, dict) and all(
            key in whole and grows_into(value, whole[key]) for key, value in partial.items()
        )
    if isinstance(partial, list):
        return (
            isinstance(whole, list)
            and len(partial) <= len(whole)
            and all(grows_into(p, w) for p, w in zip(partial, whole, strict=False))
        )
    if isinstance(partial, str):
        return isinstance(whole, str) and whole.startswith(partial)
    return bool(partial == whole)


# --- the partial JSON parser ------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("", None),
        ("  ", None),
        ("{", {}),
        ('{"title": "Ly', {"title": "Ly"}),
        ('{"title": "Lyon", "da', {"title": "Lyon"}),
        ('{"title": "Lyon", "days": ', {"title": "Lyon"}),
        ('{"days": ["a", "b', {"days": ["a", "b"]}),
        ('{"days": [["x"], {"k": "v', {"days": [["x"], {"k": "v"}]}),
        ('{"budget": 45', {}),  # a number at the end may still grow: left out
        ('{"budget": 450,', {"budget": 450}),
        ('{"budget": 450}', {"budget": 450}),
        ('{"ok": tru', {}),
        ('{"ok": true}', {"ok": True}),
        ('{"n": null, "s": "a\\"b', {"n": None, "s": 'a"b'}),
        ('{"s": "caf\\u00', {"s": "caf"}),  # an escape cut in the middle: left out
        ("not json", None),
    ],
)
def test_partial_json_closes_what_is_open_and_drops_what_may_grow(text: str, value: Any) -> None:
    assert partial_json(text) == value


def test_every_prefix_of_a_json_text_parses_to_what_the_whole_keeps() -> None:
    text = msgspec.json.encode(TRIP).decode()
    for end in range(len(text) + 1):
        value = partial_json(text[:end])
        assert value is None or grows_into(value, TRIP), text[:end]
    assert partial_json(text) == TRIP


# --- StepChunks: the pieces of one step as chunks ---------------------------------


def _finish_pieces(text: str, size: int, *, index: int = 0) -> list[LLMToolCallDelta]:
    return [
        LLMToolCallDelta(
            index=index,
            arguments=text[start : start + size],
            id="call_f" if start == 0 else None,
            name="__finish__" if start == 0 else None,
        )
        for start in range(0, len(text), size)
    ]


def test_finish_pieces_become_growing_partial_outputs_at_a_bounded_rate() -> None:
    text = msgspec.json.encode(TRIP).decode()
    pieces = StepChunks("s-1", "planner", outputs=True)
    partials: list[Any] = []
    for piece in _finish_pieces(text, 1):  # a character at a time, each its own batch
        for chunk in pieces.take([piece]):
            assert isinstance(chunk, PartialOutput)
            assert (chunk.agent_id, chunk.agent_type) == ("s-1", "planner")
            partials.append(chunk.output)
    assert len(partials) >= 3
    # Parsed only after PARTIAL_OUTPUT_MIN_CHARS more characters: far fewer than the pieces.
    assert len(partials) <= len(text) // PARTIAL_OUTPUT_MIN_CHARS
    for before, after in itertools.pairwise(partials):
        assert before != after  # only when it changed
        assert grows_into(before, after)
    assert all(isinstance(value, dict) and grows_into(value, TRIP) for value in partials)
    # Each is valid JSON on the wire.
    for value in partials:
        assert msgspec.json.decode(msgspec.json.encode(value)) == value


def test_text_and_reasoning_pieces_keep_their_order_and_the_response_is_kept() -> None:
    pieces = StepChunks("s-1", "planner", outputs=False)
    response = LLMResponse(content="Lyon.")
    chunks = pieces.take(
        [
            LLMReasoningDelta(text="hmm, "),
            LLMTextDelta(text="Ly"),
            LLMReasoningDelta(text=""),
            LLMReasoningDelta(text="yes"),
            LLMTextDelta(text="on."),
            response,
        ]
    )
    assert [(type(c).__name__, getattr(c, "delta", None)) for c in chunks] == [
        ("ReasoningDelta", "hmm, "),
        ("TextDelta", "Ly"),
        ("ReasoningDelta", "yes"),
        ("TextDelta", "on."),
    ]
    assert pieces.response is response


def test_other_tools_and_agents_without_an_output_schema_stream_no_output() -> None:
    text = msgspec.json.encode(TRIP).decode()
    other = [
        LLMToolCallDelta(index=0, arguments=text[:80], id="c1", name="search"),
        LLMToolCallDelta(index=0, arguments=text[80:]),
    ]
    assert StepChunks("s", "a", outputs=True).take(other) == []
    assert StepChunks("s", "a", outputs=False).take(_finish_pieces(text, 40)) == []
    # A second call's pieces interleaved with the finish's do not mix into it.
    mixed = StepChunks("s", "a", outputs=True)
    seen: list[Any] = []
    second = [msgspec.structs.replace(piece, index=1) for piece in other * 3]
    for finish, search in zip(_finish_pieces(text, 40), second, strict=False):
        seen += [c.output for c in mixed.take([search, finish]) if isinstance(c, PartialOutput)]
    assert seen
    assert all(grows_into(value, TRIP) for value in seen)


def test_malformed_arguments_stream_no_partial_output() -> None:
    pieces = StepChunks("s", "a", outputs=True)
    bad = "<<" + "x" * 100
    assert pieces.take(_finish_pieces(bad, 50)) == []


# --- ScriptedLLM scripts reasoning and streamed arguments -----------------------


async def test_scripted_llm_streams_reasoning_then_text_then_argument_pieces() -> None:
    llm = ScriptedLLM(
        [ScriptedLLM.finish(TRIP, text="Here.", reasoning=THOUGHT, stream_arguments=4)],
        chunk_words=2,
    )
    request = LLMRequest(messages=[UserMessage(content="plan")])
    parts = [part async for part in llm.stream(request)]
    thoughts = [p.text for p in parts if isinstance(p, LLMReasoningDelta)]
    assert "".join(thoughts) == THOUGHT
    assert len(thoughts) > 1
    args = [p for p in parts if isinstance(p, LLMToolCallDelta)]
    assert len(args) == 4
    assert (args[0].id, args[0].name, args[0].index) == ("call_0_0", "__finish__", 0)
    assert all(p.id is None and p.name is None for p in args[1:])
    assert msgspec.json.decode("".join(p.arguments for p in args)) == TRIP
    response = parts[-1]
    assert isinstance(response, LLMResponse)
    assert response.reasoning == [ReasoningPart(text=THOUGHT, provider="scripted")]
    assert response.usage is not None
    assert response.usage.reasoning_tokens == len(THOUGHT.split(" "))
    assert response.usage.output_tokens == 1 + len(THOUGHT.split(" "))
    # Without reasoning or streamed arguments a turn is what it was.
    plain = [p async for p in ScriptedLLM(["Hi there."]).stream(request)]
    assert [type(p) for p in plain] == [LLMTextDelta, LLMResponse]
    assert isinstance(plain[-1], LLMResponse)
    assert plain[-1].reasoning == []


# --- through a run: the log ---------------------------------------------------------


async def _run(agent: Any, session_id: str) -> list[Event]:
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        handle = await executor.execute(agent, "plan a trip", session_id=session_id)
        await handle.result()
    return await store.read(session_id)


async def test_a_run_logs_reasoning_apart_from_its_answer_and_keeps_it_on_the_turn() -> None:
    usage = TokenUsage(
        input_tokens=900, output_tokens=60, cached_input_tokens=800, reasoning_tokens=40
    )
    agent = define_agent(
        "thinker",
        llm=ScriptedLLM([ScriptStep(text="Lyon it is.", reasoning=THOUGHT, usage=usage)]),
    )
    log = await _run(agent, "think-1")
    thoughts = [e for e in log if isinstance(e, ReasoningDelta)]
    assert "".join(e.delta for e in thoughts) == THOUGHT
    assert all((e.agent_id, e.agent_type) == ("think-1", "thinker") for e in thoughts)
    assert "".join(e.delta for e in log if isinstance(e, TextDelta)) == "Lyon it is."
    state = project_state(log)
    assert state.output == "Lyon it is."
    assert "Lyon or Nice" not in str(state.output)
    (turn,) = [
        e.message
        for e in log
        if isinstance(e, MessageAppended) and isinstance(e.message, AssistantMessage)
    ]
    assert isinstance(turn, AssistantMessage)
    assert turn.reasoning == [ReasoningPart(text=THOUGHT, provider="scripted")]
    (tokens,) = [e for e in log if isinstance(e, UsageRecorded)]
    assert (tokens.cached_input_tokens, tokens.reasoning_tokens) == (800, 40)
    assert (state.usage.cached_input_tokens, state.usage.reasoning_tokens) == (800, 40)
    assert state.usage.models["scripted"].cached_input_tokens == 800
    # The stream carries them; the reasoning chunks come before the answer's text.
    kinds = [type(item.chunk).__name__ for item in project_stream(log)]
    assert kinds.index("ReasoningDelta") < kinds.index("TextDelta")
    # The timeline and replay name them.
    lines = [format_event(e) for e in log]
    assert any("reasoning_delta" in line and "thinks 'Lyon or Nice" in line for line in lines)
    assert any("tokens in=900 out=60 cached=800 reasoning=40" in line for line in lines)
    assert any("(cached in 800) (reasoning 40)" in line for line in format_state(state))


async def test_a_run_streams_its_typed_output_as_it_is_written_then_validates_it() -> None:
    agent = define_agent(
        "planner",
        output_schema=Trip,
        llm=ScriptedLLM([ScriptedLLM.finish(TRIP, reasoning=THOUGHT, stream_arguments=12)]),
    )
    log = await _run(agent, "plan-1")
    partials = [e for e in log if isinstance(e, PartialOutput)]
    assert len(partials) >= 3
    for before, after in itertools.pairwise(partials):
        assert before.output != after.output
        assert grows_into(before.output, after.output)
    assert all(grows_into(e.output, TRIP) for e in partials)
    (output,) = [e for e in log if isinstance(e, OutputChunk)]
    assert output.output == TRIP
    assert output.seq > partials[-1].seq
    assert project_state(log).output == TRIP
    # The inspector's fold shows the output so far in place, then the validated one.
    items = project_stream(log)
    cut = next(i for i, item in enumerate(items) if isinstance(item.chunk, PartialOutput))
    early = fold_view("plan-1", "planner", items[: cut + 1]).agents["plan-1"].entries
    assert [msgspec.to_builtins(e) for e in early if isinstance(e, OutputEntry)] == [
        {"kind": "output", "output": partials[0].output, "partial": True}
    ]
    done = fold_view("plan-1", "planner", items).agents["plan-1"].entries
    assert [msgspec.to_builtins(e) for e in done if isinstance(e, OutputEntry)] == [
        {"kind": "output", "output": TRIP, "partial": False}
    ]
    assert [msgspec.to_builtins(e) for e in done if isinstance(e, ReasoningEntry)] == [
        {"kind": "reasoning", "text": THOUGHT}
    ]


async def test_a_refused_finish_streams_its_partials_then_the_next_try_validates() -> None:
    wrong = {"title": "Lyon, in a hurry and without a plan", "days": "all of them", "budget": 1}
    agent = define_agent(
        "planner",
        output_schema=Trip,
        llm=ScriptedLLM(
            [
                ScriptedLLM.finish(wrong, stream_arguments=6),
                ScriptedLLM.finish(TRIP, stream_arguments=6),
            ]
        ),
    )
    log = await _run(agent, "plan-2")
    partials = [e.output for e in log if isinstance(e, PartialOutput)]
    assert any(grows_into(value, wrong) and value.get("title") for value in partials)
    assert grows_into(partials[-1], TRIP)
    assert [e.output for e in log if isinstance(e, OutputChunk)] == [TRIP]


async def test_a_replayed_run_keeps_the_reasoning_and_its_tokens_without_a_divergence() -> None:
    usage = TokenUsage(
        input_tokens=50, output_tokens=30, cached_input_tokens=20, reasoning_tokens=9
    )
    agent = define_agent(
        "thinker",
        llm=ScriptedLLM([ScriptStep(text="Lyon it is.", reasoning=THOUGHT, usage=usage)]),
    )
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        await (await executor.execute(agent, "plan", session_id="rec-1")).result()
    replay = await ReplayLLM.from_store(store, "rec-1")
    again = MemoryEventStore()
    async with AgentExecutor(again, [agent], llm_override=replay) as executor:
        await (await executor.execute(agent, "plan", session_id="rec-1")).result()
    assert replay.divergences == []
    log = await again.read("rec-1")
    assert "".join(e.delta for e in log if isinstance(e, ReasoningDelta)) == THOUGHT
    state = project_state(log)
    assert (state.usage.cached_input_tokens, state.usage.reasoning_tokens) == (20, 9)
    (turn,) = [
        e.message
        for e in log
        if isinstance(e, MessageAppended) and isinstance(e.message, AssistantMessage)
    ]
    assert turn.reasoning == [ReasoningPart(text=THOUGHT, provider="scripted")]
