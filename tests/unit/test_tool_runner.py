"""``run_tool_call`` and its helpers on a memory store, without a run loop.

Each test writes a session whose last assistant turn holds the call, then runs
the call through ``run_tool_call`` with a :class:`SessionWriter` and a recording
``fire`` callback, and reads what the log holds.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import PurePosixPath
from typing import Any

import anyio
import msgspec
import pytest
from pydantic import BaseModel, ValidationError

from helix_agents import AgentConfig, Tool, define_agent, define_tool
from helix_agents.events import (
    CustomChunk,
    Event,
    MessageAppended,
    RunStarted,
    SessionCreated,
    StateUpdated,
    ToolEnd,
    ToolStart,
    UsageRecorded,
)
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage
from helix_agents.runtime.tool_runner import (
    ToolOutcome,
    encode_result,
    run_tool_call,
    to_jsonable,
    validate_finish,
    validation_message,
)
from helix_agents.runtime.writer import SessionWriter
from helix_agents.stores import MemoryEventStore

LIMIT = 5.0
"""Seconds any one test may take."""

S = "session-1"
CALL_ID = "t1"


class Numbers(BaseModel):
    a: int
    b: int


class Query(BaseModel):
    query: str


class Tally(BaseModel):
    total: int = 0
    label: str = "fresh"


class Item(BaseModel):
    name: str


class Basket(BaseModel):
    items: list[Item]


class Stamp(BaseModel):
    at: datetime


class BatchStore(MemoryEventStore):
    """A memory store that keeps every committed batch."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[list[Event]] = []

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        last = await super().append(session_id, events, expected_seq)
        self.batches.append(list(events))
        return last


class Fired:
    """A ``fire`` callback: records hooks; ``probe(name)`` runs as each fires."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.probe: Callable[[str], Any] | None = None

    async def __call__(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.probe is not None:
            await self.probe(name)


@dataclass
class Session:
    store: BatchStore
    writer: SessionWriter
    agent: AgentConfig
    fired: Fired

    async def run(self, tool: Tool[Any], arguments: Any) -> tuple[ToolOutcome, list[Event]]:
        """Run one call of ``tool``; return its outcome and the events it added to the log."""
        before = self.writer.last_seq
        call = ToolCall(id=CALL_ID, name=tool.name, arguments=arguments)
        outcome = await run_tool_call(self.agent, self.writer, call, tool, self.fired)
        return outcome, await self.store.read(S, before)


@asynccontextmanager
async def session(
    *tools: Tool[Any], state_schema: type[BaseModel] | None = None
) -> AsyncIterator[Session]:
    """A session of agent ``agent`` (with ``tools``) waiting on one call, and a writer over it."""
    agent = define_agent("agent", tools=tools, state_schema=state_schema)
    store = BatchStore()
    now = time.time()
    created = SessionCreated(
        session_id=S,
        seq=1,
        ts=now,
        agent_type="agent",
        run_id="run-1",
        initial_state=agent.initial_state(),
    )
    await store.append(S, [created, RunStarted(session_id=S, seq=2, ts=now, run_id="run-1")], 0)
    writer = SessionWriter(store, await store.read(S))
    calls = [ToolCall(id=CALL_ID, name=tool.name) for tool in tools[:1]]
    await writer.append(MessageAppended(message=AssistantMessage(tool_calls=calls)))
    try:
        yield Session(store, writer, agent, Fired())
    finally:
        await store.close()


def message_of(events: Sequence[Event]) -> ToolResultMessage:
    [message] = [
        e.message
        for e in events
        if isinstance(e, MessageAppended) and isinstance(e.message, ToolResultMessage)
    ]
    return message


def end_of(events: Sequence[Event]) -> ToolEnd:
    [end] = [e for e in events if isinstance(e, ToolEnd)]
    return end


def error_result(events: Sequence[Event], expected: str) -> None:
    """The call ended with error ``expected``: as the LLM reads it and on ``tool_end``."""
    message = message_of(events)
    assert message.is_error
    assert msgspec.json.decode(message.content) == {"error": expected}
    assert end_of(events).error == expected
    assert end_of(events).result is None


# --- results -----------------------------------------------------------------------------------


async def test_a_result_is_recorded_between_tool_start_and_tool_end() -> None:
    ran: list[Numbers] = []

    async def add(value: Numbers, ctx: Any) -> dict[str, int]:
        ran.append(value)
        return {"sum": value.a + value.b}

    tool = define_tool("add", "Add.", Numbers, add)
    seen: dict[str, list[Event]] = {}
    with anyio.fail_after(LIMIT):
        async with session(tool) as s:

            async def probe(name: str) -> None:
                seen[name] = await s.store.read(S)
                if name == "before_tool":
                    assert ran == []  # before the tool runs

            s.fired.probe = probe
            outcome, events = await s.run(tool, {"a": 1, "b": 2})
            batches = s.store.batches

    assert outcome == ToolOutcome(result={"sum": 3})
    assert [type(e) for e in events] == [ToolStart, MessageAppended, ToolEnd, UsageRecorded]
    start, _, end, usage = events
    assert isinstance(start, ToolStart)
    assert (start.tool_call_id, start.tool_name, start.arguments) == (
        CALL_ID,
        "add",
        {"a": 1, "b": 2},
    )
    assert (start.agent_id, start.agent_type) == (S, "agent")
    message = message_of(events)
    assert message == ToolResultMessage(
        tool_call_id=CALL_ID, tool_name="add", content='{"sum":3}', is_error=False
    )
    assert isinstance(end, ToolEnd)
    assert (end.result, end.error) == ({"sum": 3}, None)
    assert isinstance(usage, UsageRecorded)
    assert (usage.kind, usage.name) == ("tool", "add")
    assert ran == [Numbers(a=1, b=2)]
    # tool_start is committed first; the result is one batch.
    assert batches[-2:] == [events[:1], events[1:]]
    assert s.fired.calls == [
        ("before_tool", (ToolCall(id=CALL_ID, name="add", arguments={"a": 1, "b": 2}),)),
        ("after_tool", (ToolCall(id=CALL_ID, name="add", arguments={"a": 1, "b": 2}), outcome)),
    ]
    assert isinstance(seen["before_tool"][-1], ToolStart)  # fired after tool_start is in the log
    assert isinstance(seen["after_tool"][-1], UsageRecorded)  # and after the result is
    assert s.writer.state.usage.tool_calls == 1


async def test_a_pydantic_result_is_recorded_as_json() -> None:
    async def stamp(value: Query, ctx: Any) -> Stamp:
        return Stamp(at=datetime(2024, 5, 6, 7, 8, 9, tzinfo=UTC))

    tool = define_tool("stamp", "Stamp.", Query, stamp)
    with anyio.fail_after(LIMIT):
        async with session(tool) as s:
            outcome, events = await s.run(tool, {"query": "now"})

    assert outcome.result == {"at": "2024-05-06T07:08:09Z"}
    assert message_of(events).content == '{"at":"2024-05-06T07:08:09Z"}'
    assert end_of(events).result == {"at": "2024-05-06T07:08:09Z"}


async def test_a_string_result_is_the_text_the_llm_reads() -> None:
    tool = define_tool("echo", "Echo.", Query, lambda value, ctx: f"you said {value.query}")
    with anyio.fail_after(LIMIT):
        async with session(tool) as s:
            outcome, events = await s.run(tool, {"query": "hi"})

    assert outcome.result == "you said hi"
    assert message_of(events).content == "you said hi"


# --- errors ------------------------------------------------------------------------------------


async def test_invalid_arguments_are_one_error_line_and_the_tool_never_runs() -> None:
    ran: list[Any] = []
    tool = define_tool("add", "Add.", Numbers, lambda value, ctx: ran.append(value))
    expected = (
        "invalid arguments: a: Input should be a valid integer, unable to parse string as an "
        "integer; b: Field required"
    )
    with anyio.fail_after(LIMIT):
        async with session(tool) as s:
            outcome, events = await s.run(tool, {"a": "x"})

    assert outcome == ToolOutcome(error=expected)
    assert "\n" not in expected
    error_result(events, expected)
    assert [type(e) for e in events] == [ToolStart, MessageAppended, ToolEnd, UsageRecorded]
    assert ran == []
    assert [name for name, _ in s.fired.calls] == ["before_tool", "after_tool"]


def test_validation_message_names_nested_fields_and_the_whole_input() -> None:
    with pytest.raises(ValidationError) as nested:
        Basket.model_validate({"items": [{"name": "a"}, {"name": 3}]})
    assert validation_message(nested.value) == (
        "invalid arguments: items.1.name: Input should be a valid string"
    )
    with pytest.raises(ValidationError) as whole:
        Basket.model_validate("not an object")
    assert validation_message(whole.value) == (
        "invalid arguments: input: Input should be a valid dictionary or instance of Basket"
    )


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_an_exception_is_an_error_result(sync: bool) -> None:
    def fail_sync(value: Query, ctx: Any) -> None:
        raise LookupError(f"no such city: {value.query}")

    async def fail_async(value: Query, ctx: Any) -> None:
        fail_sync(value, ctx)

    tool = define_tool("city", "Find a city.", Query, fail_sync if sync else fail_async)
    with anyio.fail_after(LIMIT):
        async with session(tool) as s:
            outcome, events = await s.run(tool, {"query": "Atlantis"})

    expected = "LookupError: no such city: Atlantis"
    assert outcome == ToolOutcome(error=expected)
    error_result(events, expected)
    assert s.fired.calls[-1] == (
        "after_tool",
        (ToolCall(id=CALL_ID, name="city", arguments={"query": "Atlantis"}), outcome),
    )


@pytest.mark.parametrize("sync", [False, True], ids=["async", "sync"])
async def test_a_timeout_is_an_error_result(sync: bool) -> None:
    release = threading.Event()

    def block_sync(value: Query, ctx: Any) -> str:
        release.wait(LIMIT)  # abandoned on the timeout; released when the test ends
        return "late"

    async def block_async(value: Query, ctx: Any) -> str:
        await anyio.sleep_forever()
        return "never"

    tool = define_tool(
        "slow", "Take forever.", Query, block_sync if sync else block_async, timeout=0.05
    )
    try:
        with anyio.fail_after(LIMIT):
            async with session(tool) as s:
                outcome, events = await s.run(tool, {"query": "x"})
    finally:
        release.set()

    expected = "tool 'slow' timed out after 0.05s"
    assert outcome == ToolOutcome(error=expected)
    error_result(events, expected)


async def test_cancellation_escapes_and_records_no_result() -> None:
    entered = anyio.Event()

    async def wait(value: Query, ctx: Any) -> str:
        entered.set()
        await anyio.sleep_forever()
        return "never"

    tool = define_tool("wait", "Wait.", Query, wait)
    with anyio.fail_after(LIMIT):
        async with session(tool) as s:
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.run, tool, {"query": "x"})
                await entered.wait()
                tg.cancel_scope.cancel()
            events = await s.store.read(S, 3)

    assert [type(e) for e in events] == [ToolStart]  # the stop cleanup closes it, not the tool
    assert [name for name, _ in s.fired.calls] == ["before_tool"]


# --- the tool context --------------------------------------------------------------------------


async def test_a_sync_tool_runs_on_a_worker_thread_with_a_blocking_context() -> None:
    loop_thread = threading.get_ident()
    seen: dict[str, Any] = {}

    def work(value: Query, ctx: Any) -> str:
        seen["thread"] = threading.get_ident()
        seen["ids"] = (ctx.session_id, ctx.tool_call_id, ctx.agent_type)
        seen["initial"] = ctx.state
        seen["merged"] = ctx.update_state({"total": 5})
        seen["applied"] = ctx.update_state(lambda state: {**state, "total": state["total"] + 1})
        ctx.record_usage("pages", 2.0, data={"source": value.query})
        ctx.emit("progress", {"pct": 50})
        seen["final"] = ctx.state
        return "ok"

    tool = define_tool("work", "Work.", Query, work)
    with anyio.fail_after(LIMIT):
        async with session(tool, state_schema=Tally) as s:
            outcome, events = await s.run(tool, {"query": "atlas"})

    assert outcome == ToolOutcome(result="ok")
    assert seen["thread"] != loop_thread
    assert seen["ids"] == (S, CALL_ID, "agent")
    assert seen["initial"] == {"total": 0, "label": "fresh"}
    assert seen["merged"] == {"total": 5, "label": "fresh"}
    assert seen["applied"] == {"total": 6, "label": "fresh"}
    assert seen["final"] == {"total": 6, "label": "fresh"}
    # Everything the context did is in the log, between tool_start and the result, in order.
    assert [type(e) for e in events] == [
        ToolStart,
        StateUpdated,
        StateUpdated,
        UsageRecorded,
        CustomChunk,
        MessageAppended,
        ToolEnd,
        UsageRecorded,
    ]
    first, second = (e for e in events if isinstance(e, StateUpdated))
    assert (first.state, second.state) == (
        {"total": 5, "label": "fresh"},
        {"total": 6, "label": "fresh"},
    )
    usage = events[3]
    assert isinstance(usage, UsageRecorded)
    assert (usage.kind, usage.name, usage.value, usage.data) == (
        "custom",
        "pages",
        2.0,
        {"source": "atlas"},
    )
    chunk = events[4]
    assert isinstance(chunk, CustomChunk)
    assert (chunk.agent_id, chunk.agent_type, chunk.name, chunk.data) == (
        S,
        "agent",
        "progress",
        {"pct": 50},
    )
    state = s.writer.state
    assert state.custom_state == {"total": 6, "label": "fresh"}
    assert state.usage.custom == {"pages": 2.0}


async def test_update_state_is_checked_against_the_state_schema() -> None:
    async def spoil(value: Query, ctx: Any) -> str:
        await ctx.update_state({"total": "many"})
        return "unreachable"

    tool = define_tool("spoil", "Spoil the state.", Query, spoil)
    with anyio.fail_after(LIMIT):
        async with session(tool, state_schema=Tally) as s:
            outcome, events = await s.run(tool, {"query": "x"})

    assert outcome.error is not None
    assert outcome.error.startswith("ValidationError: ")
    assert "total" in outcome.error
    assert not any(isinstance(e, StateUpdated) for e in events)
    assert s.writer.state.custom_state == {"total": 0, "label": "fresh"}


async def test_concurrent_update_state_calls_lose_no_update() -> None:
    rounds = 20

    async def bump(value: Query, ctx: Any) -> int:
        for _ in range(rounds):
            await ctx.update_state(lambda state: {**state, "total": state["total"] + 1})
        return rounds

    tool = define_tool("bump", "Bump.", Query, bump)
    with anyio.fail_after(LIMIT):
        async with session(tool, state_schema=Tally) as s, anyio.create_task_group() as tg:
            for index in range(3):
                call = ToolCall(id=f"t{index}", name="bump", arguments={"query": "x"})
                tg.start_soon(run_tool_call, s.agent, s.writer, call, tool, s.fired)

    assert s.writer.state.custom_state["total"] == 3 * rounds


# --- encoding ----------------------------------------------------------------------------------


@dataclasses.dataclass
class Point:
    x: int
    y: int


class Opaque:
    def __str__(self) -> str:
        return "<opaque>"


def test_to_jsonable_turns_results_into_json_data() -> None:
    value = {
        "model": Item(name="a"),
        "models": [Item(name="b")],
        "when": datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
        "path": PurePosixPath("/tmp/x"),
        "point": Point(1, 2),
        "price": Decimal("1.50"),
        "opaque": Opaque(),
    }
    assert to_jsonable(value) == {
        "model": {"name": "a"},
        "models": [{"name": "b"}],
        "when": "2024-01-02T03:04:05Z",
        "path": "/tmp/x",
        "point": {"x": 1, "y": 2},
        "price": "1.50",
        "opaque": "<opaque>",
    }
    assert to_jsonable(Stamp(at=datetime(2024, 1, 2, tzinfo=UTC))) == {"at": "2024-01-02T00:00:00Z"}
    assert to_jsonable(None) is None
    assert to_jsonable("text") == "text"


@pytest.mark.parametrize(
    ("outcome", "text"),
    [
        (ToolOutcome(result={"a": 1, "b": [1, 2]}), '{"a":1,"b":[1,2]}'),
        (ToolOutcome(result="plain text"), "plain text"),
        (ToolOutcome(result=None), "null"),
        (ToolOutcome(result=3), "3"),
        (ToolOutcome(error="boom"), '{"error":"boom"}'),
        (ToolOutcome(result="ignored", error='say "no"'), '{"error":"say \\"no\\""}'),
    ],
)
def test_encode_result_is_the_text_the_llm_reads(outcome: ToolOutcome, text: str) -> None:
    assert encode_result(outcome) == text


def test_validate_finish_checks_the_output_schema() -> None:
    free = define_agent("free")
    assert validate_finish(free, {"anything": 1}) == ToolOutcome(result={"anything": 1})
    typed = define_agent("typed", output_schema=Tally)
    assert validate_finish(typed, {"total": "3"}) == ToolOutcome(
        result={"total": 3, "label": "fresh"}
    )
    assert validate_finish(typed, {"total": "many"}) == ToolOutcome(
        error="invalid arguments: total: Input should be a valid integer, unable to parse "
        "string as an integer"
    )
