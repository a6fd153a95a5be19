"""``ChildCall`` driven directly: no run loop, a parent log written by hand.

The parent is a session created in a :class:`MemoryEventStore` (``session_created``,
``run_started`` and an assistant message holding the call), with a
:class:`SessionWriter` over it. The child side is a real :class:`AgentExecutor`
on the same store running scripted child agents, reached through
:class:`InProcessTransport` (recording what reaches it), wrapped in
:class:`FaultyTransport` so a test can plan faults. Nothing sleeps to
synchronise: tests wait on events (a tool's gate, a tail of a log).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import msgspec
import pytest
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    InProcessTransport,
    RemoteAgentTransport,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.children.call import ChildCall
from helix_agents.children.target import (
    ChildOutcome,
    SubAgentCall,
    SubAgentToolLike,
    checked_output,
)
from helix_agents.events import (
    ChildChunkForwarded,
    Chunk,
    Completed,
    Event,
    Failed,
    MessageAppended,
    RunStarted,
    SessionCreated,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    ToolEnd,
    ToolStart,
    UsageRecorded,
)
from helix_agents.log import project_state, project_stream
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.protocol import (
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    TransportEvent,
)
from helix_agents.runtime.decide import unanswered_calls
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.writer import SessionWriter, StopRequest
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import Fault, FaultyTransport

LIMIT = 10.0
"""Seconds any one test may take."""

RETRY_BASE = 0.0005
"""``stream_retry_base`` of the remote tools: backoff waits of about a millisecond."""

FOREVER = 3600.0
"""A ``delay`` fault that only a cancellation ends."""

PARENT = "parent"
CALL_ID = "c1"
LOCAL_CHILD = f"{PARENT}-sub-{CALL_ID}"
REMOTE_CHILD = f"{PARENT}-remote-{CALL_ID}"
TOOL = "subagent__worker"

WORDS = "the tides rise and fall twice a day"
BROKE = "LLM call failed: the model broke"
"""The error of the ``worker`` that fails (its model's failure)."""

Kind = Literal["local", "remote"]
KINDS = [pytest.param("local", id="local"), pytest.param("remote", id="remote")]


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


class Scored(BaseModel):
    answer: str
    score: int


# --- the child side ----------------------------------------------------------------------------


class Gate:
    """A tool body whose first call blocks until :meth:`open`; later calls pass at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.entered = anyio.Event()
        self.opened = anyio.Event()

    async def run(self, value: Query, ctx: Any) -> dict[str, str]:
        self.calls += 1
        if self.calls == 1:
            self.entered.set()
            await self.opened.wait()
        return {"napped": value.query}

    def open(self) -> None:
        self.opened.set()


async def lookup(value: Query, ctx: Any) -> dict[str, str]:
    return {"found": value.query.upper()}


def worker(gate: Gate | None = None, *, fails: bool = False) -> AgentConfig:
    """The child agent ``worker``: text, one tool call, more text, then ``__finish__``.

    With ``gate``, its tool is the gate's (it blocks on its first call); with
    ``fails``, its second model call fails instead of finishing.
    """
    tool = (
        define_tool("nap", "Wait.", Query, gate.run)
        if gate is not None
        else define_tool("lookup", "Look it up.", Query, lookup)
    )
    first = ScriptStep(text=WORDS, tool_calls=[ScriptedLLM.call(tool.name, {"query": "tides"})])
    last = (
        ScriptedLLM.fail("the model broke")
        if fails
        else ScriptedLLM.finish({"answer": "TIDES"}, text="all done")
    )
    return define_agent(
        "worker",
        output_schema=Answer,
        tools=[tool],
        llm=ScriptedLLM([first, last], chunk_words=1),
    )


class RecordingTransport(InProcessTransport):
    """The in-process transport, recording every call that reaches the child side.

    With ``replay_from_zero`` its streams ignore ``from_sequence`` and replay the
    child's stream from the start (a server that redelivers what was held).
    """

    def __init__(self, target: RemoteAgentTransport, *, replay_from_zero: bool = False) -> None:
        super().__init__(target)
        self.replay_from_zero = replay_from_zero
        self.starts: list[str] = []
        self.resumes: list[str] = []
        self.streams: list[tuple[str, int]] = []
        self.stops: list[tuple[str, str]] = []

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        self.starts.append(request.session_id)
        return await super().start(request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        self.resumes.append(request.session_id)
        return await super().resume(request)

    def stream(self, session_id: str, from_sequence: int = 0) -> AsyncIterator[TransportEvent]:
        self.streams.append((session_id, from_sequence))
        return super().stream(session_id, 0 if self.replay_from_zero else from_sequence)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        self.stops.append(("interrupt", session_id))
        await super().interrupt(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        self.stops.append(("abort", session_id))
        await super().abort(session_id, reason)


class BatchStore(MemoryEventStore):
    """A memory store that keeps every committed batch, as it was appended."""

    def __init__(self) -> None:
        super().__init__()
        self.batches: list[tuple[str, list[Event]]] = []

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        last = await super().append(session_id, events, expected_seq)
        self.batches.append((session_id, list(events)))
        return last


class Fired:
    """The ``fire`` callback of a run: records each hook with its arguments.

    ``probe(name)`` runs inside the callback, to look at the logs as the hook fires.
    """

    def __init__(self, probe: Callable[[str], Any] | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.probe = probe

    async def __call__(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if self.probe is not None:
            await self.probe(name)


# --- the parent side ---------------------------------------------------------------------------


def the_call(arguments: Any = None) -> ToolCall:
    return ToolCall(id=CALL_ID, name=TOOL, arguments=arguments or {"query": "tides"})


@dataclass
class Side:
    """The parent's store and run environment, and the child side behind the transports."""

    store: BatchStore
    executor: AgentExecutor
    inner: RecordingTransport
    faulty: FaultyTransport
    env: RunEnv
    fired: Fired = field(default_factory=Fired)

    def tool(
        self,
        kind: Kind,
        child: AgentConfig,
        *,
        timeout: float | None = None,
        retries: int = 3,
        output_schema: type[BaseModel] = Answer,
    ) -> SubAgentToolLike:
        """A local sub-agent tool for ``child``, or a remote one for its agent type."""
        if kind == "local":
            return create_sub_agent_tool(child, Query, timeout=timeout)
        return create_remote_sub_agent_tool(
            child.name,
            description="Delegate remotely.",
            input_schema=Query,
            output_schema=output_schema,
            transport=self.faulty,
            remote_agent_type=child.name,
            timeout=timeout,
            stream_retries=retries,
            stream_retry_base=RETRY_BASE,
        )

    async def create_parent(self, *calls: ToolCall) -> SessionWriter:
        """Create the parent session, whose last assistant turn holds ``calls``."""
        now = time.time()
        created = SessionCreated(
            session_id=PARENT,
            seq=1,
            ts=now,
            agent_type="parent",
            run_id="run-1",
            messages=[UserMessage(content="go")],
        )
        started = RunStarted(session_id=PARENT, seq=2, ts=now, run_id="run-1")
        await self.store.append(PARENT, [created, started], 0)
        writer = SessionWriter(self.store, await self.store.read(PARENT))
        await writer.append(MessageAppended(message=AssistantMessage(tool_calls=list(calls))))
        return writer

    async def resume_parent(self) -> SessionWriter:
        """A new run of the parent (after an interrupt or a crash): a writer over its log."""
        log = await self.store.read(PARENT)
        resumed = RunStarted(
            session_id=PARENT, seq=len(log) + 1, ts=time.time(), run_id="run-2", mode="resume"
        )
        await self.store.append(PARENT, [resumed], len(log))
        return SessionWriter(self.store, [*log, resumed])

    def child_call(
        self, writer: SessionWriter, tool: SubAgentToolLike, call: ToolCall | None = None
    ) -> ChildCall:
        parent = define_agent("parent", tools=[tool])
        return ChildCall(writer, parent, call or the_call(), tool, self.env, self.fired)


@asynccontextmanager
async def child_side(
    *agents: AgentConfig, plan: Sequence[Fault] = (), replay_from_zero: bool = False
) -> AsyncIterator[Side]:
    """A store, an executor running ``agents`` on it, and the transports that reach it.

    Leaving the block cancels whatever child still runs.
    """
    store = BatchStore()
    with anyio.CancelScope() as scope:
        async with AgentExecutor(store, agents) as executor:
            inner = RecordingTransport(executor.service, replay_from_zero=replay_from_zero)
            faulty = FaultyTransport(inner, plan)
            env = RunEnv(
                store=store, llm=None, llm_override=None, local_transport=faulty, stop_grace=5.0
            )
            try:
                yield Side(store, executor, inner, faulty, env)
            finally:
                scope.cancel()
    await store.close()


async def run_call(call: ChildCall) -> None:
    """Run the call as a run loop would: with the writer's flusher beside it."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(call.writer.flush_forever)
        await call.run()
        tg.cancel_scope.cancel()


class Running:
    """A call running in a task of its own, which the test can cut short like a stop does."""

    def __init__(self, call: ChildCall) -> None:
        self.call = call
        self.scope = anyio.CancelScope()
        self.done = anyio.Event()

    async def run(self) -> None:
        try:
            with self.scope:
                await run_call(self.call)
        finally:
            self.done.set()

    async def cut(self) -> None:
        """Cancel the call where it is and wait until its task has unwound."""
        self.scope.cancel()
        await self.done.wait()


async def wait_for(
    store: MemoryEventStore, session_id: str, match: Callable[[Event], bool]
) -> None:
    """Tail ``session_id`` until an event that ``match``es is in the store."""
    events = store.tail(session_id, 0)
    try:
        async for event in events:
            if match(event):
                return
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            await aclose()


def forwards(child_tool: str) -> Callable[[Event], bool]:
    """Matches the parent's forwarded copy of the child's ``tool_start`` of ``child_tool``."""
    return lambda event: (
        isinstance(event, ChildChunkForwarded)
        and isinstance(event.chunk, ToolStart)
        and event.chunk.tool_name == child_tool
    )


# --- reading the logs --------------------------------------------------------------------------


def tag(chunk: Chunk) -> str:
    value = type(chunk).__struct_config__.tag
    assert isinstance(value, str)
    return value


def segments(log: Sequence[Event], child_id: str) -> list[tuple[list[Chunk], SubAgentEnd, ToolEnd]]:
    """Split the parent's stream into the call's segments, checking invariant 1 for each.

    A segment is ``tool_start`` -> ``subagent_start`` -> the child's chunks ->
    ``subagent_end`` -> ``tool_end``; returns the child's chunks and the two ends.
    """
    chunks = [item.chunk for item in project_stream(log)]
    found: list[tuple[list[Chunk], SubAgentEnd, ToolEnd]] = []
    position = 0
    while position < len(chunks):
        head = chunks[position : position + 2]
        assert [(tag(c), c.agent_id) for c in head] == [
            ("tool_start", PARENT),
            ("subagent_start", PARENT),
        ], f"segment {len(found) + 1} opens with {head}"
        assert isinstance(head[0], ToolStart)
        assert head[0].tool_call_id == CALL_ID
        assert head[0].tool_name == TOOL
        assert isinstance(head[1], SubAgentStart)
        assert head[1].sub_agent_id == child_id
        position += 2
        inner: list[Chunk] = []
        while position < len(chunks) and chunks[position].agent_id != PARENT:
            inner.append(chunks[position])
            position += 1
        tail = chunks[position : position + 2]
        assert [(tag(c), c.agent_id) for c in tail] == [
            ("subagent_end", PARENT),
            ("tool_end", PARENT),
        ], f"segment {len(found) + 1} closes with {tail}"
        end, tool_end = tail
        assert isinstance(end, SubAgentEnd)
        assert end.sub_agent_id == child_id
        assert isinstance(tool_end, ToolEnd)
        assert tool_end.tool_call_id == CALL_ID
        assert all(chunk.agent_id == child_id for chunk in inner)
        found.append((inner, end, tool_end))
        position += 2
    return found


def forwarded(log: Sequence[Event]) -> list[tuple[int, Chunk]]:
    """``(child seq, chunk)`` of every ``child_chunk_forwarded`` of the parent's log."""
    return [(e.child_seq, e.chunk) for e in log if isinstance(e, ChildChunkForwarded)]


async def child_stream(store: MemoryEventStore, child_id: str) -> list[tuple[int, Chunk]]:
    """``(seq, chunk)`` of every chunk of the child's own stream."""
    return [(item.sequence, item.chunk) for item in project_stream(await store.read(child_id))]


def tool_messages(log: Sequence[Event]) -> list[ToolResultMessage]:
    return [
        e.message
        for e in log
        if isinstance(e, MessageAppended) and isinstance(e.message, ToolResultMessage)
    ]


def finishes(log: Sequence[Event]) -> list[SubSessionFinished]:
    return [e for e in log if isinstance(e, SubSessionFinished)]


def error_of(message: ToolResultMessage) -> str:
    assert message.is_error
    decoded = msgspec.json.decode(message.content)
    assert isinstance(decoded, dict)
    error = decoded["error"]
    assert isinstance(error, str)
    return error


def child_id_of(kind: Kind) -> str:
    return LOCAL_CHILD if kind == "local" else REMOTE_CHILD


# --- start, forward, finish ----------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_a_call_forwards_the_childs_chunks_and_finishes_in_one_batch(kind: Kind) -> None:
    child = worker()
    child_id = child_id_of(kind)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child)))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, child_id)
            child_log = await side.store.read(child_id)

    # Every chunk of the child, with the child's seq, once, in order.
    assert len(child_chunks) >= 10
    assert forwarded(log) == child_chunks
    # Invariant 1: tool_start -> subagent_start -> the child's chunks -> subagent_end -> tool_end.
    [(inner, end, tool_end)] = segments(log, child_id)
    assert [(e.seq, e) for e in inner] == child_chunks
    assert end.success
    assert end.result == {"answer": "TIDES"}
    assert tool_end.result == {"answer": "TIDES"}
    assert tool_end.error is None
    [message] = tool_messages(log)
    assert not message.is_error
    assert msgspec.json.decode(message.content) == {"answer": "TIDES"}
    # The child's end, the tool message and tool_end are one batch (after any pending
    # events: the forwarded chunks and, when the whole call took less than the flusher's
    # window, as a child that ends within its start does, the call's opening records first).
    session, last = side.store.batches[-1]
    assert session == PARENT
    kinds = [type(e) for e in last]
    assert kinds[-5:] == [SubSessionFinished, SubAgentEnd, MessageAppended, ToolEnd, UsageRecorded]
    pending = kinds[:-5]
    if pending[:1] == [ToolStart]:
        assert pending[:3] == [ToolStart, SubSessionStarted, SubAgentStart]
        pending = pending[3:]
    assert all(k is ChildChunkForwarded for k in pending)
    # The parent's ref knows the child's end and the last seq it holds.
    ref = writer.state.sub_sessions[child_id]
    assert ref.status == "completed"
    assert ref.output == {"answer": "TIDES"}
    assert ref.last_child_seq == child_chunks[-1][0]
    assert unanswered_calls(writer.state) == []
    # One start, one stream from 0; the child knows its parent.
    assert side.inner.starts == [child_id]
    assert side.inner.streams == [(child_id, 0)]
    created = child_log[0]
    assert isinstance(created, SessionCreated)
    assert created.parent_session_id == PARENT
    assert created.root_session_id == PARENT
    assert created.parent_tool_call_id == CALL_ID
    assert created.messages == [UserMessage(content="tides")]


@pytest.mark.parametrize("kind", KINDS)
async def test_invalid_input_is_an_error_result_and_starts_nothing(kind: Kind) -> None:
    child = worker()
    call = the_call({"topic": "tides"})
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(call)
            await run_call(side.child_call(writer, side.tool(kind, child), call))
            log = await side.store.read(PARENT)
            sessions = await side.store.list_sessions()

    expected = "invalid arguments: query: Field required"
    [message] = tool_messages(log)
    assert error_of(message) == expected
    chunks = [item.chunk for item in project_stream(log)]
    assert [tag(c) for c in chunks] == ["tool_start", "tool_end"]
    assert isinstance(chunks[1], ToolEnd)
    assert chunks[1].error == expected
    assert not any(isinstance(e, SubSessionStarted) for e in log)
    assert writer.state.sub_sessions == {}
    assert sessions == [PARENT]
    assert side.inner.starts == []
    assert side.inner.streams == []


@pytest.mark.parametrize("kind", KINDS)
async def test_a_start_that_keeps_failing_finishes_the_call_failed(kind: Kind) -> None:
    # Local children have a budget of 3 retries; the remote tool is given 1.
    attempts = 4 if kind == "local" else 2
    plan = [Fault(op="start", kind="fail")] * attempts
    child = worker()
    child_id = child_id_of(kind)
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child, retries=1)))
            log = await side.store.read(PARENT)
            child_log = await side.store.read(child_id)
            injected = list(side.faulty.injected)
            fired = list(side.fired.calls)

    cause = "INTERNAL_ERROR: injected server failure in start"
    expected = cause if kind == "local" else f"remote session '{child_id}' failed: {cause}"
    assert injected == plan
    assert child_log == []  # no attempt reached the child side
    [(inner, end, tool_end)] = segments(log, child_id)
    assert inner == []
    assert not end.success
    assert end.error == expected
    assert tool_end.error == expected
    [message] = tool_messages(log)
    assert error_of(message) == expected
    [finished] = finishes(log)
    assert finished.status == "failed"
    assert [name for name, _ in fired] == ["before_sub_agent", "after_sub_agent"]
    assert fired[1][1][1] == ChildOutcome(status="failed", error=expected)


async def test_a_start_failing_within_the_budget_is_retried() -> None:
    plan = [Fault(op="start", kind="fail", error="network")]
    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool("remote", child, retries=1)))
            log = await side.store.read(PARENT)

    assert side.faulty.injected == plan
    [(_, end, _)] = segments(log, REMOTE_CHILD)
    assert end.success
    assert finishes(log)[0].status == "completed"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_failing_child_gives_its_error_and_keeps_the_order(kind: Kind) -> None:
    child = worker(fails=True)
    child_id = child_id_of(kind)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child)))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, child_id)

    cause = BROKE
    expected = cause if kind == "local" else f"remote session '{child_id}' failed: {cause}"
    [(inner, end, tool_end)] = segments(log, child_id)
    assert [(c.seq, c) for c in inner] == child_chunks
    assert not end.success
    assert end.error == expected
    assert tool_end.error == expected
    [message] = tool_messages(log)
    assert error_of(message) == expected
    assert finishes(log)[0].status == "failed"


# --- reconnecting ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_dropped_streams_reconnect_from_the_held_seq(kind: Kind) -> None:
    plan = [
        Fault(op="stream", kind="drop", after=2),
        Fault(op="stream", kind="fail", error="network"),
        Fault(op="stream", kind="drop", after=3),
    ]
    child = worker()
    child_id = child_id_of(kind)
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child)))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, child_id)

    assert side.faulty.injected == plan
    seqs = [seq for seq, _ in child_chunks]
    # The failed connection never reached the child side; each other one began at the held seq.
    assert side.inner.streams == [(child_id, 0), (child_id, seqs[1]), (child_id, seqs[4])]
    assert forwarded(log) == child_chunks  # no gap, no duplicate
    [(_, end, _)] = segments(log, child_id)
    assert end.success


async def test_a_follow_starts_after_resume_from_when_it_is_past_the_logs_seq() -> None:
    """``resume_from`` (a durable engine's heartbeat) beyond what the log holds: the stream
    is asked from it, and no chunk at or before it is forwarded."""
    child = worker()
    child_id = child_id_of("remote")
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            call = side.child_call(writer, side.tool("remote", child))
            assert await call.open()
            await side.executor.wait_idle(child_id)  # the child ran to its end
            seqs = [seq for seq, _ in await child_stream(side.store, child_id)]
            call.resume_from = seqs[2]
            async with anyio.create_task_group() as tg:
                tg.start_soon(call.writer.flush_forever)
                assert not await call.conclude()
                tg.cancel_scope.cancel()
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, child_id)

    assert side.inner.streams == [(child_id, seqs[2])]
    assert forwarded(log) == [(seq, chunk) for seq, chunk in child_chunks if seq > seqs[2]]


@pytest.mark.parametrize("retries", [0, 2])
async def test_drops_in_a_row_beyond_the_budget_fail_with_stream_drop(retries: int) -> None:
    # The first connection delivers one chunk; then every connection drops at once.
    # The child is still running (its tool blocks on the gate), so the status
    # asked after each drop does not end the call (specs/runtime.md).
    plan = [Fault(op="stream", kind="drop", after=1)]
    plan += [Fault(op="stream", kind="drop", after=0)] * retries
    gate = Gate()
    child = worker(gate)
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side:
            writer = await side.create_parent(the_call())
            try:
                await run_call(side.child_call(writer, side.tool("remote", child, retries=retries)))
            finally:
                gate.open()
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, REMOTE_CHILD)

    first = child_chunks[0][0]
    assert side.faulty.injected == plan
    assert forwarded(log) == child_chunks[:1]
    drop = f"stream of remote session '{REMOTE_CHILD}' dropped after sequence {first}"
    expected = f"remote session '{REMOTE_CHILD}' failed: {drop}"
    [(_, end, tool_end)] = segments(log, REMOTE_CHILD)
    assert end.error == expected
    assert tool_end.error == expected
    [message] = tool_messages(log)
    assert error_of(message) == expected
    assert finishes(log)[0].status == "failed"


async def test_drops_separated_by_progress_do_not_exhaust_the_budget() -> None:
    plan = [Fault(op="stream", kind="drop", after=2)] * 4
    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool("remote", child, retries=1)))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, REMOTE_CHILD)

    assert side.faulty.injected == plan
    assert forwarded(log) == child_chunks
    [(_, end, _)] = segments(log, REMOTE_CHILD)
    assert end.success


@pytest.mark.parametrize(
    ("plan", "replay_from_zero"),
    [
        pytest.param([Fault(op="stream", kind="duplicate", after=3)], False, id="duplicate"),
        pytest.param([Fault(op="stream", kind="drop", after=4)], True, id="replayed-from-zero"),
    ],
)
async def test_redelivered_chunks_are_not_appended_twice(
    plan: list[Fault], replay_from_zero: bool
) -> None:
    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan, replay_from_zero=replay_from_zero) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool("local", child)))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)

    assert side.faulty.injected == plan
    assert forwarded(log) == child_chunks
    [(_, end, _)] = segments(log, LOCAL_CHILD)
    assert end.success


# --- re-opening a call the parent's log knows --------------------------------------------------


async def test_reopen_after_a_halt_resumes_the_child_from_the_held_seq() -> None:
    gate = Gate()
    child = worker(gate)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side, anyio.create_task_group() as tg:
            tool = side.tool("local", child)
            writer = await side.create_parent(the_call())
            first = Running(side.child_call(writer, tool))
            tg.start_soon(first.run)
            await gate.entered.wait()  # the child's tool is in flight
            await first.cut()
            with anyio.CancelScope(shield=True):
                await first.call.halt(StopRequest("interrupt", "pause"))
            assert project_state(await side.store.read(LOCAL_CHILD)).status == "interrupted"

            resumed = await side.resume_parent()
            ref = resumed.state.sub_sessions[LOCAL_CHILD]
            assert ref.status == "interrupted"
            assert unanswered_calls(resumed.state) == [the_call()]
            held = ref.last_child_seq
            streams_before = len(side.inner.streams)
            gate.open()
            await run_call(side.child_call(resumed, tool))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)
            child_log = await side.store.read(LOCAL_CHILD)

    assert side.inner.starts == [LOCAL_CHILD]
    assert side.inner.resumes == [LOCAL_CHILD]
    assert side.inner.streams[streams_before] == (LOCAL_CHILD, held)
    # Two segments (the halt closed the first); together they hold the child's stream exactly.
    assert forwarded(log) == child_chunks
    [(run1, end1, tool_end1), (run2, end2, tool_end2)] = segments(log, LOCAL_CHILD)
    assert [(c.seq, c) for c in run1 + run2] == child_chunks
    assert not end1.success
    assert tool_end1.error == "interrupted: pause"
    assert end2.success
    assert tool_end2.result == {"answer": "TIDES"}
    assert sum(isinstance(e, SubSessionResumed) for e in log) == 1
    [message] = tool_messages(log)
    assert msgspec.json.decode(message.content) == {"answer": "TIDES"}
    # The child was resumed, never restarted.
    assert sum(isinstance(e, SessionCreated) for e in child_log) == 1
    assert [e.mode for e in child_log if isinstance(e, RunStarted)] == ["start", "resume"]


@pytest.mark.parametrize("child_state", ["interrupted", "running"])
async def test_reopen_after_a_crash_follows_the_child_from_the_logs_seq(child_state: str) -> None:
    """The parent's run died mid-call (chunks it had emitted but not committed are lost)."""
    gate = Gate()
    child = worker(gate)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            tool = side.tool("local", child)
            writer = await side.create_parent(the_call())
            async with anyio.create_task_group() as tg:
                tg.start_soon(run_call, side.child_call(writer, tool))
                await gate.entered.wait()
                await wait_for(side.store, PARENT, forwards("nap"))
                tg.cancel_scope.cancel()  # the crash: nothing more is written
            if child_state == "interrupted":
                await side.executor.service.interrupt(LOCAL_CHILD, "host lost")
                await side.executor.wait_idle(LOCAL_CHILD)
                assert project_state(await side.store.read(LOCAL_CHILD)).status == "interrupted"

            resumed = await side.resume_parent()
            held = resumed.state.sub_sessions[LOCAL_CHILD].last_child_seq
            assert held > 0
            streams_before = len(side.inner.streams)
            gate.open()
            await run_call(side.child_call(resumed, tool))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)

    assert side.inner.starts == [LOCAL_CHILD]
    assert side.inner.resumes == ([LOCAL_CHILD] if child_state == "interrupted" else [])
    assert side.inner.streams[streams_before] == (LOCAL_CHILD, held)
    assert forwarded(log) == child_chunks
    # The crashed run never closed its segment: the re-opened call continues it.
    [(inner, end, tool_end)] = segments(log, LOCAL_CHILD)
    assert [(c.seq, c) for c in inner] == child_chunks
    assert end.success
    assert tool_end.result == {"answer": "TIDES"}
    assert len(tool_messages(log)) == 1


@pytest.mark.parametrize("how", ["crash", "interrupt"])
async def test_reopen_starts_a_child_whose_start_never_reached_it(how: str) -> None:
    """The call's opening records are in the parent's log, but its start never arrived."""
    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(
            child, plan=[Fault(op="start", kind="delay", seconds=FOREVER)]
        ) as side:
            tool = side.tool("local", child)
            writer = await side.create_parent(the_call())
            async with anyio.create_task_group() as tg:
                first = Running(side.child_call(writer, tool))
                tg.start_soon(first.run)
                await wait_for(side.store, PARENT, lambda e: isinstance(e, SubSessionStarted))
                await first.cut()
            if how == "interrupt":
                with anyio.CancelScope(shield=True):
                    await first.call.halt(StopRequest("interrupt", "pause"))
            assert await side.store.read(LOCAL_CHILD) == []

            resumed = await side.resume_parent()
            assert unanswered_calls(resumed.state) == [the_call()]
            await run_call(side.child_call(resumed, tool))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)

    assert child_chunks, "the resumed call never started the child"
    assert forwarded(log) == child_chunks
    *_, (_, end, tool_end) = segments(log, LOCAL_CHILD)
    assert end.success, end.error
    assert tool_end.result == {"answer": "TIDES"}
    [message] = tool_messages(log)
    assert not message.is_error, message.content


@pytest.mark.parametrize("kind", KINDS)
async def test_a_call_whose_child_already_ended_follows_it_to_its_output(kind: Kind) -> None:
    """The child ran to its end, but the parent's log lost the records of starting it.

    As when the parent's host died after the start reached the child and before
    its written-behind records were committed (or a start was retried after a
    lost answer): the repeated start answers ``ALREADY_COMPLETED``. The call
    follows the child it started all the same (found by ``test_nats_soak.py``).
    """
    child = worker()
    child_id = child_id_of(kind)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            await side.inner.start(
                RemoteStartRequest(
                    session_id=child_id,
                    agent_type="worker",
                    message="tides",
                    parent_session_id=PARENT,
                    root_session_id=PARENT,
                )
            )
            await side.executor.wait_idle(child_id)
            assert project_state(await side.store.read(child_id)).status == "completed"
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child)))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, child_id)

    assert forwarded(log) == child_chunks
    [(inner, end, tool_end)] = segments(log, child_id)
    assert [(e.seq, e) for e in inner] == child_chunks
    assert end.success, end.error
    assert tool_end.result == {"answer": "TIDES"}
    [message] = tool_messages(log)
    assert not message.is_error, message.content


# --- timeout and halt ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
async def test_the_timeout_halts_the_child_and_records_interrupted(kind: Kind) -> None:
    gate = Gate()  # never opened: the child would wait forever
    child = worker(gate)
    child_id = child_id_of(kind)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child, timeout=0.1)))
            log = await side.store.read(PARENT)
            child_log = await side.store.read(child_id)
            child_chunks = await child_stream(side.store, child_id)
            fired = list(side.fired.calls)

    timed_out = "sub-agent 'worker' timed out after 0.1s"
    expected = timed_out if kind == "local" else f"remote session '{child_id}' failed: {timed_out}"
    assert gate.entered.is_set()
    assert side.inner.stops == [("interrupt", child_id)]
    assert project_state(child_log).status == "interrupted"
    # Followed until the child acknowledged: its closing tool_end is forwarded too.
    assert forwarded(log) == child_chunks
    assert isinstance(child_chunks[-1][1], ToolEnd)
    [finished] = finishes(log)
    assert finished.status == "interrupted"
    [(_, end, tool_end)] = segments(log, child_id)
    assert not end.success
    assert end.error == expected
    assert tool_end.error == expected
    [message] = tool_messages(log)
    assert error_of(message) == expected
    assert [name for name, _ in fired] == ["before_sub_agent", "after_sub_agent"]
    assert fired[1][1][1].status == "interrupted"


@pytest.mark.parametrize(
    ("stop", "child_status", "finished_status"),
    [
        pytest.param("interrupt", "interrupted", "interrupted", id="interrupt"),
        pytest.param("abort", "failed", "failed", id="abort"),
    ],
)
async def test_halt_records_the_acknowledgement_without_a_tool_result(
    stop: str, child_status: str, finished_status: str
) -> None:
    gate = Gate()
    child = worker(gate)
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side, anyio.create_task_group() as tg:
            writer = await side.create_parent(the_call())
            running = Running(side.child_call(writer, side.tool("local", child)))
            tg.start_soon(running.run)
            await gate.entered.wait()
            await running.cut()
            assert running.call.opened
            with anyio.CancelScope(shield=True):
                await running.call.halt(StopRequest(stop, "stop"))
            log = await side.store.read(PARENT)
            child_log = await side.store.read(LOCAL_CHILD)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)

    word = "interrupted" if stop == "interrupt" else "aborted"
    assert side.inner.stops == [(stop, LOCAL_CHILD)]
    assert project_state(child_log).status == child_status
    assert forwarded(log) == child_chunks
    [(_, end, tool_end)] = segments(log, LOCAL_CHILD)
    assert not end.success
    assert end.error == f"{word}: stop"
    assert tool_end.error == f"{word}: stop"
    assert tool_messages(log) == []  # no result: a resumed parent re-opens the call
    state = project_state(log)
    assert unanswered_calls(state) == [the_call()]
    ref = state.sub_sessions[LOCAL_CHILD]
    assert ref.status == finished_status
    assert ref.last_child_seq == child_chunks[-1][0]
    assert not running.call.opened


async def test_halt_keeps_the_result_of_a_child_that_completed_before_the_stop() -> None:
    # The call's first stream stalls, so the child completes before the call sees it.
    plan = [Fault(op="stream", kind="delay", after=0, seconds=FOREVER)]
    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side, anyio.create_task_group() as tg:
            writer = await side.create_parent(the_call())
            running = Running(side.child_call(writer, side.tool("local", child)))
            tg.start_soon(running.run)
            await wait_for(side.store, LOCAL_CHILD, lambda e: isinstance(e, Completed))
            await running.cut()
            with anyio.CancelScope(shield=True):
                await running.call.halt(StopRequest("interrupt", "stop"))
            log = await side.store.read(PARENT)
            child_log = await side.store.read(LOCAL_CHILD)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)
            fired = list(side.fired.calls)

    assert side.faulty.injected == plan
    assert project_state(child_log).status == "completed"
    assert forwarded(log) == child_chunks
    [(_, end, tool_end)] = segments(log, LOCAL_CHILD)
    assert end.success
    assert tool_end.result == {"answer": "TIDES"}
    [message] = tool_messages(log)
    assert msgspec.json.decode(message.content) == {"answer": "TIDES"}
    assert finishes(log)[0].status == "completed"
    assert unanswered_calls(project_state(log)) == []
    assert [name for name, _ in fired] == ["before_sub_agent", "after_sub_agent"]


async def test_a_child_that_failed_before_an_interrupt_keeps_the_order_on_resume() -> None:
    """The child fails on its own while the parent is being interrupted; the parent resumes."""
    plan = [Fault(op="stream", kind="delay", after=0, seconds=FOREVER)]
    child = worker(fails=True)
    with anyio.fail_after(LIMIT):
        async with child_side(child, plan=plan) as side:
            tool = side.tool("local", child)
            writer = await side.create_parent(the_call())
            async with anyio.create_task_group() as tg:
                running = Running(side.child_call(writer, tool))
                tg.start_soon(running.run)
                await wait_for(side.store, LOCAL_CHILD, lambda e: isinstance(e, Failed))
                await running.cut()
            with anyio.CancelScope(shield=True):
                await running.call.halt(StopRequest("interrupt", "pause"))
            resumed = await side.resume_parent()
            if unanswered_calls(resumed.state):
                await run_call(side.child_call(resumed, tool))
            log = await side.store.read(PARENT)
            child_chunks = await child_stream(side.store, LOCAL_CHILD)

    assert forwarded(log) == child_chunks
    *_, (_, end, tool_end) = segments(log, LOCAL_CHILD)  # every segment opened and closed
    assert not end.success
    assert tool_end.error == BROKE
    [message] = tool_messages(log)
    assert error_of(message) == BROKE


async def test_halt_of_a_call_that_is_not_open_records_nothing() -> None:
    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            call = side.child_call(writer, side.tool("local", child))
            await call.halt(StopRequest("interrupt", "too early"))  # never opened
            before = len(await side.store.read(PARENT))
            await run_call(call)
            after = len(await side.store.read(PARENT))
            await call.halt(StopRequest("interrupt", "too late"))  # already finished
            log = await side.store.read(PARENT)

    assert before == 3
    assert len(log) == after
    assert side.inner.stops == []


# --- remote output and hooks -------------------------------------------------------------------


async def test_remote_output_that_does_not_match_the_schema_fails_the_call() -> None:
    child = worker()  # finishes with {"answer": ...}, no score
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            tool = side.tool("remote", child, output_schema=Scored)
            await run_call(side.child_call(writer, tool))
            log = await side.store.read(PARENT)
            child_log = await side.store.read(REMOTE_CHILD)

    assert project_state(child_log).status == "completed"  # the child itself succeeded
    prefix = f"remote session '{REMOTE_CHILD}' failed: remote output does not match Scored: "
    [(_, end, tool_end)] = segments(log, REMOTE_CHILD)
    assert not end.success
    assert end.result is None
    assert tool_end.error is not None
    assert tool_end.error.startswith(prefix)
    # what did not match, then what the child returned
    assert tool_end.error == prefix + (
        'score: Field required; the child returned: {"answer":"TIDES"}'
    )
    [message] = tool_messages(log)
    assert error_of(message) == tool_end.error
    [finished] = finishes(log)
    assert finished.status == "failed"
    started = next(e for e in log if isinstance(e, SubSessionStarted))
    assert started.remote is not None
    assert started.remote.remote_agent_type == "worker"


def test_a_mismatch_names_the_first_problems_and_a_trimmed_output() -> None:
    class Wide(BaseModel):
        a: int
        b: int
        c: int
        d: int
        e: int

    assert checked_output(Wide, {}) == (
        None,
        "remote output does not match Wide: a: Field required; b: Field required; "
        "c: Field required; and 2 more; the child returned: {}",
    )
    output, error = checked_output(Wide, "word " * 200)
    assert output is None
    assert error is not None
    assert error.startswith(
        "remote output does not match Wide: Input should be a valid dictionary or instance "
        "of Wide; the child returned: 'word word "
    )
    assert error.endswith("...' (a text: leave output_schema out to take it as it is)")
    assert len(error) < 400  # 200 characters of the output, not 1000
    assert checked_output(None, "any text") == ("any text", None)  # no schema: as it came
    assert checked_output(None, {"x": 1}) == ({"x": 1}, None)


async def test_remote_output_is_validated_and_dumped_by_the_schema() -> None:
    class Loose(BaseModel):
        answer: str
        note: str = "none"

    child = worker()
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool("remote", child, output_schema=Loose)))
            log = await side.store.read(PARENT)

    expected = {"answer": "TIDES", "note": "none"}  # defaults filled in by the schema
    [(_, end, tool_end)] = segments(log, REMOTE_CHILD)
    assert end.result == expected
    assert tool_end.result == expected
    assert finishes(log)[0].output == expected


@pytest.mark.parametrize("kind", KINDS)
async def test_sub_agent_hooks_fire_once_each_around_the_call(kind: Kind) -> None:
    child = worker()
    child_id = child_id_of(kind)
    seen: dict[str, tuple[list[Event], list[Event]]] = {}
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:

            async def probe(name: str) -> None:
                seen[name] = (await side.store.read(PARENT), await side.store.read(child_id))

            side.fired.probe = probe
            writer = await side.create_parent(the_call())
            await run_call(side.child_call(writer, side.tool(kind, child)))
            fired = list(side.fired.calls)

    # The hooks' call is a SubAgentCall: the ToolCall plus the child (specs/runtime.md).
    hooked = SubAgentCall(
        id=the_call().id,
        name=the_call().name,
        arguments=the_call().arguments,
        agent_type="worker",
        agent_config=child if kind == "local" else None,
        is_remote=kind == "remote",
        session_id=child_id,
    )
    assert fired == [
        ("before_sub_agent", (hooked,)),
        (
            "after_sub_agent",
            (hooked, ChildOutcome(status="completed", output={"answer": "TIDES"})),
        ),
    ]
    parent_before, child_before = seen["before_sub_agent"]
    assert child_before == []  # before the child starts
    assert not any(isinstance(e, SubSessionStarted) for e in parent_before)
    parent_after, _ = seen["after_sub_agent"]
    assert len(tool_messages(parent_after)) == 1  # after the result is in the log
    assert isinstance(parent_after[-1], UsageRecorded)


async def test_parallel_calls_forward_into_one_log_without_mixing() -> None:
    child = worker()
    calls = [
        ToolCall(id="c1", name=TOOL, arguments={"query": "one"}),
        ToolCall(id="c2", name=TOOL, arguments={"query": "two"}),
    ]
    with anyio.fail_after(LIMIT):
        async with child_side(child) as side:
            tool = side.tool("local", child)
            writer = await side.create_parent(*calls)
            # Both calls of one assistant turn, as the run loop runs them: concurrently.
            async with anyio.create_task_group() as tg:
                tg.start_soon(writer.flush_forever)
                async with anyio.create_task_group() as calls_tg:
                    for call in calls:
                        calls_tg.start_soon(side.child_call(writer, tool, call).run)
                tg.cancel_scope.cancel()
            log = await side.store.read(PARENT)
            streams = {
                child_id: await child_stream(side.store, child_id)
                for child_id in (f"{PARENT}-sub-c1", f"{PARENT}-sub-c2")
            }

    for child_id, chunks in streams.items():
        held = [
            (e.child_seq, e.chunk)
            for e in log
            if isinstance(e, ChildChunkForwarded) and e.child_session_id == child_id
        ]
        assert held == chunks
    assert {m.tool_call_id for m in tool_messages(log)} == {"c1", "c2"}
    assert project_state(log).sub_sessions.keys() == streams.keys()
