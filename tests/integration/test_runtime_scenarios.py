"""The agent runtime end to end: a real ``AgentExecutor`` on real stores, scripted models.

Every test is bounded with ``anyio.fail_after``; tools that must be "in flight"
set an ``anyio.Event`` the test waits on, so nothing synchronises by sleeping.
Stream assertions read the log (``project_stream``), which is what every
stream, live or resumed, is built from.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.lowlevel
import msgspec
import pytest
from pydantic import BaseModel
from wrapped_store import WrappedStore

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    AgentHooks,
    EventStore,
    HookContext,
    InProcessTransport,
    create_sub_agent_tool,
    define_agent,
    define_tool,
    get_usage_rollup,
)
from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ChildChunkForwarded,
    Chunk,
    ChunkBase,
    CustomChunk,
    ErrorChunk,
    Event,
    Interrupted,
    OutputChunk,
    RunStarted,
    SessionCreated,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import project_state, project_stream
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep, TokenUsage
from helix_agents.protocol import (
    ChunkEvent,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    TransportEvent,
)
from helix_agents.stores import MemoryEventStore, SqliteEventStore

LIMIT = 10.0
"""Seconds any one scenario may take."""

T = TypeVar("T")

ROOT = "root"

call = ScriptedLLM.call
finish = ScriptedLLM.finish
reply = ScriptedLLM.reply


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


class Scored(BaseModel):
    answer: str
    score: int


class Numbers(BaseModel):
    a: int
    b: int


class Tally(BaseModel):
    total: int = 0
    label: str = "fresh"


class Amount(BaseModel):
    amount: int


# --- helpers ----------------------------------------------------------------------------


class Recorder:
    """A ScriptedLLM function script: plays ``turns`` by turn index and keeps every request."""

    def __init__(self, *turns: Any) -> None:
        self.turns = list(turns)
        self.requests: list[LLMRequest] = []

    def __call__(self, request: LLMRequest) -> Any:
        self.requests.append(request)
        turn = sum(isinstance(message, AssistantMessage) for message in request.messages)
        return self.turns[turn]


class Blocker:
    """A tool body that blocks forever on its first ``block`` calls, then answers.

    ``entered`` is set when a call starts blocking, so a test knows the tool is in flight.
    """

    def __init__(self, block: int = 1) -> None:
        self.block = block
        self.calls = 0
        self.entered = anyio.Event()

    async def run(self, value: Query, ctx: Any) -> dict[str, str]:
        self.calls += 1
        if self.calls <= self.block:
            self.entered.set()
            await anyio.sleep_forever()
        return {"echo": value.query}


def tag(chunk: ChunkBase) -> str:
    value = type(chunk).__struct_config__.tag
    assert isinstance(value, str)
    return value


async def stream_of(store: EventStore, session_id: str) -> list[Chunk]:
    return [item.chunk for item in project_stream(await store.read(session_id))]


def shape(chunks: list[Chunk]) -> list[tuple[str, str, Any]]:
    """Each chunk as (type, agent_id, detail): tool name, sub-agent type or text."""
    out: list[tuple[str, str, Any]] = []
    for chunk in chunks:
        detail: Any = None
        if isinstance(chunk, ToolStart | ToolEnd):
            detail = chunk.tool_name
        elif isinstance(chunk, SubAgentStart | SubAgentEnd):
            detail = chunk.sub_agent_type
        elif isinstance(chunk, TextDelta):
            detail = chunk.delta
        out.append((tag(chunk), chunk.agent_id, detail))
    return out


def unmatched_tools(chunks: list[Chunk]) -> dict[tuple[str, str], int]:
    """(agent_id, tool_call_id) of tool_starts without a tool_end (or the reverse)."""
    balance: Counter[tuple[str, str]] = Counter()
    for chunk in chunks:
        if isinstance(chunk, ToolStart):
            balance[(chunk.agent_id, chunk.tool_call_id)] += 1
        elif isinstance(chunk, ToolEnd):
            balance[(chunk.agent_id, chunk.tool_call_id)] -= 1
    return {key: count for key, count in balance.items() if count}


def tool_results(request: LLMRequest) -> dict[str, ToolResultMessage]:
    """The tool results of the request's latest tool round, by tool call id."""
    results: dict[str, ToolResultMessage] = {}
    for message in reversed(request.messages):
        if isinstance(message, ToolResultMessage):
            results[message.tool_call_id] = message
        elif isinstance(message, AssistantMessage):
            break
    return results


def parent_and_child(
    child_tool: Callable[..., Any], *, parent_hooks: AgentHooks | None = None
) -> AgentConfig:
    """``parent`` calls ``child`` (call id ``c1``); the child calls tool ``slow`` (id ``t1``)."""
    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[define_tool("slow", "Slow work.", Query, child_tool)],
        llm=ScriptedLLM([call("slow", {"query": "x"}, id="t1"), finish({"answer": "child done"})]),
    )
    return define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM([call("subagent__child", {"query": "go"}, id="c1"), reply("parent done")]),
        hooks=parent_hooks,
    )


CHILD = f"{ROOT}-sub-c1"


async def wait_for_event(store: EventStore, session_id: str, kind: type[Any]) -> float:
    """Tail ``session_id`` until a ``kind`` event is in the store; return ``perf_counter()``."""
    async with closing_iter(store.tail(session_id, 0)) as events:
        async for event in events:
            if isinstance(event, kind):
                return time.perf_counter()
    raise AssertionError("tail ended")


# --- one agent -------------------------------------------------------------------------------


async def test_multi_step_tool_use_feeds_exact_results_back(store: EventStore) -> None:
    def add(value: Numbers, ctx: Any) -> dict[str, int]:
        return {"sum": value.a + value.b}

    script = Recorder(
        ScriptStep(
            text="Adding.",
            tool_calls=[call("add", {"a": 1, "b": 2}), call("add", {"a": 3, "b": 4})],
        ),
        call("add", {"a": 10, "b": 20}, id="again"),
        reply("All summed."),
    )
    agent = define_agent(
        "adder",
        system_prompt="You add.",
        tools=[define_tool("add", "Adds.", Numbers, add)],
        llm=ScriptedLLM(script),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "Add things", session_id=ROOT)
            result = await handle.result()

    assert result.status == "completed"
    assert result.output == "All summed."
    assert result.step_count == 3
    first, second, third = script.requests
    assert first.messages == [UserMessage(content="Add things")]
    assert first.system_prompt == "You add."
    assert [spec.name for spec in first.tools] == ["add"]
    assert first.session_id == ROOT
    assert first.agent_type == "adder"
    assert tool_results(second) == {
        "call_0_0": ToolResultMessage(
            tool_call_id="call_0_0", tool_name="add", content='{"sum":3}'
        ),
        "call_0_1": ToolResultMessage(
            tool_call_id="call_0_1", tool_name="add", content='{"sum":7}'
        ),
    }
    assert second.messages[1] == AssistantMessage(
        content="Adding.",
        tool_calls=[
            ToolCall(id="call_0_0", name="add", arguments={"a": 1, "b": 2}),
            ToolCall(id="call_0_1", name="add", arguments={"a": 3, "b": 4}),
        ],
    )
    assert tool_results(third) == {
        "again": ToolResultMessage(tool_call_id="again", tool_name="add", content='{"sum":30}')
    }
    assert len(third.messages) == 6


async def test_invalid_finish_reaches_the_llm_then_a_valid_one_completes(
    store: EventStore,
) -> None:
    script = Recorder(
        finish({"answer": "half"}, id="f1"),
        finish({"answer": "whole", "score": "7"}, id="f2"),
    )
    agent = define_agent("scorer", output_schema=Scored, llm=ScriptedLLM(script))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "Score it", session_id=ROOT)).result()

    assert result.status == "completed"
    # The output is the *validated* model dump: "7" was coerced to 7.
    assert result.output == Scored(answer="whole", score=7)
    assert [spec.name for spec in script.requests[0].tools] == ["__finish__"]
    assert script.requests[0].tools[0].parameters == Scored.model_json_schema()
    rejected = tool_results(script.requests[1])["f1"]
    assert rejected.is_error
    assert rejected.tool_name == "__finish__"
    assert msgspec.json.decode(rejected.content) == {
        "error": "invalid arguments: score: Field required"
    }
    chunks = await stream_of(store, ROOT)
    assert [(tag(c), getattr(c, "error", None)) for c in chunks] == [
        ("tool_start", None),
        ("tool_end", "invalid arguments: score: Field required"),
        ("tool_start", None),
        ("tool_end", None),
        ("output", None),
    ]
    assert chunks[-1] == OutputChunk(
        session_id=ROOT,
        seq=chunks[-1].seq,
        ts=chunks[-1].ts,
        agent_id=ROOT,
        agent_type="scorer",
        output={"answer": "whole", "score": 7},
    )


async def test_text_instead_of_finish_gets_a_reminder(store: EventStore) -> None:
    script = Recorder(reply("I think it is 4."), finish({"answer": "4"}))
    agent = define_agent("strict", output_schema=Answer, llm=ScriptedLLM(script))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "2+2?", session_id=ROOT)).result()
    assert result.status == "completed"
    assert result.output == Answer(answer="4")
    reminder = script.requests[1].messages[-1]
    assert isinstance(reminder, UserMessage)
    assert "__finish__" in reminder.content


async def test_max_steps_reached_fails_the_run(store: EventStore) -> None:
    llm = ScriptedLLM(lambda request: call("noop", {"query": "again"}))

    def noop(value: Query, ctx: Any) -> str:
        return "ok"

    agent = define_agent(
        "looper",
        max_steps=2,
        tools=[define_tool("noop", "Does nothing.", Query, noop)],
        llm=llm,
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "loop", session_id=ROOT)).result()
    assert result.status == "failed"
    assert result.error == "Max steps exceeded"
    assert result.step_count == 2
    assert llm.calls == 2
    last = (await stream_of(store, ROOT))[-1]
    assert isinstance(last, ErrorChunk)
    assert last.error == "Max steps exceeded"


async def test_agent_without_output_schema_completes_with_its_text(store: EventStore) -> None:
    agent = define_agent("chatty", llm=ScriptedLLM([reply("Hello there my friend")]))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "hi", session_id=ROOT)
            result = await handle.result()
            live = [item.chunk async for item in handle.stream()]
    assert result.status == "completed"
    assert result.output == "Hello there my friend"
    assert [tag(c) for c in live] == ["text_delta", "text_delta", "output"]
    assert "".join(c.delta for c in live if isinstance(c, TextDelta)) == "Hello there my friend"
    assert live == await stream_of(store, ROOT)


async def test_tool_exception_is_an_error_result_and_the_run_continues(
    store: EventStore,
) -> None:
    def explode(value: Query, ctx: Any) -> str:
        raise ValueError(f"cannot {value.query}")

    script = Recorder(call("explode", {"query": "fly"}, id="x1"), reply("Recovered."))
    agent = define_agent(
        "brave",
        tools=[define_tool("explode", "Fails.", Query, explode)],
        llm=ScriptedLLM(script),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    assert result.output == "Recovered."
    assert tool_results(script.requests[1]) == {
        "x1": ToolResultMessage(
            tool_call_id="x1",
            tool_name="explode",
            content='{"error":"ValueError: cannot fly"}',
            is_error=True,
        )
    }
    ends = [c for c in await stream_of(store, ROOT) if isinstance(c, ToolEnd)]
    assert [(c.tool_call_id, c.error) for c in ends] == [("x1", "ValueError: cannot fly")]


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_tool_timeout_is_an_error_result(store: EventStore, kind: str) -> None:
    release = threading.Event()

    async def slow_async(value: Query, ctx: Any) -> str:
        await anyio.sleep_forever()
        return "never"

    def slow_sync(value: Query, ctx: Any) -> str:
        release.wait(LIMIT)
        return "too late"

    body = slow_async if kind == "async" else slow_sync
    script = Recorder(call("slow", {"query": "x"}, id="s1"), reply("Gave up."))
    agent = define_agent(
        "patient",
        tools=[define_tool("slow", "Slow.", Query, body, timeout=0.05)],
        llm=ScriptedLLM(script),
    )
    try:
        with anyio.fail_after(LIMIT):
            async with AgentExecutor(store, [agent]) as executor:
                result = await (await executor.execute(agent, "go", session_id=ROOT)).result()
    finally:
        release.set()  # let an abandoned worker thread finish
    assert result.status == "completed"
    message = tool_results(script.requests[1])["s1"]
    assert message.is_error
    assert msgspec.json.decode(message.content) == {"error": "tool 'slow' timed out after 0.05s"}


async def test_sync_tool_runs_in_a_thread_and_its_context_works(store: EventStore) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[int, dict[str, Any]]] = []

    def tally(value: Amount, ctx: Any) -> dict[str, int]:
        seen.append((threading.get_ident(), ctx.state))
        new = ctx.update_state(lambda state: {**state, "total": state["total"] + value.amount})
        ctx.record_usage("units", value.amount)
        ctx.emit("tallied", {"amount": value.amount})
        return {"total": new["total"]}

    agent = define_agent(
        "counter",
        state_schema=Tally,
        tools=[define_tool("tally", "Adds to the tally.", Amount, tally)],
        llm=ScriptedLLM(
            [
                [call("tally", {"amount": 2}), call("tally", {"amount": 5})],
                call("tally", {"amount": 10}),
                reply("Counted."),
            ]
        ),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "count", session_id=ROOT)).result()
    assert result.status == "completed"
    assert result.state == {"total": 17, "label": "fresh"}
    assert len(seen) == 3
    assert all(thread != loop_thread for thread, _ in seen)
    assert all(state["label"] == "fresh" for _, state in seen)
    state = project_state(await store.read(ROOT))
    assert state.usage.custom == {"units": 17.0}
    customs = [c for c in await stream_of(store, ROOT) if isinstance(c, CustomChunk)]
    assert sorted(c.data["amount"] for c in customs) == [2, 5, 10]
    assert {(c.name, c.agent_id) for c in customs} == {("tallied", ROOT)}


async def test_custom_state_from_defaults_updated_by_tools_survives_resume(
    store: EventStore,
) -> None:
    first_call = anyio.Event()
    calls = 0

    async def bump(value: Amount, ctx: Any) -> dict[str, Any]:
        nonlocal calls
        calls += 1
        new: dict[str, Any] = await ctx.update_state(
            lambda state: {**state, "total": state["total"] + value.amount}
        )
        if calls == 1:
            await ctx.update_state({"label": "bumped"})
            first_call.set()
            await anyio.sleep_forever()
        return new

    agent = define_agent(
        "stateful",
        state_schema=Tally,
        system_prompt=lambda state: f"total={state['total']}",
        tools=[define_tool("bump", "Bumps.", Amount, bump)],
        llm=ScriptedLLM([call("bump", {"amount": 3}), reply("Bumped.")]),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "bump", session_id=ROOT)
            created = (await store.read(ROOT))[0]
            assert isinstance(created, SessionCreated)
            assert created.initial_state == {"total": 0, "label": "fresh"}
            await first_call.wait()
            await handle.interrupt()
            interrupted = await handle.result()
            assert interrupted.status == "interrupted"
            assert interrupted.state == {"total": 3, "label": "bumped"}

            resumed = await executor.resume(ROOT)
            result = await resumed.result()
    assert result.status == "completed"
    # The interrupted call ran again on resume (at least once), on top of the kept state.
    assert result.state == {"total": 6, "label": "bumped"}
    assert project_state(await store.read(ROOT)).custom_state == result.state


async def test_custom_chunks_from_ctx_emit_appear_on_the_stream(store: EventStore) -> None:
    async def report(value: Query, ctx: Any) -> str:
        await ctx.emit("progress", {"pct": 50, "who": ctx.agent_type})
        await ctx.emit("done")
        return "reported"

    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[define_tool("report", "Reports.", Query, report)],
        llm=ScriptedLLM([call("report", {"query": "c"}, id="r2"), finish({"answer": "ok"})]),
    )
    parent = define_agent(
        "parent",
        tools=[
            define_tool("report", "Reports.", Query, report),
            create_sub_agent_tool(child, Query),
        ],
        llm=ScriptedLLM(
            [
                call("report", {"query": "p"}, id="r1"),
                call("subagent__child", {"query": "go"}, id="c1"),
                reply("Done."),
            ]
        ),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    chunks = await stream_of(store, ROOT)
    relevant = [
        (tag(c), c.agent_id, getattr(c, "name", None), getattr(c, "data", None))
        for c in chunks
        if isinstance(c, CustomChunk)
        or (isinstance(c, ToolStart | ToolEnd) and "report" in c.tool_name)
    ]
    assert relevant == [
        ("tool_start", ROOT, None, None),
        ("custom", ROOT, "progress", {"pct": 50, "who": "parent"}),
        ("custom", ROOT, "done", None),
        ("tool_end", ROOT, None, None),
        ("tool_start", CHILD, None, None),
        ("custom", CHILD, "progress", {"pct": 50, "who": "child"}),
        ("custom", CHILD, "done", None),
        ("tool_end", CHILD, None, None),
    ]


# --- sub-agents ----------------------------------------------------------------------------


def three_deep() -> AgentConfig:
    grandchild = define_agent(
        "grandchild",
        output_schema=Answer,
        llm=ScriptedLLM([finish({"answer": "leaf"}, text="Grand thinking.")]),
    )
    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[create_sub_agent_tool(grandchild, Query)],
        llm=ScriptedLLM(
            [
                ScriptStep(
                    text="Child delegating.",
                    tool_calls=[call("subagent__grandchild", {"query": "deeper"}, id="c2")],
                ),
                finish({"answer": "middle"}),
            ]
        ),
    )
    return define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM(
            [
                ScriptStep(
                    text="Let me delegate.",
                    tool_calls=[call("subagent__child", {"query": "deep"}, id="c1")],
                ),
                reply("Parent concludes."),
            ]
        ),
    )


async def test_three_deep_nested_sub_agents_exact_stream(store: EventStore) -> None:
    parent = three_deep()
    grand = f"{CHILD}-sub-c2"
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "start", session_id=ROOT)
            result = await handle.result()
            live = [item async for item in handle.stream()]

    assert result.status == "completed"
    assert result.output == "Parent concludes."
    chunks = await stream_of(store, ROOT)
    assert shape(chunks) == [
        ("text_delta", ROOT, "Let me delegate."),
        ("tool_start", ROOT, "subagent__child"),
        ("subagent_start", ROOT, "child"),
        ("text_delta", CHILD, "Child delegating."),
        ("tool_start", CHILD, "subagent__grandchild"),
        ("subagent_start", CHILD, "grandchild"),
        ("text_delta", grand, "Grand thinking."),
        ("tool_start", grand, "__finish__"),
        ("tool_end", grand, "__finish__"),
        ("output", grand, None),
        ("subagent_end", CHILD, "grandchild"),
        ("tool_end", CHILD, "subagent__grandchild"),
        ("tool_start", CHILD, "__finish__"),
        ("tool_end", CHILD, "__finish__"),
        ("output", CHILD, None),
        ("subagent_end", ROOT, "child"),
        ("tool_end", ROOT, "subagent__child"),
        ("text_delta", ROOT, "Parent concludes."),
        ("output", ROOT, None),
    ]
    # The live stream is the log's stream, positions included.
    assert [item.chunk for item in live] == chunks
    assert [item.sequence for item in live] == [
        item.sequence for item in project_stream(await store.read(ROOT))
    ]

    start = next(c for c in chunks if isinstance(c, SubAgentStart) and c.agent_id == ROOT)
    assert (start.sub_agent_id, start.tool_call_id, start.parent_session_id, start.input) == (
        CHILD,
        "c1",
        ROOT,
        {"query": "deep"},
    )
    end = next(c for c in chunks if isinstance(c, SubAgentEnd) and c.agent_id == ROOT)
    assert (end.sub_agent_id, end.success, end.result, end.error) == (
        CHILD,
        True,
        {"answer": "middle"},
        None,
    )
    tool_end = next(c for c in chunks if isinstance(c, ToolEnd) and c.tool_call_id == "c1")
    assert tool_end.result == {"answer": "middle"}

    assert await store.list_sessions() == sorted([ROOT, CHILD, grand])
    for session_id, parent_id in ((CHILD, ROOT), (grand, CHILD)):
        created = (await store.read(session_id))[0]
        assert isinstance(created, SessionCreated)
        assert created.parent_session_id == parent_id
        assert created.root_session_id == ROOT
        assert created.parent_tool_call_id == session_id.rsplit("-sub-", 1)[1]
    assert project_state(await store.read(grand)).output == {"answer": "leaf"}
    ref = project_state(await store.read(ROOT)).sub_sessions[CHILD]
    assert (ref.status, ref.output, ref.tool_call_id, ref.agent_type, ref.mode) == (
        "completed",
        {"answer": "middle"},
        "c1",
        "child",
        "ephemeral",
    )


async def test_parallel_sub_agents_run_concurrently(store: EventStore) -> None:
    arrived = {"a": anyio.Event(), "b": anyio.Event()}

    async def meet(value: Query, ctx: Any) -> str:
        # Each side waits for the other: run one after the other, this never returns.
        me = value.query
        other = "b" if me == "a" else "a"
        arrived[me].set()
        await arrived[other].wait()
        return f"{me} met {other}"

    def worker_script(request: LLMRequest) -> Any:
        me = request.messages[0]
        assert isinstance(me, UserMessage)
        if len(request.messages) == 1:
            return call("meet", {"query": me.content})
        return finish({"answer": f"{me.content} finished"})

    worker = define_agent(
        "worker",
        output_schema=Answer,
        tools=[define_tool("meet", "Rendezvous.", Query, meet)],
        llm=ScriptedLLM(worker_script),
    )
    script = Recorder(
        [
            call("subagent__worker", {"query": "a"}, id="wa"),
            call("subagent__worker", {"query": "b"}, id="wb"),
        ],
        reply("Both done."),
    )
    parent = define_agent(
        "boss", tools=[create_sub_agent_tool(worker, Query)], llm=ScriptedLLM(script)
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    results = tool_results(script.requests[1])
    assert {call_id: msgspec.json.decode(m.content) for call_id, m in results.items()} == {
        "wa": {"answer": "a finished"},
        "wb": {"answer": "b finished"},
    }
    assert unmatched_tools(await stream_of(store, ROOT)) == {}


@pytest.mark.parametrize("how", ["llm_error", "max_steps"])
async def test_child_failure_becomes_the_parents_tool_error(store: EventStore, how: str) -> None:
    def noop(value: Query, ctx: Any) -> str:
        return "ok"

    if how == "llm_error":
        child = define_agent(
            "child", output_schema=Answer, llm=ScriptedLLM([ScriptedLLM.fail("model down")])
        )
        expected = "LLM call failed: model down"
    else:
        child = define_agent(
            "child",
            output_schema=Answer,
            max_steps=1,
            tools=[define_tool("noop", "Nothing.", Query, noop)],
            llm=ScriptedLLM([call("noop", {"query": "x"}), finish({"answer": "late"})]),
        )
        expected = "Max steps exceeded"
    script = Recorder(call("subagent__child", {"query": "try"}, id="c1"), reply("Handled it."))
    parent = define_agent(
        "parent", tools=[create_sub_agent_tool(child, Query)], llm=ScriptedLLM(script)
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()

    assert result.status == "completed"
    assert result.output == "Handled it."
    child_state = project_state(await store.read(CHILD))
    assert (child_state.status, child_state.error) == ("failed", expected)
    assert tool_results(script.requests[1]) == {
        "c1": ToolResultMessage(
            tool_call_id="c1",
            tool_name="subagent__child",
            content=msgspec.json.encode({"error": expected}).decode(),
            is_error=True,
        )
    }
    chunks = await stream_of(store, ROOT)
    own = [c for c in chunks if c.agent_id == ROOT]
    assert [tag(c) for c in own] == [
        "tool_start",
        "subagent_start",
        "subagent_end",
        "tool_end",
        "text_delta",
        "output",
    ]
    end, tool_end = own[2], own[3]
    assert isinstance(end, SubAgentEnd)
    assert (end.success, end.error, end.result) == (False, expected, None)
    assert isinstance(tool_end, ToolEnd)
    assert (tool_end.tool_call_id, tool_end.error) == ("c1", expected)
    # The child's own error chunk sits between subagent_start and subagent_end.
    between = chunks[chunks.index(own[1]) + 1 : chunks.index(end)]
    assert between
    assert all(c.agent_id == CHILD for c in between)
    assert isinstance(between[-1], ErrorChunk)
    assert between[-1].error == expected
    ref = project_state(await store.read(ROOT)).sub_sessions[CHILD]
    assert (ref.status, ref.error) == ("failed", expected)


class MessageFirst(BaseModel):
    message: str
    query: str | None = None


class QueryFirst(BaseModel):
    text: str | None = None
    query: str


class TextFirst(BaseModel):
    content: str | None = None
    text: str


class ContentOnly(BaseModel):
    content: str
    extra: int


class NoStringField(BaseModel):
    message: int
    tags: list[str]


class NothingKnown(BaseModel):
    n: int
    topic: str


@pytest.mark.parametrize(
    ("schema", "arguments", "expected"),
    [
        # The priority field is the message only when no other field has a
        # value (specs/runtime.md, input mapping rule); else the whole JSON.
        (MessageFirst, {"message": "m"}, "m"),
        (QueryFirst, {"query": "q"}, "q"),
        (TextFirst, {"text": "t"}, "t"),
        (ContentOnly, {"content": "c", "extra": 1}, '{"content":"c","extra":1}'),
        (MessageFirst, {"message": "m", "query": "q"}, '{"message":"m","query":"q"}'),
        (NoStringField, {"message": 5, "tags": ["x"]}, '{"message":5,"tags":["x"]}'),
        (NothingKnown, {"topic": "ai", "n": 2}, '{"n":2,"topic":"ai"}'),
    ],
    ids=["message", "query", "text", "content-and-more", "two-known", "non-string-message", "json"],
)
async def test_sub_agent_input_maps_to_its_first_user_message(
    schema: type[BaseModel], arguments: dict[str, Any], expected: str
) -> None:
    child_script = Recorder(finish({"answer": "ok"}))
    child = define_agent("child", output_schema=Answer, llm=ScriptedLLM(child_script))
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, schema)],
        llm=ScriptedLLM([call("subagent__child", arguments, id="c1"), reply("ok")]),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    assert child_script.requests[0].messages == [UserMessage(content=expected)]
    created = (await store.read(CHILD))[0]
    assert isinstance(created, SessionCreated)
    assert created.messages == [UserMessage(content=expected)]
    assert created.input == schema.model_validate(arguments).model_dump(mode="json")


class TopicState(BaseModel):
    topic: str = ""
    depth: int = 0


class TopicInput(BaseModel):
    topic: str
    depth: int


class StrictDepth(BaseModel):
    depth: int = 0


class WordyInput(BaseModel):
    depth: str


@pytest.mark.parametrize(
    ("state_schema", "input_schema", "arguments", "initial"),
    [
        (TopicState, TopicInput, {"topic": "ai", "depth": 2}, {"topic": "ai", "depth": 2}),
        (StrictDepth, WordyInput, {"depth": "very"}, {"depth": 0}),
        (None, TopicInput, {"topic": "ai", "depth": 2}, {"topic": "ai", "depth": 2}),
    ],
    ids=["fits", "does-not-fit", "no-state-schema"],
)
async def test_sub_agent_input_seeds_the_childs_state_when_it_fits(
    state_schema: type[BaseModel] | None,
    input_schema: type[BaseModel],
    arguments: dict[str, Any],
    initial: dict[str, Any],
) -> None:
    child = define_agent(
        "child",
        output_schema=Answer,
        state_schema=state_schema,
        llm=ScriptedLLM([finish({"answer": "ok"})]),
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, input_schema)],
        llm=ScriptedLLM([call("subagent__child", arguments, id="c1"), reply("ok")]),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    created = (await store.read(CHILD))[0]
    assert isinstance(created, SessionCreated)
    assert created.initial_state == initial
    assert project_state(await store.read(CHILD)).custom_state == initial


# --- interrupts, aborts, resume ----------------------------------------------------------


async def test_interrupt_propagates_to_a_child_within_100ms(store: EventStore) -> None:
    blocker = Blocker()
    parent = parent_and_child(blocker.run)
    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg, AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await blocker.entered.wait()
            seen: list[float] = []

            async def watch() -> None:
                seen.append(await wait_for_event(store, CHILD, Interrupted))

            tg.start_soon(watch)
            await anyio.wait_all_tasks_blocked()
            asked = time.perf_counter()
            await handle.interrupt("user stop")
            result = await handle.result()
    latency = seen[0] - asked

    assert result.status == "interrupted"
    child_log = await store.read(CHILD)
    child_state = project_state(child_log)
    assert child_state.status == "interrupted"
    assert any(isinstance(e, Interrupted) and e.reason == "user stop" for e in child_log)
    root_state = project_state(await store.read(ROOT))
    assert root_state.status == "interrupted"
    assert root_state.sub_sessions[CHILD].status == "interrupted"
    chunks = await stream_of(store, ROOT)
    assert unmatched_tools(chunks) == {}
    assert shape(chunks) == [
        ("tool_start", ROOT, "subagent__child"),
        ("subagent_start", ROOT, "child"),
        ("tool_start", CHILD, "slow"),
        ("tool_end", CHILD, "slow"),
        ("subagent_end", ROOT, "child"),
        ("tool_end", ROOT, "subagent__child"),
    ]
    child_end = chunks[3]
    assert isinstance(child_end, ToolEnd)
    assert child_end.error == "interrupted"
    sub_end = chunks[4]
    assert isinstance(sub_end, SubAgentEnd)
    assert not sub_end.success
    assert sub_end.error == "interrupted: user stop"
    if isinstance(store, MemoryEventStore):
        assert latency < 0.1, f"interrupt took {latency * 1000:.1f} ms to reach the child"
    else:
        assert latency < 2.0, f"interrupt took {latency:.2f} s to reach the child"


@pytest.mark.parametrize("reason", [None, "user gave up"])
async def test_abort_propagates_to_a_child_and_fails_the_parent(
    store: EventStore, reason: str | None
) -> None:
    blocker = Blocker()
    parent = parent_and_child(blocker.run)
    expected = f"aborted: {reason}" if reason else "aborted"
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await blocker.entered.wait()
            await handle.abort(reason)
            result = await handle.result()
            with pytest.raises(AgentServerError) as info:
                await executor.resume(ROOT)
            assert info.value.code == "ALREADY_COMPLETED"

    assert (result.status, result.error) == ("failed", expected)
    child_state = project_state(await store.read(CHILD))
    assert (child_state.status, child_state.error) == ("failed", expected)
    root_state = project_state(await store.read(ROOT))
    assert root_state.sub_sessions[CHILD].status == "failed"
    chunks = await stream_of(store, ROOT)
    assert unmatched_tools(chunks) == {}
    errors = [(c.agent_id, c.error) for c in chunks if isinstance(c, ErrorChunk)]
    assert errors == [(CHILD, expected), (ROOT, expected)]
    assert blocker.calls == 1


async def test_resume_after_interrupt_continues_the_same_child(store: EventStore) -> None:
    blocker = Blocker()
    parent = parent_and_child(blocker.run)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await blocker.entered.wait()
            await handle.interrupt()
            assert (await handle.result()).status == "interrupted"
            resumed = await executor.resume(ROOT)
            assert resumed.run_id != handle.run_id
            result = await resumed.result()

    assert result.status == "completed"
    assert result.output == "parent done"
    assert blocker.calls == 2  # the cut-short call ran again: at least once
    assert await store.list_sessions() == [ROOT, CHILD]
    child_log = await store.read(CHILD)
    assert sum(isinstance(e, SessionCreated) for e in child_log) == 1
    assert [e.mode for e in child_log if isinstance(e, RunStarted)] == ["start", "resume"]
    assert project_state(child_log).status == "completed"
    root_log = await store.read(ROOT)
    assert [e.mode for e in root_log if isinstance(e, RunStarted)] == ["start", "resume"]
    root_state = project_state(root_log)
    assert list(root_state.sub_sessions) == [CHILD]
    assert root_state.sub_sessions[CHILD].status == "completed"
    chunks = await stream_of(store, ROOT)
    assert unmatched_tools(chunks) == {}
    root_chunks = [
        (tag(c), c.tool_call_id if isinstance(c, ToolStart | ToolEnd) else None)
        for c in chunks
        if c.agent_id == ROOT
    ]
    assert root_chunks == [
        ("tool_start", "c1"),
        ("subagent_start", None),
        ("subagent_end", None),
        ("tool_end", "c1"),
        ("tool_start", "c1"),
        ("subagent_start", None),
        ("subagent_end", None),
        ("tool_end", "c1"),
        ("text_delta", None),
        ("output", None),
    ]
    # Forwarded child chunks are the child's chunks, each exactly once.
    forwarded = [e.child_seq for e in root_log if isinstance(e, ChildChunkForwarded)]
    assert forwarded == [item.sequence for item in project_stream(child_log)]


async def test_resume_after_a_process_restart_on_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "events.db"
    blocker = Blocker()
    parent = parent_and_child(blocker.run)
    first = SqliteEventStore(path)
    try:
        with anyio.fail_after(LIMIT):
            with anyio.CancelScope() as crash:
                async with AgentExecutor(first, [parent]) as executor:
                    await executor.execute(parent, "go", session_id=ROOT)
                    await blocker.entered.wait()
                    crash.cancel()  # the process dies: no interrupt, no cleanup events
    finally:
        await first.close()

    second = SqliteEventStore(path)
    try:
        assert project_state(await second.read(ROOT)).status == "running"
        assert project_state(await second.read(CHILD)).status == "running"
        with anyio.fail_after(LIMIT):
            async with AgentExecutor(second, [parent]) as executor:
                handle = await executor.resume(ROOT)
                result = await handle.result()
        assert result.status == "completed"
        assert result.output == "parent done"
        child_log = await second.read(CHILD)
        assert project_state(child_log).status == "completed"
        assert project_state(child_log).output == {"answer": "child done"}
        assert sum(isinstance(e, SessionCreated) for e in child_log) == 1
        assert [e.mode for e in child_log if isinstance(e, RunStarted)] == ["start", "resume"]
        root_log = await second.read(ROOT)
        forwarded = [e.child_seq for e in root_log if isinstance(e, ChildChunkForwarded)]
        assert forwarded == [item.sequence for item in project_stream(child_log)]
        assert blocker.calls == 2
    finally:
        await second.close()


# --- start semantics -------------------------------------------------------------------------


async def test_a_retried_start_of_a_session_left_running_resumes_it(store: EventStore) -> None:
    """A start retried after the process that ran the session died (a parent resumed after
    the records of its child's start were lost starts that child again) takes the session
    over: without it nothing would ever run it while its caller waited for its end."""
    worker = define_agent("worker", llm=ScriptedLLM([reply("Done.")]))
    messages = [UserMessage(content="go")]
    left = [
        SessionCreated(
            session_id="left-1",
            seq=1,
            ts=1.0,
            agent_type="worker",
            run_id="r-dead",
            messages=messages,
        ),
        RunStarted(session_id="left-1", seq=2, ts=1.0, run_id="r-dead"),
    ]
    await store.append("left-1", left, 0)
    watched = WholeLogReads(store)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(watched, [worker]) as executor:
            request = RemoteStartRequest(session_id="left-1", agent_type="worker", message="go")
            answer = await executor.service.start(request)
            # The start read the log once, and its takeover used that read.
            assert watched.reads == ["left-1"]
            await executor.wait_idle("left-1")
    log = await store.read("left-1")
    runs = [e for e in log if isinstance(e, RunStarted)]
    assert [run.mode for run in runs] == ["start", "resume"]
    assert answer.run_id == runs[-1].run_id  # the start answers with the run that took over
    assert project_state(log).status == "completed"


class WholeLogReads(WrappedStore):
    """Notes each read of a whole log (from seq 0), by session."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.reads: list[str] = []

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        if from_seq == 0:
            self.reads.append(session_id)
        return await super().read(session_id, from_seq)


async def test_start_is_idempotent(store: EventStore) -> None:
    release = anyio.Event()
    entered = anyio.Event()

    async def hold(value: Query, ctx: Any) -> str:
        entered.set()
        await release.wait()
        return "held"

    worker = define_agent(
        "worker",
        tools=[define_tool("hold", "Holds.", Query, hold)],
        llm=ScriptedLLM([call("hold", {"query": "x"}), reply("Done.")]),
    )
    other = define_agent("other", llm=ScriptedLLM([reply("Other.")]))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [worker, other]) as executor:
            handles = []

            async def start() -> None:
                handles.append(await executor.execute(worker, "go", session_id="s1"))

            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                tg.start_soon(start)
            await entered.wait()
            again = await executor.execute(worker, "go", session_id="s1")
            assert {h.run_id for h in handles} == {again.run_id}
            response = await executor.service.start(
                RemoteStartRequest(session_id="s1", agent_type="worker", message="go")
            )
            assert response.run_id == again.run_id

            with pytest.raises(AgentServerError) as info:
                await executor.execute(other, "go", session_id="s1")
            assert info.value.code == "ALREADY_RUNNING"
            with pytest.raises(AgentServerError) as info:
                await executor.execute(worker, "something else", session_id="s1")
            assert info.value.code == "ALREADY_RUNNING"

            release.set()
            assert (await again.result()).status == "completed"
            with pytest.raises(AgentServerError) as info:
                await executor.execute(worker, "go", session_id="s1")
            assert info.value.code == "ALREADY_COMPLETED"

    log = await store.read("s1")
    assert sum(isinstance(e, SessionCreated) for e in log) == 1
    assert sum(isinstance(e, RunStarted) for e in log) == 1


# --- hooks --------------------------------------------------------------------------------------


def recording_hooks(calls: list[tuple[str, ...]], *, failing: bool = False) -> AgentHooks:
    def record(name: str) -> Callable[..., Any]:
        def hook(ctx: HookContext, *args: Any) -> None:
            detail = args[0].name if args and isinstance(args[0], ToolCall) else None
            calls.append((ctx.agent_type, name, *((detail,) if detail else ())))
            if failing:
                raise RuntimeError(f"hook {name} broke")

        return hook

    async def async_record(ctx: HookContext, *args: Any) -> None:
        calls.append((ctx.agent_type, "on_agent_complete"))
        if failing:
            raise RuntimeError("async hook broke")

    return AgentHooks(
        on_agent_start=record("on_agent_start"),
        on_agent_complete=async_record,
        on_agent_fail=record("on_agent_fail"),
        before_sub_agent=record("before_sub_agent"),
        after_sub_agent=record("after_sub_agent"),
        before_tool=record("before_tool"),
        after_tool=record("after_tool"),
    )


def hooked_tree(calls: list[tuple[str, ...]], *, failing: bool = False) -> AgentConfig:
    def echo(value: Query, ctx: Any) -> str:
        return value.query

    hooks = recording_hooks(calls, failing=failing)
    child = define_agent(
        "child",
        output_schema=Answer,
        hooks=hooks,
        tools=[define_tool("child_tool", "Echo.", Query, echo)],
        llm=ScriptedLLM([call("child_tool", {"query": "c"}), finish({"answer": "ok"})]),
    )
    return define_agent(
        "parent",
        hooks=hooks,
        tools=[
            define_tool("parent_tool", "Echo.", Query, echo),
            create_sub_agent_tool(child, Query),
        ],
        llm=ScriptedLLM(
            [
                call("parent_tool", {"query": "p"}),
                call("subagent__child", {"query": "go"}, id="c1"),
                reply("Done."),
            ]
        ),
    )


EXPECTED_HOOKS = [
    ("parent", "on_agent_start"),
    ("parent", "before_tool", "parent_tool"),
    ("parent", "after_tool", "parent_tool"),
    ("parent", "before_sub_agent", "subagent__child"),
    ("child", "on_agent_start"),
    ("child", "before_tool", "child_tool"),
    ("child", "after_tool", "child_tool"),
    ("child", "on_agent_complete"),
    ("parent", "after_sub_agent", "subagent__child"),
    ("parent", "on_agent_complete"),
]


async def test_hooks_fire_in_order_for_parent_and_child(store: EventStore) -> None:
    calls: list[tuple[str, ...]] = []
    parent = hooked_tree(calls)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            result = await handle.result()
            assert result.status == "completed"
            assert calls == EXPECTED_HOOKS

            # Reading, projecting, streaming and refusing a finished session fire nothing.
            await executor.service.get_status(ROOT)
            await executor.state(CHILD)
            [item async for item in handle.stream(0)]
            async with closing_iter(executor.service.stream(CHILD)) as events:
                [event async for event in events]
            with pytest.raises(AgentServerError):
                await executor.resume(ROOT)
            with pytest.raises(AgentServerError):
                await executor.execute(parent, "go", session_id=ROOT)
    for session_id in (ROOT, CHILD):
        log = await store.read(session_id)
        project_state(log)
        project_stream(log)
    async with AgentExecutor(store, [parent]) as fresh:
        await fresh.service.get_status(ROOT)
    assert calls == EXPECTED_HOOKS


async def test_hook_context_names_parent_and_root(store: EventStore) -> None:
    contexts: list[HookContext] = []
    hooks = AgentHooks(on_agent_start=contexts.append)
    grandchild = define_agent(
        "grandchild", output_schema=Answer, hooks=hooks, llm=ScriptedLLM([finish({"answer": "g"})])
    )
    child = define_agent(
        "child",
        output_schema=Answer,
        hooks=hooks,
        tools=[create_sub_agent_tool(grandchild, Query)],
        llm=ScriptedLLM(
            [call("subagent__grandchild", {"query": "x"}, id="c2"), finish({"answer": "c"})]
        ),
    )
    parent = define_agent(
        "parent",
        hooks=hooks,
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM([call("subagent__child", {"query": "x"}, id="c1"), reply("p")]),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await handle.result()
    assert [(c.session_id, c.parent_session_id, c.root_session_id) for c in contexts] == [
        (ROOT, None, ROOT),
        (CHILD, ROOT, ROOT),
        (f"{CHILD}-sub-c2", CHILD, ROOT),
    ]
    assert {c.run_id for c in contexts if c.session_id == ROOT} == {handle.run_id}


async def test_failing_hooks_do_not_break_the_run(store: EventStore) -> None:
    calls: list[tuple[str, ...]] = []
    parent = hooked_tree(calls, failing=True)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    assert result.output == "Done."
    assert calls == EXPECTED_HOOKS
    results = [
        m
        for m in project_state(await store.read(ROOT)).messages
        if isinstance(m, ToolResultMessage)
    ]
    assert [(m.tool_name, m.content, m.is_error) for m in results] == [
        ("parent_tool", "p", False),
        ("subagent__child", '{"answer":"ok"}', False),
    ]


async def test_on_agent_fail_fires_for_a_failing_child(store: EventStore) -> None:
    calls: list[tuple[str, ...]] = []
    errors: list[str] = []

    def on_fail(ctx: HookContext, error: str) -> None:
        calls.append((ctx.agent_type, "on_agent_fail"))
        errors.append(error)

    hooks = AgentHooks(
        on_agent_start=lambda ctx: calls.append((ctx.agent_type, "on_agent_start")),
        on_agent_fail=on_fail,
        after_sub_agent=lambda ctx, c, outcome: calls.append((ctx.agent_type, "after_sub_agent")),
        on_agent_complete=lambda ctx, out: calls.append((ctx.agent_type, "on_agent_complete")),
    )
    child = define_agent(
        "child", output_schema=Answer, hooks=hooks, llm=ScriptedLLM([ScriptedLLM.fail("nope")])
    )
    parent = define_agent(
        "parent",
        hooks=hooks,
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM([call("subagent__child", {"query": "x"}, id="c1"), reply("p")]),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert calls == [
        ("parent", "on_agent_start"),
        ("child", "on_agent_start"),
        ("child", "on_agent_fail"),
        ("parent", "after_sub_agent"),
        ("parent", "on_agent_complete"),
    ]
    assert errors == ["LLM call failed: nope"]


# --- usage ---------------------------------------------------------------------------------------


def costed(
    step: ScriptStep | ToolCall | list[ToolCall], tokens_in: int, tokens_out: int
) -> ScriptStep:
    if isinstance(step, ToolCall):
        step = ScriptStep(tool_calls=[step])
    elif isinstance(step, list):
        step = ScriptStep(tool_calls=step)
    return msgspec.structs.replace(
        step, usage=TokenUsage(input_tokens=tokens_in, output_tokens=tokens_out)
    )


async def test_usage_rollup_over_a_tree(store: EventStore) -> None:
    async def metered(value: Amount, ctx: Any) -> str:
        await ctx.record_usage("credits", value.amount, data={"by": ctx.agent_type})
        return "metered"

    tool = define_tool("metered", "Costs credits.", Amount, metered)
    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[tool],
        llm=ScriptedLLM(
            [
                costed(call("metered", {"amount": 1}), 100, 10),
                costed(finish({"answer": "ok"}), 200, 20),
            ]
        ),
    )
    parent = define_agent(
        "parent",
        tools=[tool, create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM(
            [
                costed(
                    [
                        call("metered", {"amount": 2}),
                        call("subagent__child", {"query": "x"}, id="c1"),
                    ],
                    1000,
                    1,
                ),
                costed(ScriptStep(text="done"), 2000, 2),
            ]
        ),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            assert (
                await (await executor.execute(parent, "go", session_id=ROOT)).result()
            ).status == ("completed")
    rollup = await get_usage_rollup(store, ROOT)
    assert rollup.sessions == [ROOT, CHILD]
    assert (rollup.input_tokens, rollup.output_tokens, rollup.total_tokens) == (3300, 33, 3333)
    assert rollup.llm_calls == 4
    assert rollup.tool_calls == 2  # one metered call each; __finish__ and sub-agents are not tools
    assert rollup.sub_agent_calls == 1
    assert rollup.custom == {"credits": 3.0}
    own = await get_usage_rollup(store, ROOT, include_sub_agents=False)
    assert own.sessions == [ROOT]
    assert (own.input_tokens, own.output_tokens, own.llm_calls) == (3000, 3, 2)
    assert (own.tool_calls, own.sub_agent_calls, own.custom) == (1, 1, {"credits": 2.0})


async def test_usage_rollup_counts_a_resumed_child_once(store: EventStore) -> None:
    blocker = Blocker()
    parent = parent_and_child(blocker.run)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await blocker.entered.wait()
            await handle.interrupt()
            await handle.result()
            interrupted = await get_usage_rollup(store, ROOT)
            assert interrupted.sessions == [ROOT, CHILD]
            assert (interrupted.llm_calls, interrupted.sub_agent_calls) == (2, 0)
            await (await executor.resume(ROOT)).result()
    rollup = await get_usage_rollup(store, ROOT)
    assert rollup.sessions == [ROOT, CHILD]
    assert rollup.sub_agent_calls == 1
    assert rollup.llm_calls == 4  # parent 2, child 2 (the resumed run makes one more)
    assert rollup.tool_calls == 1  # the interrupted attempt recorded no result
    root_log, child_log = await store.read(ROOT), await store.read(CHILD)
    assert rollup.input_tokens == (
        project_state(root_log).usage.input_tokens + project_state(child_log).usage.input_tokens
    )


# --- duplicate delivery ---------------------------------------------------------------------------


class DuplicatingTransport:
    """Wraps the in-process transport; its stream delivers every chunk twice, then the end."""

    def __init__(self) -> None:
        self.inner: InProcessTransport | None = None
        self.duplicates = 0

    def _service(self) -> InProcessTransport:
        assert self.inner is not None
        return self.inner

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        return await self._service().start(request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        return await self._service().resume(request)

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        async with closing_iter(self._service().stream(session_id, from_sequence)) as events:
            async for event in events:
                yield event
                if not isinstance(event, ChunkEvent):
                    return
                self.duplicates += 1
                yield event

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        return await self._service().get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        await self._service().interrupt(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        await self._service().abort(session_id, reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> None:
        await self._service().submit_tool_result(session_id, tool_call_id, result, error)


async def test_duplicate_child_chunks_are_dropped(store: EventStore) -> None:
    transport = DuplicatingTransport()
    parent = three_deep()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent], local_transport=transport) as executor:
            transport.inner = InProcessTransport(executor.service)
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    grand = f"{CHILD}-sub-c2"
    assert transport.duplicates > 0
    for parent_id, child_id in ((ROOT, CHILD), (CHILD, grand)):
        parent_log = await store.read(parent_id)
        forwarded = [
            e.child_seq
            for e in parent_log
            if isinstance(e, ChildChunkForwarded) and e.child_session_id == child_id
        ]
        assert forwarded == [item.sequence for item in project_stream(await store.read(child_id))]
    chunks = await stream_of(store, ROOT)
    assert len({(c.agent_id, c.seq) for c in chunks}) == len(chunks)
    assert len(chunks) == 19


# --- more routing edges -----------------------------------------------------------------------


async def test_sub_agent_timeout_interrupts_the_child_and_answers_once(store: EventStore) -> None:
    blocker = Blocker(block=99)
    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[define_tool("slow", "Slow work.", Query, blocker.run)],
        llm=ScriptedLLM([call("slow", {"query": "x"}, id="t1"), finish({"answer": "late"})]),
    )
    script = Recorder(call("subagent__child", {"query": "go"}, id="c1"), reply("Moved on."))
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query, timeout=0.2)],
        llm=ScriptedLLM(script),
    )
    expected = "sub-agent 'child' timed out after 0.2s"
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()

    assert result.status == "completed"
    assert project_state(await store.read(CHILD)).status == "interrupted"
    message = tool_results(script.requests[1])["c1"]
    assert message.is_error
    assert expected in msgspec.json.decode(message.content)["error"]
    chunks = await stream_of(store, ROOT)
    assert unmatched_tools(chunks) == {}
    assert shape(chunks) == [
        ("tool_start", ROOT, "subagent__child"),
        ("subagent_start", ROOT, "child"),
        ("tool_start", CHILD, "slow"),
        ("tool_end", CHILD, "slow"),
        ("subagent_end", ROOT, "child"),
        ("tool_end", ROOT, "subagent__child"),
        ("text_delta", ROOT, "Moved on."),
        ("output", ROOT, None),
    ]
    root_state = project_state(await store.read(ROOT))
    assert root_state.sub_sessions[CHILD].status == "interrupted"


@pytest.mark.parametrize("kind", ["tool", "sub_agent"])
async def test_invalid_arguments_are_an_error_result_in_one_format(kind: str) -> None:
    """Regular tools and sub-agent tools report bad arguments the same, stable way.

    (Not pydantic's multi-line ``str(exc)``, whose docs URL changes with its version.)
    """
    store = MemoryEventStore()

    def echo(value: Query, ctx: Any) -> str:
        return value.query

    child = define_agent("child", output_schema=Answer, llm=ScriptedLLM([finish({"answer": "x"})]))
    name = "echo" if kind == "tool" else "subagent__child"
    script = Recorder(call(name, {"nope": 1}, id="bad"), reply("Fixed."))
    parent = define_agent(
        "parent",
        tools=[define_tool("echo", "Echo.", Query, echo), create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM(script),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    assert tool_results(script.requests[1]) == {
        "bad": ToolResultMessage(
            tool_call_id="bad",
            tool_name=name,
            content='{"error":"invalid arguments: query: Field required"}',
            is_error=True,
        )
    }
    assert await store.list_sessions() == [ROOT]  # no child was started
    assert unmatched_tools(await stream_of(store, ROOT)) == {}


async def test_unknown_tool_is_an_error_result(store: EventStore) -> None:
    script = Recorder(call("missing", {"x": 1}, id="u1"), reply("Oops."))
    agent = define_agent("lonely", llm=ScriptedLLM(script))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    assert tool_results(script.requests[1]) == {
        "u1": ToolResultMessage(
            tool_call_id="u1",
            tool_name="missing",
            content='{"error":"unknown tool \'missing\'"}',
            is_error=True,
        )
    }
    assert [tag(c) for c in await stream_of(store, ROOT)] == [
        "tool_start",
        "tool_end",
        "text_delta",
        "output",
    ]


async def test_reused_and_unsafe_call_ids_give_distinct_child_sessions(store: EventStore) -> None:
    child = define_agent(
        "child",
        output_schema=Answer,
        llm=ScriptedLLM(lambda request: finish({"answer": request.messages[0].content})),
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM(
            [
                [
                    call("subagent__child", {"query": "a"}, id="call_0"),
                    call("subagent__child", {"query": "b"}, id="call_0"),
                ],
                call("subagent__child", {"query": "c"}, id="bad id/1"),
                call("subagent__child", {"query": "d"}, id="call_0"),
                reply("Done."),
            ]
        ),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            result = await (await executor.execute(parent, "go", session_id=ROOT)).result()
    assert result.status == "completed"
    state = project_state(await store.read(ROOT))
    calls = [c for m in state.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    ids = [c.id for c in calls]
    assert len(set(ids)) == 4
    assert ids[0] == "call_0"
    assert sorted(state.sub_sessions) == sorted(f"{ROOT}-sub-{i}" for i in ids)
    assert len(await store.list_sessions()) == 5
    outputs = {
        ref.tool_call_id: ref.output["answer"] for ref in state.sub_sessions.values() if ref.output
    }
    assert outputs == dict(zip(ids, ["a", "b", "c", "d"], strict=True))


async def test_finish_completes_after_the_turns_other_calls(store: EventStore) -> None:
    order: list[str] = []

    async def side(value: Query, ctx: Any) -> str:
        order.append("tool")
        return "side effect"

    agent = define_agent(
        "finisher",
        output_schema=Answer,
        tools=[define_tool("side", "Side effect.", Query, side)],
        hooks=AgentHooks(on_agent_complete=lambda ctx, output: order.append("complete")),
        llm=ScriptedLLM(
            [
                [
                    call("__finish__", {"answer": "first"}),
                    call("side", {"query": "x"}),
                    call("__finish__", {"answer": "second"}),
                ]
            ]
        ),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            result = await (await executor.execute(agent, "go", session_id=ROOT)).result()
    assert (result.status, result.output.model_dump()) == ("completed", {"answer": "first"})
    assert order == ["tool", "complete"]
    chunks = await stream_of(store, ROOT)
    assert unmatched_tools(chunks) == {}
    assert tag(chunks[-1]) == "output"


# --- more interrupt / resume shapes ---------------------------------------------------------------


async def test_interrupt_and_resume_a_three_deep_tree(store: EventStore) -> None:
    blocker = Blocker()
    grandchild = define_agent(
        "grandchild",
        output_schema=Answer,
        tools=[define_tool("slow", "Slow.", Query, blocker.run)],
        llm=ScriptedLLM([call("slow", {"query": "x"}, id="t1"), finish({"answer": "leaf"})]),
    )
    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[create_sub_agent_tool(grandchild, Query)],
        llm=ScriptedLLM(
            [call("subagent__grandchild", {"query": "x"}, id="c2"), finish({"answer": "mid"})]
        ),
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM([call("subagent__child", {"query": "x"}, id="c1"), reply("Top.")]),
    )
    grand = f"{CHILD}-sub-c2"
    tree = (ROOT, CHILD, grand)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await blocker.entered.wait()
            await handle.interrupt()
            assert (await handle.result()).status == "interrupted"
            for session_id in tree:
                assert project_state(await store.read(session_id)).status == "interrupted"
            assert unmatched_tools(await stream_of(store, ROOT)) == {}
            result = await (await executor.resume(ROOT)).result()

    assert (result.status, result.output) == ("completed", "Top.")
    assert await store.list_sessions() == sorted(tree)
    for session_id in tree:
        log = await store.read(session_id)
        assert project_state(log).status == "completed"
        assert sum(isinstance(e, SessionCreated) for e in log) == 1
        assert [e.mode for e in log if isinstance(e, RunStarted)] == ["start", "resume"]
    assert unmatched_tools(await stream_of(store, ROOT)) == {}
    assert blocker.calls == 2


async def test_interrupt_and_resume_parallel_children(store: EventStore) -> None:
    both_in = anyio.Event()
    blocked = 0

    async def slow(value: Query, ctx: Any) -> str:
        nonlocal blocked
        if ctx.session_id not in resumed:
            blocked += 1
            if blocked == 2:
                both_in.set()
            await anyio.sleep_forever()
        return value.query

    resumed: set[str] = set()
    child = define_agent(
        "child",
        output_schema=Answer,
        tools=[define_tool("slow", "Slow.", Query, slow)],
        llm=ScriptedLLM([call("slow", {"query": "x"}, id="t1"), finish({"answer": "ok"})]),
    )
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM(
            [
                [
                    call("subagent__child", {"query": "a"}, id="ca"),
                    call("subagent__child", {"query": "b"}, id="cb"),
                ],
                reply("Both."),
            ]
        ),
    )
    children = [f"{ROOT}-sub-ca", f"{ROOT}-sub-cb"]
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id=ROOT)
            await both_in.wait()
            await handle.interrupt()
            assert (await handle.result()).status == "interrupted"
            refs = project_state(await store.read(ROOT)).sub_sessions
            assert {refs[c].status for c in children} == {"interrupted"}
            assert unmatched_tools(await stream_of(store, ROOT)) == {}
            resumed.update(children)
            result = await (await executor.resume(ROOT)).result()
    assert result.status == "completed"
    refs = project_state(await store.read(ROOT)).sub_sessions
    assert {refs[c].status for c in children} == {"completed"}
    assert unmatched_tools(await stream_of(store, ROOT)) == {}


async def test_interrupt_during_an_llm_call_then_resume(store: EventStore) -> None:
    thinking = anyio.Event()
    turns = 0

    async def script(request: LLMRequest) -> Any:
        nonlocal turns
        turns += 1
        if turns == 1:
            thinking.set()
            await anyio.sleep_forever()
        return reply("Second try.")

    agent = define_agent("thinker", llm=ScriptedLLM(script))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "go", session_id=ROOT)
            await thinking.wait()
            await handle.interrupt("too slow")
            interrupted = await handle.result()
            assert (interrupted.status, interrupted.step_count) == ("interrupted", 1)
            result = await (await executor.resume(ROOT)).result()
    assert (result.status, result.output, turns) == ("completed", "Second try.", 2)
    state = project_state(await store.read(ROOT))
    assert [type(m).__name__ for m in state.messages] == ["UserMessage", "AssistantMessage"]
    assert [tag(c) for c in await stream_of(store, ROOT)] == ["text_delta", "output"]


async def test_resume_with_a_message_keeps_tool_results_next_to_their_calls() -> None:
    """A chat-completions API rejects a conversation where anything but the tool results
    follows an assistant message with tool calls; a resume message must come after them."""
    store = MemoryEventStore()
    blocker = Blocker()
    script = Recorder(call("slow", {"query": "x"}, id="t1"), reply("Noted."))
    agent = define_agent(
        "worker",
        tools=[define_tool("slow", "Slow.", Query, blocker.run)],
        llm=ScriptedLLM(script),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "start", session_id=ROOT)
            await blocker.entered.wait()
            await handle.interrupt()
            await handle.result()
            result = await (await executor.resume(ROOT, "also do this")).result()
    assert result.status == "completed"
    messages = script.requests[-1].messages
    assert UserMessage(content="also do this") in messages
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage) and message.tool_calls:
            following = messages[index + 1 : index + 1 + len(message.tool_calls)]
            assert [m.tool_call_id for m in following if isinstance(m, ToolResultMessage)] == [
                c.id for c in message.tool_calls
            ], f"tool results do not follow their calls: {messages}"


# --- one run per session --------------------------------------------------------------------------


class LateAckStore(WrappedStore):
    """A store whose ``append`` commits at once but acknowledges after a scheduling point.

    Any networked store behaves so (the write is visible to readers before the
    writer hears back); SQLite's group commit does too, under load.
    """

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        seq = await self.inner.append(session_id, events, expected_seq)
        await anyio.lowlevel.checkpoint()
        return seq


async def test_concurrent_resumes_of_one_session_start_one_run() -> None:
    """Two resumes racing in one executor (e.g. ``recover()`` and a parent reconciling its
    child) must not both launch a run: the session would run twice, complete twice."""
    inner = MemoryEventStore()
    thinking = anyio.Event()
    turns = 0

    async def script(request: LLMRequest) -> Any:
        nonlocal turns
        turns += 1
        if turns == 1:
            thinking.set()
            await anyio.sleep_forever()
        return reply("Resumed.")

    agent = define_agent("thinker", llm=ScriptedLLM(script))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(inner, [agent]) as executor:
            handle = await executor.execute(agent, "go", session_id=ROOT)
            await thinking.wait()
            await handle.interrupt()
            assert (await handle.result()).status == "interrupted"

        run_ids: list[str] = []
        async with AgentExecutor(LateAckStore(inner), [agent]) as executor:

            async def resume() -> None:
                request = RemoteResumeRequest(session_id=ROOT)
                run_ids.append((await executor.service.resume(request)).run_id)

            async with anyio.create_task_group() as tg:
                tg.start_soon(resume)
                tg.start_soon(resume)
            await executor.wait_idle(ROOT)

    log = await inner.read(ROOT)
    assert [e.mode for e in log if isinstance(e, RunStarted)] == ["start", "resume"]
    assert len(set(run_ids)) == 1
    assert turns == 2
    assert sum(isinstance(e, OutputChunk) for e in log) == 1
    assert project_state(log).status == "completed"


async def test_result_of_a_concurrent_start_waits_for_the_run() -> None:
    """``execute`` twice with one session id at once: both handles' ``result()`` wait for
    the one run; neither reports it ``running``."""
    agent = define_agent("quick", llm=ScriptedLLM([reply("Hello.")]))
    statuses: list[str] = []
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(LateAckStore(MemoryEventStore()), [agent]) as executor:

            async def start() -> None:
                handle = await executor.execute(agent, "go", session_id=ROOT)
                statuses.append((await handle.result()).status)

            async with anyio.create_task_group() as tg:
                tg.start_soon(start)
                tg.start_soon(start)
    assert statuses == ["completed", "completed"]
