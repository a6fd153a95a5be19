"""Fault schedules on a remote sub-agent call: no gap, no duplicate, same result.

A parent agent calls one remote sub-agent (``create_remote_sub_agent_tool`` with
``stream_retries=R``) whose child streams well over 10 chunks. The child runs on
an ``AgentServer``, reached (a) in process and (b) over HTTP on real uvicorn; the
parent's tool talks to it through a :class:`FaultyTransport` playing a
Hypothesis-generated plan. Each run is compared with the fault-free run of the
same child: the parent's output, the ``(child seq, chunk)`` pairs of its
``child_chunk_forwarded`` events and its whole stream.

The budget predicate (:func:`predict`), derived from ``core/children/call.py``
(``forward_child``, ``retrying``) and ``core/runtime/run_loop.py`` (``_call_sub_agent``):

- Each call of an operation takes the next fault planned for it, whether the
  fault then fires or not (``FaultyTransport``).
- ``start`` goes through ``retrying``: 1 + R attempts. ``fail`` (``"server"`` is
  an ``INTERNAL_ERROR``, ``"network"`` a ``TransportError``: both transient) costs
  an attempt; ``delay`` passes. So start succeeds iff the start plan begins with
  at most R ``fail`` faults in a row; else the call fails with the last error.
- The stream is read by ``forward_child``; every (re)connection takes the next
  stream fault. A connection from held seq ``h`` would yield the chunks after
  ``h`` and then the ``end``/``error`` event: ``L`` events. It is a *drop* when its
  fault is ``fail``, or ``drop`` with ``after < L`` (after delivering ``after``
  chunks). ``duplicate``/``delay`` (and any fault with ``after >= L``) never
  harm: the duplicate is dropped by the parent's dedup (child seq already held).
  Only drops in a row count: a connection that delivered new chunks resets the
  count, and the (R+1)-th drop in a row fails the call with
  ``StreamDropError`` (the last seq held in its message).
- ``status`` is asked once (no retry round) after every stream drop, before the
  reconnect (the seeds' order); if it says the child ended and the budget then
  runs out, the call ends with that outcome instead of ``StreamDropError``
  (timing decides which, so both are accepted). After the child's stream ended
  in ``error`` (a failing child), status is asked through ``retrying`` (1 + R
  attempts). A status that still fails after those counts as one more drop:
  the stream is opened again (from the last seq held, so it yields just the
  ``error``) and status is asked again.
- ``resume`` is asked only when a parent re-enters an existing child (a resumed
  parent); a first call never does, so resume faults stay unconsumed in the
  first property. The second (:func:`predict_pause`) interrupts the parent while
  the child blocks, resumes it, and plays status and resume faults there.

Within budget, output, forwarded chunks and stream equal the fault-free run;
otherwise the tool result is ``RemoteAgentFailedError``'s message (naming the
remote session id) and the parent holds a prefix of the fault-free chunks (no
gap, no duplicate). The faults that fired must be exactly those predicted.

Then a real network in the way: a loopback TCP proxy (``tests/tcp_proxy.py``)
between the HTTP transport and uvicorn cuts the SSE response after
Hypothesis-drawn byte counts (mid-frame), or every connection while the child
is blocked; the parent still ends with the exact fault-free chunks.

``test_drops_separated_by_progress_do_not_exhaust_the_retry_budget`` pins where
the code's budget differs from "consecutive failures" (see :func:`predict`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, event, example, given, note, settings, strategies as st
from pydantic import BaseModel
from servers import serve
from tcp_proxy import TcpProxy, tcp_proxy

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    InProcessTransport,
    RemoteAgentTransport,
    ToolContext,
    create_remote_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents._aio import closing_iter
from helix_agents.a2a import A2ARemoteAgentTransport
from helix_agents.errors import (
    AgentServerError,
    RemoteAgentFailedError,
    StreamDropError,
    TransportError,
)
from helix_agents.events import ChildChunkForwarded, Chunk, Event, Interrupted, ToolEnd, ToolStart
from helix_agents.log import project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import Fault, FaultyTransport, HttpRemoteAgentTransport

EXAMPLE_LIMIT = 10.0
"""Seconds one run of the parent may take."""

RETRY_BASE = 0.0005
"""``stream_retry_base``: backoff waits stay around a millisecond."""

DELAY = 0.001
"""Seconds a ``delay`` fault waits."""

MAX_RETRIES = 3

TOOL = "subagent__research"
CALL_ID = "c1"

ChildKind = Literal["completes", "fails"]
CHILD_TYPES: dict[ChildKind, str] = {"completes": "researcher", "fails": "broken"}

CHILD_TEXT = "the tides rise and fall twice a day because the moon pulls on the sea"


class Topic(BaseModel):
    topic: str


class Report(BaseModel):
    answer: str


# --- the remote side ------------------------------------------------------------------------


async def lookup(topic: Topic, ctx: ToolContext) -> dict[str, str]:
    return {"found": topic.topic.upper()}


class Gate:
    """The ``slow`` tool of the ``sleeper`` child blocks until :meth:`open`."""

    def __init__(self) -> None:
        self.entered = anyio.Event()
        self.opened = anyio.Event()

    async def wait(self, topic: Topic, ctx: ToolContext) -> dict[str, str]:
        self.entered.set()
        await self.opened.wait()
        return {"slept": topic.topic}

    def open(self) -> None:
        self.opened.set()

    def reset(self) -> None:
        """Close the gate again, for the next call."""
        self.entered = anyio.Event()
        self.opened = anyio.Event()


def remote_agents(gate: Gate) -> list[AgentConfig]:
    """``researcher`` completes, ``broken`` fails after streaming, ``sleeper`` waits on the gate."""
    first = ScriptStep(text=CHILD_TEXT, tool_calls=[ScriptedLLM.call("lookup", {"topic": "tides"})])
    tools = [define_tool("lookup", "Look it up.", Topic, lookup)]
    return [
        define_agent(
            "researcher",
            output_schema=Report,
            tools=tools,
            llm=ScriptedLLM(
                [first, ScriptedLLM.finish({"answer": "TIDES"}, text="all done")], chunk_words=1
            ),
        ),
        define_agent(
            "broken",
            output_schema=Report,
            tools=tools,
            llm=ScriptedLLM([first, ScriptedLLM.fail("the model broke")], chunk_words=1),
        ),
        define_agent(
            "sleeper",
            output_schema=Report,
            tools=[define_tool("slow", "Wait for the gate.", Topic, gate.wait)],
            llm=ScriptedLLM(
                [
                    ScriptStep(
                        text=CHILD_TEXT, tool_calls=[ScriptedLLM.call("slow", {"topic": "tides"})]
                    ),
                    ScriptedLLM.finish({"answer": "SLEPT"}, text="woke up"),
                ],
                chunk_words=1,
            ),
        ),
    ]


@dataclass
class Remote:
    """A running ``AgentServer`` and a transport that reaches it."""

    transport: RemoteAgentTransport
    server: AgentServer
    gate: Gate
    proxy: TcpProxy | None = None
    sse_size: int = 0
    baselines: dict[str, Run] = field(default_factory=dict)

    async def baseline(self, agent_type: str) -> Run:
        """The fault-free run of a parent calling ``agent_type`` (once per test)."""
        if agent_type not in self.baselines:
            self.baselines[agent_type] = await run_parent(self.transport, agent_type)
        return self.baselines[agent_type]


def http_transport(url: str) -> HttpRemoteAgentTransport:
    return HttpRemoteAgentTransport(url, max_retries=MAX_RETRIES, retry_base_delay=RETRY_BASE)


@asynccontextmanager
async def running_server() -> AsyncIterator[tuple[AgentServer, Gate]]:
    gate = Gate()
    store = MemoryEventStore()
    server = AgentServer(remote_agents(gate), store)
    with anyio.CancelScope() as scope:
        async with server:
            try:
                yield server, gate
            finally:
                gate.open()
                scope.cancel()  # children a failed call left running must not hold teardown
    await store.close()


@pytest.fixture
async def inprocess() -> AsyncIterator[Remote]:
    """The child side in this process, reached through an ``InProcessTransport``."""
    async with running_server() as (server, gate):
        yield Remote(InProcessTransport(server), server, gate)


@pytest.fixture
async def http() -> AsyncIterator[Remote]:
    """The child side behind ``create_http_app`` on uvicorn, reached over HTTP."""
    async with (
        running_server() as (server, gate),
        serve(create_http_app(server)) as url,
        http_transport(url) as transport,
    ):
        yield Remote(transport, server, gate)


@pytest.fixture
async def a2a() -> AsyncIterator[Remote]:
    """The child side behind the gateway's A2A root endpoint (``A2ARemoteAgentTransport``).

    The gateway is a helix peer (its card declares our extension): the transport
    follows it log sequence by log sequence, so the same plans and the same
    predicate hold as over our HTTP.
    """
    async with (
        running_server() as (server, gate),
        serve(create_http_app(server)) as url,
        A2ARemoteAgentTransport(url, timeout=5) as transport,
    ):
        yield Remote(transport, server, gate)


@pytest.fixture
async def a2a_proxied() -> AsyncIterator[Remote]:
    """As ``a2a``, with a :class:`TcpProxy` between the transport and uvicorn."""
    async with (
        running_server() as (server, gate),
        serve(create_http_app(server)) as url,
        tcp_proxy(url) as proxy,
        A2ARemoteAgentTransport(proxy.url, timeout=5) as transport,
    ):
        yield Remote(transport, server, gate, proxy=proxy)


@pytest.fixture
async def proxied() -> AsyncIterator[Remote]:
    """As ``http``, with a :class:`TcpProxy` between the transport and uvicorn."""
    async with (
        running_server() as (server, gate),
        serve(create_http_app(server)) as url,
        tcp_proxy(url) as proxy,
        http_transport(proxy.url) as transport,
    ):
        yield Remote(transport, server, gate, proxy=proxy)


# --- the parent and one run of it --------------------------------------------------------------


def parent_script(request: LLMRequest) -> ScriptStep:
    """Call the remote sub-agent once, then report its tool result verbatim."""
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if not results:
        call = ScriptedLLM.call(TOOL, {"topic": "tides"}, id=CALL_ID)
        return ScriptStep(text="asking the researcher", tool_calls=[call])
    return ScriptedLLM.reply(f"summary: {results[0].content}")


@dataclass(frozen=True)
class Run:
    """What a run of the parent left in its log, with its session id replaced by ``P``."""

    child_id: str
    status: str
    output: Any
    forwarded: list[tuple[int, str]]
    """``(child seq, chunk JSON without ts)`` of every ``child_chunk_forwarded``."""
    stream: list[tuple[int, str]]
    """``(sequence, chunk JSON without ts)`` of the parent's whole stream."""
    tool_error: str | None
    """The error of the sub-agent call's (last) ``tool_end``."""
    injected: list[Fault]
    paused_forwarded: int = 0
    """How many chunks were forwarded before the parent's ``interrupted`` (if any)."""


def _json(chunk: Chunk, parent_id: str) -> str:
    fields = msgspec.to_builtins(chunk)
    del fields["ts"]
    return msgspec.json.encode(fields).decode().replace(parent_id, "P")


async def run_parent(
    inner: RemoteAgentTransport,
    agent_type: str,
    plan: Sequence[Fault] = (),
    retries: int = 0,
    *,
    parent_id: str | None = None,
    store: MemoryEventStore | None = None,
    pause_at: Gate | None = None,
) -> Run:
    """Run a fresh parent (own store and executor) whose remote tool goes through ``plan``.

    With ``pause_at`` (the ``sleeper`` child's gate), the parent is interrupted
    once it holds the child's ``tool_start`` of ``slow``, then the gate opens and
    the parent is resumed: it re-enters the interrupted child (status, resume).
    """
    parent_id = parent_id or f"parent-{uuid.uuid4().hex}"
    store = store or MemoryEventStore()
    faulty = FaultyTransport(inner, plan)
    tool = create_remote_sub_agent_tool(
        "research",
        description="Research a topic remotely.",
        input_schema=Topic,
        output_schema=Report,
        transport=faulty,
        remote_agent_type=agent_type,
        stream_retries=retries,
        stream_retry_base=RETRY_BASE,
    )
    parent = define_agent("parent", tools=[tool], llm=ScriptedLLM(parent_script))
    with anyio.fail_after(EXAMPLE_LIMIT):
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "Summarise the tides", session_id=parent_id)
            if pause_at is not None:
                await pause_at.entered.wait()
                await forwarded_tool_start(store, parent_id, "slow")
                await handle.interrupt("pause")
                paused = await handle.result()
                assert paused.status == "interrupted"
                pause_at.open()
                handle = await executor.resume(parent_id)
            result = await handle.result()
    log = await store.read(parent_id)
    await store.close()
    stream = project_stream(log)
    tool_ends = [
        item.chunk
        for item in stream
        if isinstance(item.chunk, ToolEnd) and item.chunk.tool_name == TOOL
    ]
    assert len(tool_ends) == (1 if pause_at is None else 2)
    assert isinstance(result.output, str)
    return Run(
        child_id=f"{parent_id}-remote-{CALL_ID}",
        status=result.status,
        output=result.output.replace(parent_id, "P"),
        forwarded=[
            (e.child_seq, _json(e.chunk, parent_id))
            for e in log
            if isinstance(e, ChildChunkForwarded)
        ],
        stream=[(item.sequence, _json(item.chunk, parent_id)) for item in stream],
        tool_error=tool_ends[-1].error,
        injected=list(faulty.injected),
        paused_forwarded=paused_forwarded(log),
    )


def paused_forwarded(log: Sequence[Event]) -> int:
    count = 0
    for item in log:
        if isinstance(item, Interrupted):
            return count
        count += isinstance(item, ChildChunkForwarded)
    return 0


async def forwarded_tool_start(store: MemoryEventStore, parent_id: str, tool_name: str) -> None:
    """Wait until the parent's log holds the child's ``tool_start`` of ``tool_name``."""
    async with closing_iter(store.tail(parent_id, 0)) as events:  # a tail: stop it now
        async for item in events:
            if (
                isinstance(item, ChildChunkForwarded)
                and isinstance(item.chunk, ToolStart)
                and item.chunk.tool_name == tool_name
            ):
                return


# --- the budget predicate --------------------------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    ok: bool
    """True when every failure stays within the retry budget."""
    fired: list[Fault]
    """The faults ``FaultyTransport`` reports as injected, in order."""
    held: int
    """How many of the fault-free forwarded chunks the parent ends with."""
    error: str | None = None
    """The error a failed ``start`` gives up with."""
    dropped_after: int | None = None
    """The last child seq held when the stream budget ran out (``StreamDropError``)."""


def _injected_error(fault: Fault, op: str) -> str:
    if fault.error == "network":
        return str(TransportError(f"injected network failure in {op}"))
    return str(AgentServerError("INTERNAL_ERROR", f"injected server failure in {op}"))


class Plan:
    """A plan's faults by operation, consumed as ``FaultyTransport`` consumes them."""

    def __init__(self, plan: Sequence[Fault], retries: int) -> None:
        self.queues: defaultdict[str, deque[Fault]] = defaultdict(deque)
        for fault in plan:
            self.queues[fault.op].append(fault)
        self.retries = retries
        self.fired: list[Fault] = []

    def take(self, op: str) -> Fault | None:
        """The fault the next call of ``op`` takes, if any."""
        queue = self.queues[op]
        return queue.popleft() if queue else None

    def control(self, op: str) -> str | None:
        """One ``retrying`` round of a control call: None, or the error it gives up with."""
        attempt = 0
        while True:
            fault = self.take(op)
            if fault is not None:
                self.fired.append(fault)  # a control fault fires when taken: fail or delay
            if fault is None or fault.kind != "fail":
                return None
            if attempt >= self.retries:
                return _injected_error(fault, op)
            attempt += 1


def predict(
    plan: Sequence[Fault], retries: int, chunk_seqs: Sequence[int], child_fails: bool
) -> Prediction:
    """What the parent's call ends with under ``plan`` (see the module docstring)."""
    faults = Plan(plan, retries)
    fired = faults.fired
    control = faults.control
    failure = control("start")
    if failure is not None:
        return Prediction(ok=False, fired=fired, held=0, error=failure)
    n = len(chunk_seqs)
    held = drops = 0
    while True:
        before = held
        fault = faults.take("stream")
        length = n - held + 1  # the chunks after the held seq, then end/error
        dropped = False
        if fault is not None and fault.kind == "fail":
            fired.append(fault)
            dropped = True
        elif fault is not None and fault.after < length:
            fired.append(fault)
            if fault.kind == "drop":
                held += fault.after
                dropped = True
        if not dropped:
            held = n
            if not child_fails or control("status") is None:
                return Prediction(ok=True, fired=fired, held=n)
        else:
            # Status first after a drop: one call (no retry round) before the reconnect.
            status = faults.take("status")
            if status is not None:
                fired.append(status)
        # Drops in a row: a connection that delivered new chunks resets the count.
        drops = 1 if held > before else drops + 1
        if drops > retries:
            last = chunk_seqs[held - 1] if held else 0
            return Prediction(ok=False, fired=fired, held=held, dropped_after=last)


@dataclass(frozen=True)
class PausePrediction:
    fired: list[Fault]
    """The faults ``FaultyTransport`` reports as injected, in order."""
    halted: bool
    """True when the stopping parent saw the child acknowledge within budget."""
    failure: str | None
    """The error re-entering the child gives up with, if it does."""


def predict_pause(plan: Sequence[Fault], retries: int) -> PausePrediction:
    """Status and resume faults across an interrupted, then resumed parent (no stream faults).

    Stopping: the parent interrupts the child and follows its stream to the
    ``error`` (interrupted), then asks status: a round that fails 1 + R times is
    a drop of that ``forward_child`` call (its own count), the stream is opened
    again (it yields just the ``error``) and status asked again; the (R+1)-th drop
    gives up (the parent still records the child as interrupted, with the drop
    error). Re-entering after the parent's resume: one status round, then one
    resume round; either giving up fails the call with its error.
    """
    faults = Plan(plan, retries)
    drops = 0
    halted = True
    while faults.control("status") is not None:
        drops += 1
        if drops > retries:
            halted = False
            break
    failure = faults.control("status") or faults.control("resume")
    return PausePrediction(fired=faults.fired, halted=halted, failure=failure)


# --- fault plans -------------------------------------------------------------------------------

ERRORS = st.sampled_from(["server", "network"])
AFTER = st.integers(0, 25)  # a child's stream has 19 or 23 events: some faults fall past the end

FAULTS = st.one_of(
    st.builds(
        Fault, op=st.sampled_from(["start", "status", "resume"]), kind=st.just("fail"), error=ERRORS
    ),
    st.builds(
        Fault,
        op=st.sampled_from(["start", "status", "resume"]),
        kind=st.just("delay"),
        seconds=st.just(DELAY),
    ),
    st.builds(Fault, op=st.just("stream"), kind=st.just("fail"), error=ERRORS),
    st.builds(Fault, op=st.just("stream"), kind=st.just("drop"), after=AFTER),
    st.builds(Fault, op=st.just("stream"), kind=st.just("duplicate"), after=AFTER),
    st.builds(
        Fault, op=st.just("stream"), kind=st.just("delay"), after=AFTER, seconds=st.just(DELAY)
    ),
)
PLANS = st.lists(FAULTS, max_size=10)
CONTROL_FAULTS = st.one_of(
    st.builds(Fault, op=st.sampled_from(["status", "resume"]), kind=st.just("fail"), error=ERRORS),
    st.builds(
        Fault,
        op=st.sampled_from(["status", "resume"]),
        kind=st.just("delay"),
        seconds=st.just(DELAY),
    ),
)
CONTROL_PLANS = st.lists(CONTROL_FAULTS, max_size=10)
RETRIES = st.integers(0, MAX_RETRIES)
KINDS = st.sampled_from(["completes", "fails"])


async def check_plan(remote: Remote, kind: ChildKind, retries: int, plan: list[Fault]) -> None:
    agent_type = CHILD_TYPES[kind]
    baseline = await remote.baseline(agent_type)
    chunk_seqs = [seq for seq, _ in baseline.forwarded]
    prediction = predict(plan, retries, chunk_seqs, kind == "fails")
    event("within budget" if prediction.ok else "over budget")
    note(f"prediction: {prediction}")

    run = await run_parent(remote.transport, agent_type, plan, retries)

    assert run.injected == prediction.fired
    assert run.status == "completed"  # the parent goes on whatever its sub-agent did
    if prediction.ok:
        assert run.output == baseline.output
        assert run.forwarded == baseline.forwarded
        assert run.stream == baseline.stream
        return
    # Over budget: a prefix of the chunks (no gap, no duplicate), then the failure.
    assert run.forwarded == baseline.forwarded[: prediction.held]
    dropped = StreamDropError(run.child_id, prediction.dropped_after or 0)
    if prediction.dropped_after is not None and run.tool_error != str(
        RemoteAgentFailedError(run.child_id, str(dropped))
    ):
        # A status asked after a drop said the child had ended (whether it had
        # by then is timing): the call ends with that outcome instead.
        if kind == "completes":
            assert run.tool_error is None
            assert run.output == baseline.output
        else:
            assert run.tool_error == str(
                RemoteAgentFailedError(run.child_id, "LLM call failed: the model broke")
            )
        return
    if prediction.dropped_after is not None:
        remote_error = str(StreamDropError(run.child_id, prediction.dropped_after))
    else:
        assert prediction.error is not None
        remote_error = prediction.error
    assert run.tool_error == str(RemoteAgentFailedError(run.child_id, remote_error))
    assert run.tool_error.startswith(f"remote session {run.child_id!r} failed: ")
    assert run.output != baseline.output


async def check_pause(remote: Remote, retries: int, plan: list[Fault]) -> None:
    if "paused" not in remote.baselines:
        remote.gate.reset()
        remote.baselines["paused"] = await run_parent(
            remote.transport, "sleeper", pause_at=remote.gate
        )
    baseline = remote.baselines["paused"]
    assert baseline.paused_forwarded > 10
    prediction = predict_pause(plan, retries)
    event(f"halted: {prediction.halted}, re-entered: {prediction.failure is None}")
    note(f"prediction: {prediction}")

    remote.gate.reset()
    run = await run_parent(remote.transport, "sleeper", plan, retries, pause_at=remote.gate)

    assert run.injected == prediction.fired
    assert run.status == "completed"
    assert run.paused_forwarded == baseline.paused_forwarded
    if prediction.failure is not None:
        assert run.forwarded == baseline.forwarded[: baseline.paused_forwarded]
        assert run.tool_error == str(RemoteAgentFailedError(run.child_id, prediction.failure))
        return
    assert run.output == baseline.output
    assert run.forwarded == baseline.forwarded
    if prediction.halted:
        assert run.stream == baseline.stream
        return
    # The stop gave up on the child's acknowledgement: the paused segment ends with
    # the drop error instead of "interrupted"; all else is as fault-free.
    assert len(run.stream) == len(baseline.stream)
    differ = [i for i, (a, b) in enumerate(zip(run.stream, baseline.stream, strict=True)) if a != b]
    expected = str(
        StreamDropError("P-remote-c1", baseline.forwarded[baseline.paused_forwarded - 1][0])
    )
    kinds = [msgspec.json.decode(run.stream[i][1])["type"] for i in differ]
    assert kinds == ["subagent_end", "tool_end"]
    for i in differ:
        assert msgspec.json.decode(run.stream[i][1])["error"] == expected


FAULT_SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


# --- the properties ------------------------------------------------------------------------------


def test_the_baseline_child_streams_at_least_ten_chunks() -> None:
    """The property below needs a long child stream: check the scripts give one."""

    async def main() -> None:
        async with running_server() as (server, _):
            for kind, agent_type in CHILD_TYPES.items():
                run = await run_parent(InProcessTransport(server), agent_type)
                assert len(run.forwarded) >= 10, kind
                assert (run.tool_error is None) == (kind == "completes")

    anyio.run(main)


@settings(FAULT_SETTINGS, max_examples=150)
@given(kind=KINDS, retries=RETRIES, plan=PLANS)
@example(
    kind="completes",
    retries=2,
    plan=[
        Fault(op="start", kind="fail", error="network"),
        Fault(op="start", kind="fail", error="server"),
        Fault(op="stream", kind="drop", after=3),
        Fault(op="stream", kind="duplicate", after=0),
    ],
)
@example(
    kind="fails",
    retries=1,
    plan=[
        Fault(op="stream", kind="drop", after=5),
        Fault(op="status", kind="fail", error="server"),
        Fault(op="status", kind="fail", error="network"),
    ],
)
async def test_fault_schedules_in_process(
    inprocess: Remote, kind: ChildKind, retries: int, plan: list[Fault]
) -> None:
    await check_plan(inprocess, kind, retries, plan)


@pytest.mark.slow
@settings(FAULT_SETTINGS, max_examples=40)
@given(kind=KINDS, retries=RETRIES, plan=PLANS)
async def test_fault_schedules_over_http(
    http: Remote, kind: ChildKind, retries: int, plan: list[Fault]
) -> None:
    await check_plan(http, kind, retries, plan)


@pytest.mark.slow
@settings(FAULT_SETTINGS, max_examples=40)
@given(kind=KINDS, retries=RETRIES, plan=PLANS)
async def test_fault_schedules_over_a2a(
    a2a: Remote, kind: ChildKind, retries: int, plan: list[Fault]
) -> None:
    """The same plans through ``A2ARemoteAgentTransport`` to our own A2A endpoint."""
    await check_plan(a2a, kind, retries, plan)


@settings(FAULT_SETTINGS, max_examples=40)
@given(retries=RETRIES, plan=CONTROL_PLANS)
@example(
    retries=1,
    plan=[
        Fault(op="status", kind="fail", error="server"),
        Fault(op="status", kind="fail", error="network"),
        Fault(op="status", kind="delay", seconds=DELAY),
        Fault(op="resume", kind="fail", error="network"),
    ],
)
@example(retries=0, plan=[Fault(op="status", kind="fail", error="server")])
@example(
    retries=1,
    plan=[Fault(op="status", kind="fail", error="network")] * 4
    + [Fault(op="resume", kind="delay", seconds=DELAY)],
)
async def test_status_and_resume_faults_across_a_parent_interrupt_in_process(
    inprocess: Remote, retries: int, plan: list[Fault]
) -> None:
    await check_pause(inprocess, retries, plan)


@pytest.mark.slow
@settings(FAULT_SETTINGS, max_examples=10)
@given(retries=RETRIES, plan=CONTROL_PLANS)
async def test_status_and_resume_faults_across_a_parent_interrupt_over_http(
    http: Remote, retries: int, plan: list[Fault]
) -> None:
    await check_pause(http, retries, plan)


@pytest.mark.slow
@settings(FAULT_SETTINGS, max_examples=10)
@given(retries=RETRIES, plan=CONTROL_PLANS)
async def test_status_and_resume_faults_across_a_parent_interrupt_over_a2a(
    a2a: Remote, retries: int, plan: list[Fault]
) -> None:
    """Interrupt, resume and their faults through ``A2ARemoteAgentTransport``."""
    await check_pause(a2a, retries, plan)


async def test_drops_separated_by_progress_do_not_exhaust_the_retry_budget(
    inprocess: Remote,
) -> None:
    """Each reconnect made progress, so no two failures were consecutive: R=1 is enough.

    A long child behind a link that drops now and then must not fail just
    because the drops add up over the call.
    """
    plan = [Fault(op="stream", kind="drop", after=4), Fault(op="stream", kind="drop", after=4)]
    baseline = await inprocess.baseline("researcher")
    run = await run_parent(inprocess.transport, "researcher", plan, retries=1)
    assert run.injected == plan
    assert run.tool_error is None
    assert run.forwarded == baseline.forwarded


# --- a real network in the way: a TCP proxy cutting the SSE response --------------------------

SSE = b"GET /sse"


async def sse_size(remote: Remote) -> int:
    """Bytes of the fault-free run's SSE response (measured once, through the proxy)."""
    assert remote.proxy is not None
    if "researcher" not in remote.baselines:
        remote.proxy.disarm()
        measure = remote.proxy.cut_after(1 << 30, request_prefix=SSE)
        await remote.baseline("researcher")
        assert measure.used
        assert not measure.fired
        remote.sse_size = measure.delivered
    return remote.sse_size


@pytest.mark.slow
@settings(FAULT_SETTINGS, max_examples=25)
@given(cuts=st.lists(st.floats(0.0, 1.0), min_size=1, max_size=MAX_RETRIES))
async def test_sse_cut_mid_frame_by_a_proxy_keeps_the_stream_exact(
    proxied: Remote, cuts: list[float]
) -> None:
    """Each cut costs one reconnect at most, so R = the HTTP retries = 3 always suffice."""
    proxy = proxied.proxy
    assert proxy is not None
    size = await sse_size(proxied)
    baseline = await proxied.baseline("researcher")
    proxy.disarm()
    arms = [proxy.cut_after(int(share * size), request_prefix=SSE) for share in cuts]
    note(f"response of {size} bytes, cut after {[arm.nbytes for arm in arms]}")

    run = await run_parent(proxied.transport, "researcher", retries=MAX_RETRIES)

    event(f"{sum(arm.fired for arm in arms)} cut(s) fired")
    assert arms[0].used
    assert run.tool_error is None
    assert run.output == baseline.output
    assert run.forwarded == baseline.forwarded
    assert run.stream == baseline.stream


@pytest.mark.slow
async def test_cutting_every_connection_while_the_child_is_blocked(proxied: Remote) -> None:
    """The parent holds part of the stream, every connection dies, the child then finishes."""
    await check_cut_all(proxied)


@pytest.mark.slow
async def test_cutting_every_connection_while_the_child_is_blocked_over_a2a(
    a2a_proxied: Remote,
) -> None:
    """The same over A2A: the subscription and every other connection die; the transport
    subscribes again from the sequence it holds, and the parent ends exact."""
    await check_cut_all(a2a_proxied)


async def check_cut_all(proxied: Remote) -> None:
    """Cut every connection while the child blocks; the parent still ends exact."""
    proxy = proxied.proxy
    assert proxy is not None
    proxied.gate.open()
    baseline = await proxied.baseline("sleeper")
    proxied.gate.reset()
    parent_id = f"parent-{uuid.uuid4().hex}"
    store = MemoryEventStore()
    runs: list[Run] = []

    async def parent() -> None:
        runs.append(
            await run_parent(
                proxied.transport, "sleeper", retries=1, parent_id=parent_id, store=store
            )
        )

    with anyio.fail_after(EXAMPLE_LIMIT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(parent)
            await proxied.gate.entered.wait()
            await forwarded_tool_start(store, parent_id, "slow")
            connections = proxy.connections
            assert proxy.cut_all() >= 1
            proxied.gate.open()
    [run] = runs
    assert proxy.connections > connections  # it reconnected
    assert run.tool_error is None
    assert run.output == baseline.output
    assert run.forwarded == baseline.forwarded
    assert run.stream == baseline.stream
