"""One conformance suite for every ``RemoteAgentTransport``.

Each test takes the ``transport`` fixture, parametrised over :data:`TRANSPORT_KINDS`:

- ``inprocess``: an :class:`InProcessTransport` over a running :class:`AgentServer`;
- ``http``: an :class:`HttpRemoteAgentTransport` against ``create_http_app(AgentServer)``
  served by real uvicorn on a loopback port;
- ``nats``: a :class:`NatsRemoteAgentTransport` to a ``NatsAgentHost`` on nats-server;
- ``a2a``: an :class:`A2ARemoteAgentTransport` against the same gateway's A2A root
  endpoint (``/a2a``: every agent a skill), a helix peer followed through our extension.

A property a kind's protocol cannot carry is named in :data:`NOT_CARRIED` with the
reason (mirrored in specs/a2a.md, "What A2A cannot carry"), and its test says so
when it skips; nothing is skipped silently, and the table names only tests that exist.
a2a-sdk's reference server is no kind here: it serves a2a-sdk ``AgentExecutor``s,
not an ``AgentServer``'s agents, and the suite checks the host's own log; what any
A2A agent carries is tested against it in ``test_a2a_remote_child.py`` and
``tests/property/test_a2a_resume.py``, the fault plans in
``tests/property/test_transport_faults.py`` (``*_over_a2a``).

Both reach the same kind of :class:`Host`: an ``AgentServer`` on a fresh
``MemoryEventStore`` with two scripted agents, ``researcher`` (streams text, calls a
tool, finishes with typed output) and ``waiter`` (blocks in a tool until the test
opens its gate, for status, interrupt and abort). Tests drive the session only
through the transport and read the host's store to check what the log holds.

A new transport joins with one :class:`pytest.param` in :data:`TRANSPORT_KINDS` and
one connector in :data:`CONNECTORS`: an async context manager that exposes the
``AgentServer`` it is given and yields the client transport (for NATS: start
nats-server, run a ``NatsAgentHost`` over the server, yield the NATS transport).

Every test is bounded by ``anyio.fail_after``; nothing waits by sleeping (the
waiter's gate is an ``anyio.Event`` pair).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from hitl_checks import until
from pydantic import BaseModel
from servers import serve

from helix_agents import (
    AgentConfig,
    EventStore,
    InProcessTransport,
    RemoteAgentTransport,
    ToolContext,
    define_agent,
    define_tool,
)
from helix_agents.a2a import A2ARemoteAgentTransport
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ApprovalGiven,
    ClientToolResultSubmitted,
    RunStarted,
    SessionCreated,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import project_stream
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    TransportEvent,
)
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.fleet.host import NatsAgentHost
from helix_agents.server.fleet.runtime import NatsRuntime
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from helix_agents.transports.nats import NatsRemoteAgentTransport

LIMIT = 10.0
"""Seconds any one test may take."""

call = ScriptedLLM.call
finish = ScriptedLLM.finish


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


# --- the host: an AgentServer with two scripted agents ------------------------------------


class Gates:
    """Per-session gates of the ``waiter``'s tool: ``entered`` once it blocks, then ``open``."""

    def __init__(self) -> None:
        self._entered: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)
        self._opened: defaultdict[str, anyio.Event] = defaultdict(anyio.Event)

    def entered(self, session_id: str) -> anyio.Event:
        return self._entered[session_id]

    def open(self, session_id: str) -> None:
        self._opened[session_id].set()

    def open_all(self) -> None:
        for event in self._opened.values():
            event.set()

    async def wait(self, query: Query, ctx: ToolContext) -> dict[str, str]:
        self._entered[ctx.session_id].set()
        await self._opened[ctx.session_id].wait()
        return {"waited": query.query}


async def lookup(query: Query, ctx: ToolContext) -> dict[str, str]:
    return {"found": query.query.upper()}


RESEARCHER_TEXT = "let me look into the tides for you"
RESEARCHER_OUTPUT = {"answer": "TIDES"}


def researcher() -> AgentConfig:
    """Streams its text word by word, calls ``lookup``, then finishes with an ``Answer``."""
    return define_agent(
        "researcher",
        output_schema=Answer,
        tools=[define_tool("lookup", "Look a topic up.", Query, lookup)],
        llm=ScriptedLLM(
            [
                ScriptStep(text=RESEARCHER_TEXT, tool_calls=[call("lookup", {"query": "tides"})]),
                finish(RESEARCHER_OUTPUT, text="found it"),
            ],
            chunk_words=1,
        ),
    )


def chatter() -> AgentConfig:
    """Answers with every user message so far (its memory), as text."""

    def echo(request: LLMRequest) -> ScriptStep:
        said = [m.content for m in request.messages if isinstance(m, UserMessage)]
        return ScriptStep(text=" | ".join(said))

    return define_agent("chatter", llm=ScriptedLLM(echo, chunk_words=1))


def waiter(gates: Gates) -> AgentConfig:
    """Calls ``wait`` (blocks until its session's gate opens), then finishes."""
    return define_agent(
        "waiter",
        output_schema=Answer,
        tools=[define_tool("wait", "Wait for the gate.", Query, gates.wait)],
        llm=ScriptedLLM(
            [
                ScriptStep(text="waiting a while", tool_calls=[call("wait", {"query": "gate"})]),
                finish({"answer": "waited"}),
            ]
        ),
    )


class Color(BaseModel):
    color: str


def asker() -> AgentConfig:
    """Asks the client (a client tool with an output schema), then finishes with its answer."""
    ask = define_tool("ask_user", "Ask the user.", Query, "client", output_schema=Color)
    return define_agent(
        "asker",
        output_schema=Answer,
        tools=[ask],
        llm=ScriptedLLM([[call("ask_user", {"query": "colour?"})], finish({"answer": "asked"})]),
    )


def gated() -> AgentConfig:
    """Calls ``lookup`` behind an approval gate, then finishes."""
    gate = define_tool("lookup", "Look a topic up.", Query, lookup, requires_approval=True)
    return define_agent(
        "gated",
        output_schema=Answer,
        tools=[gate],
        llm=ScriptedLLM([[call("lookup", {"query": "tides"})], finish({"answer": "decided"})]),
    )


class Host:
    """The agent side every transport reaches: a running ``AgentServer`` and its store."""

    def __init__(self, store: EventStore, nats_url: str = "") -> None:
        self.store = store
        self.nats_url = nats_url
        self.gates = Gates()
        # A fleet's host runs on its store's connection.
        fleet = NatsRuntime(store.connection) if isinstance(store, JetStreamEventStore) else None
        self.server = AgentServer(
            [researcher(), waiter(self.gates), asker(), gated(), chatter()],
            self.store,
            runtime=fleet,
        )

    async def log(self, session_id: str) -> list[Any]:
        return list(await self.store.read(session_id))


@pytest.fixture
async def host(request: pytest.FixtureRequest) -> AsyncIterator[Host]:
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and callspec.params.get("transport") == "nats":
        # A fleet's store is the shared JetStream stream the transport reads too.
        nats_server = request.getfixturevalue("nats_server")
        store: EventStore = await JetStreamEventStore.connect(
            nats_server.url, stream=fresh_stream_name()
        )
        host = Host(store, nats_server.url)
    else:
        host = Host(MemoryEventStore())
    with anyio.CancelScope() as scope:
        async with host.server:
            try:
                yield host
            finally:
                # Runs still blocked (or interrupted mid-test) must not hold teardown.
                host.gates.open_all()
                scope.cancel()
    await host.store.close()


# --- the transports under test -----------------------------------------------------------

Connector = Callable[[Host], AbstractAsyncContextManager[RemoteAgentTransport]]


@asynccontextmanager
async def connect_inprocess(host: Host) -> AsyncIterator[RemoteAgentTransport]:
    yield InProcessTransport(host.server)


@asynccontextmanager
async def connect_http(host: Host) -> AsyncIterator[RemoteAgentTransport]:
    async with (
        serve(create_http_app(host.server)) as url,
        HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.01, timeout=5) as remote,
    ):
        yield remote


@asynccontextmanager
async def connect_nats(host: Host) -> AsyncIterator[RemoteAgentTransport]:
    assert isinstance(host.store, JetStreamEventStore)
    client_nc = await nats.connect(host.nats_url)
    client_store = await JetStreamEventStore.connect(host.nats_url, stream=host.store.stream)
    try:
        async with NatsAgentHost(host.server):
            yield NatsRemoteAgentTransport(
                client_nc, client_store, timeout=5, max_retries=2, retry_base_delay=0.01
            )
    finally:
        await client_store.close()
        await client_nc.close()


@asynccontextmanager
async def connect_a2a(host: Host) -> AsyncIterator[RemoteAgentTransport]:
    """Our own A2A endpoint: the gateway's root (``/a2a``, every agent a skill)."""
    async with (
        serve(create_http_app(host.server)) as url,
        A2ARemoteAgentTransport(url, timeout=5) as remote,
    ):
        yield remote


CONNECTORS: dict[str, Connector] = {
    "inprocess": connect_inprocess,
    "http": connect_http,
    "nats": connect_nats,
    "a2a": connect_a2a,
}
"""How each transport kind reaches a running ``AgentServer``."""

TRANSPORT_KINDS = [
    pytest.param("inprocess", id="inprocess"),
    pytest.param("http", id="http", marks=pytest.mark.slow),
    pytest.param("nats", id="nats", marks=pytest.mark.nats),
    pytest.param("a2a", id="a2a", marks=pytest.mark.slow),
]
"""The transports every conformance test runs against."""


NOT_CARRIED: dict[str, dict[str, str]] = {
    "inprocess": {},
    "http": {},
    "nats": {},
    # Our own A2A endpoint declares our extension: run ids, step counts, the end of a
    # run (state, reasons, abort), repeated starts and answers after the end are all
    # carried (specs/a2a.md), so every property holds.
    "a2a": {},
}
"""Per kind: the conformance tests (by name) whose property its protocol cannot carry,
and why. Such a test skips, saying so; see :func:`test_the_table_names_only_tests_here`."""


@pytest.fixture(params=TRANSPORT_KINDS)
async def transport(
    request: pytest.FixtureRequest, host: Host
) -> AsyncIterator[RemoteAgentTransport]:
    reason = NOT_CARRIED[request.param].get(request.node.originalname)
    if reason is not None:
        pytest.skip(f"{request.param} cannot carry {request.node.originalname}: {reason}")
    async with CONNECTORS[request.param](host) as remote:
        yield remote


def test_the_table_names_only_tests_here() -> None:
    """Every kind has a row, and every test it names exists (a renamed test is no escape)."""
    assert set(NOT_CARRIED) == {param.values[0] for param in TRANSPORT_KINDS}
    here = {name for name in globals() if name.startswith("test_")}
    for kind, rows in NOT_CARRIED.items():
        assert set(rows) <= here, (kind, set(rows) - here)


# --- helpers -------------------------------------------------------------------------------


def start_request(
    session_id: str, agent_type: str = "researcher", **fields: Any
) -> RemoteStartRequest:
    fields.setdefault("message", "Research the tides")
    return RemoteStartRequest(session_id=session_id, agent_type=agent_type, **fields)


async def collect(
    transport: RemoteAgentTransport, session_id: str, from_sequence: int = 0
) -> list[TransportEvent]:
    """The whole stream from ``from_sequence``: its chunks, then ``end`` or ``error``."""
    return [event async for event in transport.stream(session_id, from_sequence)]


async def refused(call: Callable[[], Awaitable[Any]]) -> str:
    """Await ``call()``, which must raise ``AgentServerError``; its ``code``."""
    with pytest.raises(AgentServerError) as caught:
        await call()
    assert type(caught.value) is AgentServerError
    return caught.value.code


async def drain(events: AsyncIterator[TransportEvent], into: list[TransportEvent]) -> None:
    async for event in events:
        into.append(event)


def chunks_of(events: list[TransportEvent]) -> list[ChunkEvent]:
    return [event for event in events if isinstance(event, ChunkEvent)]


async def blocked_waiter(transport: RemoteAgentTransport, host: Host, session_id: str) -> str:
    """Start a ``waiter`` and return its run id once its tool is blocked."""
    started = await transport.start(start_request(session_id, "waiter", message="Wait"))
    await host.gates.entered(session_id).wait()
    return started.run_id


# --- start ---------------------------------------------------------------------------------


async def test_start_returns_the_session_stream_and_run_ids(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        started = await transport.start(start_request("ids-1"))
        events = await collect(transport, "ids-1")
        status = await transport.get_status("ids-1")
    assert started.session_id == "ids-1"
    assert started.stream_id == "ids-1"
    assert started.run_id.startswith("run-")
    assert status.run_id == started.run_id
    log = await host.log("ids-1")
    assert isinstance(log[0], SessionCreated)
    assert log[0].run_id == started.run_id
    assert events[-1] == EndEvent(output=RESEARCHER_OUTPUT, state={})


async def test_start_is_idempotent_for_the_same_request(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        first = await transport.start(start_request("idem-1", "waiter", message="Wait"))
        await host.gates.entered("idem-1").wait()
        again = await transport.start(start_request("idem-1", "waiter", message="Wait"))
    assert again == first
    log = await host.log("idem-1")
    assert sum(isinstance(event, SessionCreated) for event in log) == 1


async def test_concurrent_identical_starts_create_one_session(
    transport: RemoteAgentTransport, host: Host
) -> None:
    # The session is held running (the waiter blocks) until every start is
    # answered: a start arriving after the end is ALREADY_COMPLETED, and how
    # fast a transport delivers ten requests must not decide the outcome.
    responses: list[Any] = []

    async def start() -> None:
        responses.append(await transport.start(start_request("idem-10", "waiter", message="Wait")))

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(start)
        host.gates.open("idem-10")
        events = await collect(transport, "idem-10")
    assert len(responses) == 10
    assert {response.run_id for response in responses} == {responses[0].run_id}
    assert {(r.session_id, r.stream_id) for r in responses} == {("idem-10", "idem-10")}
    log = await host.log("idem-10")
    assert sum(isinstance(event, SessionCreated) for event in log) == 1
    assert log[0].run_id == responses[0].run_id
    assert events[-1] == EndEvent(output={"answer": "waited"}, state={})


async def test_start_of_an_existing_id_with_another_request_is_already_running(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await blocked_waiter(transport, host, "taken-1")
        before = await host.log("taken-1")
        other_type = await refused(
            lambda: transport.start(start_request("taken-1", "researcher", message="Wait"))
        )
        other_message = await refused(
            lambda: transport.start(start_request("taken-1", "waiter", message="Something else"))
        )
        after = await host.log("taken-1")
    assert (other_type, other_message) == ("ALREADY_RUNNING", "ALREADY_RUNNING")
    assert after[: len(before)] == before
    assert sum(isinstance(event, SessionCreated) for event in after) == 1


async def test_start_of_a_completed_session_is_already_completed(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await transport.start(start_request("done-1"))
        await collect(transport, "done-1")
        code = await refused(lambda: transport.start(start_request("done-1")))
    assert code == "ALREADY_COMPLETED"


async def test_start_of_an_unknown_agent_type_is_not_found(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        code = await refused(lambda: transport.start(start_request("nobody-1", "no-such-agent")))
    assert code == "NOT_FOUND"
    assert await host.store.list_sessions() == []


# --- bad session ids -------------------------------------------------------------------------

BAD_IDS = [
    pytest.param("", id="empty"),
    pytest.param("x" * 257, id="too-long"),
    pytest.param("has space", id="space"),
    pytest.param("a/b", id="slash"),
    pytest.param("../etc/passwd", id="path"),
    pytest.param("a\nb", id="newline"),
    pytest.param("a*b", id="nats-wildcard"),
    pytest.param("a>b", id="nats-tail"),
    pytest.param("id?x=1&y#z", id="url-meta"),
    pytest.param("caf\u00e9", id="non-ascii"),
]


@pytest.mark.parametrize("bad_id", BAD_IDS)
async def test_invalid_session_ids_are_invalid_request_and_touch_nothing(
    transport: RemoteAgentTransport, host: Host, bad_id: str
) -> None:
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "start": lambda: transport.start(start_request(bad_id)),
        "resume": lambda: transport.resume(RemoteResumeRequest(session_id=bad_id)),
        "stream": lambda: collect(transport, bad_id),
        "status": lambda: transport.get_status(bad_id),
        "interrupt": lambda: transport.interrupt(bad_id, "why"),
        "abort": lambda: transport.abort(bad_id, "why"),
        "submit": lambda: transport.submit_tool_result(bad_id, "call-1", {"ok": True}),
        "approve": lambda: transport.submit_approval(bad_id, "call-1", True),
    }
    with anyio.fail_after(LIMIT):
        codes = {name: await refused(fn) for name, fn in calls.items()}
    assert codes == dict.fromkeys(calls, "INVALID_REQUEST")
    assert await host.store.list_sessions() == []


async def test_an_invalid_session_id_wins_over_an_unknown_agent_type(
    transport: RemoteAgentTransport, host: Host
) -> None:
    """Bad input is refused as such before anything is looked up (specs/http.md)."""
    with anyio.fail_after(LIMIT):
        code = await refused(lambda: transport.start(start_request("bad id", "no-such-agent")))
    assert code == "INVALID_REQUEST"


@pytest.mark.parametrize("field", ["parent_session_id", "root_session_id"])
async def test_an_invalid_parent_or_root_id_is_invalid_request_and_touches_nothing(
    transport: RemoteAgentTransport, host: Host, field: str
) -> None:
    with anyio.fail_after(LIMIT):
        code = await refused(
            lambda: transport.start(start_request("child-1", **{field: "not a session/id"}))
        )
    assert code == "INVALID_REQUEST"
    assert await host.store.list_sessions() == []


# --- stream ------------------------------------------------------------------------------------


async def test_stream_from_every_cut_point_is_the_rest_of_the_full_stream(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await transport.start(start_request("cut-1"))
        full = await collect(transport, "cut-1")
        log = await host.log("cut-1")
        last = log[-1].seq
        resumed = {k: await collect(transport, "cut-1", k) for k in range(last + 3)}

    chunks, end = chunks_of(full), full[-1]
    assert full == [*chunks, end]
    assert end == EndEvent(output=RESEARCHER_OUTPUT, state={})
    # The stream is the log's projection: ids are log seqs, strictly increasing.
    assert chunks == [ChunkEvent(chunk=i.chunk, sequence=i.sequence) for i in project_stream(log)]
    kinds = [type(event.chunk) for event in chunks]
    assert kinds.count(TextDelta) >= len(RESEARCHER_TEXT.split())
    assert ToolStart in kinds
    assert ToolEnd in kinds
    for k, events in resumed.items():
        assert events == [*(c for c in chunks if c.sequence > k), end], k


async def test_stream_from_every_cut_point_across_an_interrupt_and_resume(
    transport: RemoteAgentTransport, host: Host
) -> None:
    """A log with two runs: every cut point still yields the rest, then the last run's end."""
    with anyio.fail_after(LIMIT):
        await blocked_waiter(transport, host, "cut-2")
        await transport.interrupt("cut-2", "pause")
        first = await collect(transport, "cut-2")
        host.gates.open("cut-2")
        await transport.resume(RemoteResumeRequest(session_id="cut-2"))
        full = await collect(transport, "cut-2")
        log = await host.log("cut-2")
        resumed = {k: await collect(transport, "cut-2", k) for k in range(log[-1].seq + 1)}

    assert first[-1] == ErrorEvent(error="interrupted: pause", recoverable=True)
    chunks, end = chunks_of(full), full[-1]
    assert chunks_of(first) == chunks[: len(chunks_of(first))]
    assert end == EndEvent(output={"answer": "waited"}, state={})
    for k, events in resumed.items():
        assert events == [*(c for c in chunks if c.sequence > k), end], k


async def test_a_negative_from_sequence_is_invalid_request(
    transport: RemoteAgentTransport, host: Host
) -> None:
    """``fromSequence`` is a sequence (>= 0); HTTP refuses -1, so every transport must."""
    with anyio.fail_after(LIMIT):
        await transport.start(start_request("neg-1"))
        await collect(transport, "neg-1")
        code = await refused(lambda: collect(transport, "neg-1", -1))
    assert code == "INVALID_REQUEST"


async def test_stream_of_an_unknown_session_is_not_found(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        code = await refused(lambda: collect(transport, "no-such-session"))
    assert code == "NOT_FOUND"
    assert await host.store.list_sessions() == []


# --- status ------------------------------------------------------------------------------------


async def test_status_while_running_then_completed(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        run_id = await blocked_waiter(transport, host, "status-1")
        running = await transport.get_status("status-1")
        live: list[TransportEvent] = []
        async with anyio.create_task_group() as tg:
            # a stream opened while the run is blocked follows it live to its end
            tg.start_soon(drain, transport.stream("status-1"), live)
            host.gates.open("status-1")
        events = await collect(transport, "status-1")
        done = await transport.get_status("status-1")
        log = await host.log("status-1")

    assert running.session_id == running.stream_id == "status-1"
    assert running.run_id == run_id
    assert running.status == "running"
    assert running.is_executing is True
    assert running.step_count == 1
    assert running.output is None
    assert 0 < running.latest_sequence < log[-1].seq

    assert events[-1] == EndEvent(output={"answer": "waited"}, state={})
    assert live == events
    assert done.run_id == run_id
    assert done.status == "completed"
    assert done.latest_sequence == log[-1].seq
    assert done.step_count == 2
    assert done.output == {"answer": "waited"}
    assert done.error is None


async def test_status_is_not_executing_once_the_stream_has_ended(
    transport: RemoteAgentTransport, host: Host
) -> None:
    """After the stream's ``end``, the run is over: ``isExecuting`` must be false.

    A status that says ``completed`` and ``isExecuting: true`` at once tells a
    client a finished session still runs somewhere.
    """
    with anyio.fail_after(LIMIT):
        await transport.start(start_request("status-2"))
        events = await collect(transport, "status-2")
        status = await transport.get_status("status-2")
    assert isinstance(events[-1], EndEvent)
    assert (status.status, status.is_executing) == ("completed", False)


async def test_status_of_an_unknown_session_is_not_found(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        code = await refused(lambda: transport.get_status("no-such-session"))
    assert code == "NOT_FOUND"


# --- interrupt, resume, abort --------------------------------------------------------------------


async def test_interrupt_a_blocked_session_then_resume_it_to_completion(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        run_id = await blocked_waiter(transport, host, "pause-1")
        await transport.interrupt("pause-1", "pause")
        stopped = await collect(transport, "pause-1")
        interrupted = await transport.get_status("pause-1")
        host.gates.open("pause-1")
        resumed = await transport.resume(RemoteResumeRequest(session_id="pause-1"))
        rest = await collect(transport, "pause-1", interrupted.latest_sequence)
        done = await transport.get_status("pause-1")

    assert stopped[-1] == ErrorEvent(error="interrupted: pause", recoverable=True)
    assert interrupted.status == "interrupted"
    assert interrupted.run_id == run_id
    # the blocked tool call was closed on the stream: every tool_start has its tool_end
    tool_ends = [e.chunk for e in chunks_of(stopped) if isinstance(e.chunk, ToolEnd)]
    assert [(end.tool_name, end.error) for end in tool_ends] == [("wait", "interrupted")]

    assert (resumed.session_id, resumed.stream_id) == ("pause-1", "pause-1")
    assert resumed.run_id != run_id
    assert rest[-1] == EndEvent(output={"answer": "waited"}, state={})
    assert all(event.sequence > interrupted.latest_sequence for event in chunks_of(rest))
    assert done.status == "completed"
    assert done.run_id == resumed.run_id
    assert done.output == {"answer": "waited"}


async def test_resume_of_a_running_session_joins_it_but_a_new_message_is_already_running(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        run_id = await blocked_waiter(transport, host, "busy-1")
        joined = await transport.resume(RemoteResumeRequest(session_id="busy-1"))
        code = await refused(
            lambda: transport.resume(RemoteResumeRequest(session_id="busy-1", message="more"))
        )
    assert joined.run_id == run_id
    assert code == "ALREADY_RUNNING"


async def test_abort_fails_the_session_for_good(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await blocked_waiter(transport, host, "abort-1")
        await transport.abort("abort-1", "enough")
        events = await collect(transport, "abort-1")
        status = await transport.get_status("abort-1")
        codes = [
            await refused(lambda: transport.resume(RemoteResumeRequest(session_id="abort-1"))),
            await refused(lambda: transport.interrupt("abort-1")),
            await refused(lambda: transport.abort("abort-1")),
            await refused(
                lambda: transport.start(start_request("abort-1", "waiter", message="Wait"))
            ),
        ]
    end = events[-1]
    assert isinstance(end, ErrorEvent)
    assert end.recoverable is False
    assert "enough" in end.error
    assert status.status == "failed"
    assert status.output is None
    assert codes == ["ALREADY_COMPLETED"] * 4


@pytest.mark.parametrize("operation", ["resume", "interrupt", "abort"])
async def test_control_calls_on_an_unknown_session_are_not_found(
    transport: RemoteAgentTransport, host: Host, operation: str
) -> None:
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
        "resume": lambda: transport.resume(RemoteResumeRequest(session_id="no-such-session")),
        "interrupt": lambda: transport.interrupt("no-such-session"),
        "abort": lambda: transport.abort("no-such-session"),
    }
    with anyio.fail_after(LIMIT):
        code = await refused(calls[operation])
    assert code == "NOT_FOUND"
    assert await host.store.list_sessions() == []


# --- follow-up messages ---------------------------------------------------------------------------


def message(session_id: str, text: Any = "and then?", message_id: str | None = None) -> Any:
    return RemoteMessageRequest(session_id=session_id, message=text, message_id=message_id)


async def test_a_follow_up_is_a_new_turn_and_the_stream_goes_on_after_its_sequence(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        started = await transport.start(start_request("chat-1", "chatter", message="hello"))
        first = await collect(transport, "chat-1")
        latest = (await transport.get_status("chat-1")).latest_sequence
        ended = await collect(transport, "chat-1", latest)
        sent = await transport.send_message(message("chat-1"))
        second = await collect(transport, "chat-1", latest)
        status = await transport.get_status("chat-1")
        whole = await collect(transport, "chat-1")
    assert first[-1] == EndEvent(output="hello", state={})
    assert ended == [EndEvent(output="hello", state={})]  # a completed stream ends at its end
    assert sent.run_id != started.run_id
    assert sent.queued is False
    assert (status.run_id, status.status) == (sent.run_id, "completed")
    chunks = chunks_of(second)
    assert chunks
    assert all(event.sequence > latest for event in chunks)
    assert "".join(e.chunk.delta for e in chunks if isinstance(e.chunk, TextDelta)) == (
        "hello | and then?"
    )
    assert second[-1] == EndEvent(output="hello | and then?", state={})
    # From 0, the whole conversation's chunks, both turns, in order.
    assert chunks_of(whole) == [*chunks_of(first), *chunks]


async def test_a_follow_up_is_idempotent_per_message_id(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await transport.start(start_request("chat-2", "chatter", message="hello"))
        await collect(transport, "chat-2")
        sent = await transport.send_message(message("chat-2", message_id="m-1"))
        await collect(transport, "chat-2")  # to the end of the new turn
        before = await host.log("chat-2")
        again = await transport.send_message(message("chat-2", message_id="m-1"))
        other = await refused(lambda: transport.send_message(message("chat-2", "x", "m-1")))
        after = await host.log("chat-2")
    assert again.run_id == sent.run_id
    assert other == "INVALID_REQUEST"
    assert after == before
    assert [e.mode for e in before if isinstance(e, RunStarted)] == ["start", "continue"]


async def test_a_follow_up_to_a_running_session_is_queued_for_its_run(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        run_id = await blocked_waiter(transport, host, "chat-3")
        queued = await transport.send_message(message("chat-3", "hurry up"))
        host.gates.open("chat-3")
        events = await collect(transport, "chat-3")
    assert queued.queued is True
    assert queued.run_id == run_id
    assert events[-1] == EndEvent(output={"answer": "waited"}, state={})


async def test_bad_follow_ups_are_refused_and_change_nothing(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await blocked_waiter(transport, host, "chat-4")
        await transport.abort("chat-4", "enough")
        await collect(transport, "chat-4")
        before = await host.log("chat-4")
        codes = [
            await refused(lambda: transport.send_message(message("chat-4"))),
            await refused(lambda: transport.send_message(message("chat-4", ""))),
            await refused(lambda: transport.send_message(message("no-such-session"))),
        ]
        after = await host.log("chat-4")
    assert codes == ["SESSION_FAILED", "INVALID_REQUEST", "NOT_FOUND"]
    assert after == before


# --- client tool results -------------------------------------------------------------------------


async def test_submit_tool_result_without_a_pending_call_is_not_found(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        await blocked_waiter(transport, host, "submit-1")
        before = await host.log("submit-1")
        on_running = await refused(
            lambda: transport.submit_tool_result("submit-1", "call-none", {"ok": True})
        )
        on_unknown = await refused(
            lambda: transport.submit_tool_result("no-such-session", "call-none", {"ok": True})
        )
        after = await host.log("submit-1")
    assert (on_running, on_unknown) == ("NOT_FOUND", "NOT_FOUND")
    assert after == before


async def paused_entry(transport: RemoteAgentTransport, host: Host, session_id: str) -> Any:
    """Start ``asker`` or ``gated`` as ``session_id``; its one pending entry once it pauses."""
    agent_type = session_id.split("-")[0]
    await transport.start(start_request(session_id, agent_type, message="go"))
    await until(host.store, session_id, lambda state: state.status == "paused")
    status = await transport.get_status(session_id)
    assert (status.status, status.awaiting_input) == ("paused", True)
    (entry,) = status.pending_inputs
    assert entry.owner_session_id == session_id
    assert entry.path == [session_id]
    return entry


async def test_submit_tool_result_resumes_once_repeats_idempotently_and_refuses_changes(
    transport: RemoteAgentTransport, host: Host
) -> None:
    with anyio.fail_after(LIMIT):
        entry = await paused_entry(transport, host, "asker-1")
        assert (entry.kind, entry.tool_name) == ("client_tool", "ask_user")
        before = await host.log("asker-1")
        codes = [
            await refused(lambda: transport.submit_tool_result("asker-1", "no-such-call", {})),
            await refused(
                lambda: transport.submit_tool_result("no-such-session", entry.tool_call_id, {})
            ),
            await refused(lambda: transport.submit_approval("asker-1", entry.tool_call_id, True)),
            await refused(
                lambda: transport.submit_tool_result("asker-1", entry.tool_call_id, {"c": 1})
            ),
        ]
        assert codes == ["NOT_FOUND", "NOT_FOUND", "INVALID_REQUEST", "INVALID_REQUEST"]
        assert await host.log("asker-1") == before
        first = await transport.submit_tool_result("asker-1", entry.tool_call_id, {"color": "red"})
        events = await collect(transport, "asker-1")
        after = await host.log("asker-1")
        again = await transport.submit_tool_result("asker-1", entry.tool_call_id, {"color": "red"})
        changed = await refused(
            lambda: transport.submit_tool_result("asker-1", entry.tool_call_id, {"color": "blue"})
        )
        unknown = await refused(
            lambda: transport.submit_tool_result("asker-1", "no-such-call", {"color": "red"})
        )
        final = await host.log("asker-1")
    assert (first.ok, first.resumed) == (True, True)
    assert events[-1] == EndEvent(output={"answer": "asked"}, state={})
    assert (again.ok, again.resumed) == (True, False)
    assert (changed, unknown) == ("ALREADY_ANSWERED", "NOT_FOUND")
    assert final == after  # the repeat and the refusals changed nothing
    assert sum(isinstance(e, ClientToolResultSubmitted) for e in final) == 1


@pytest.mark.parametrize("approved", [True, False], ids=["approve", "deny"])
async def test_submit_approval_resumes_once_repeats_idempotently_and_refuses_changes(
    transport: RemoteAgentTransport, host: Host, approved: bool
) -> None:
    session_id = f"gated-{int(approved)}"
    with anyio.fail_after(LIMIT):
        entry = await paused_entry(transport, host, session_id)
        assert (entry.kind, entry.tool_name) == ("approval", "lookup")
        before = await host.log(session_id)
        codes = [
            await refused(lambda: transport.submit_approval(session_id, "no-such-call", True)),
            await refused(
                lambda: transport.submit_approval("no-such-session", entry.tool_call_id, True)
            ),
            await refused(lambda: transport.submit_tool_result(session_id, entry.tool_call_id)),
        ]
        assert codes == ["NOT_FOUND", "NOT_FOUND", "INVALID_REQUEST"]
        assert await host.log(session_id) == before
        first = await transport.submit_approval(session_id, entry.tool_call_id, approved, "why")
        events = await collect(transport, session_id)
        after = await host.log(session_id)
        again = await transport.submit_approval(session_id, entry.tool_call_id, approved, "why")
        changed = await refused(
            lambda: transport.submit_approval(session_id, entry.tool_call_id, not approved, "why")
        )
        other_reason = await refused(
            lambda: transport.submit_approval(session_id, entry.tool_call_id, approved, "else")
        )
        final = await host.log(session_id)
    assert (first.ok, first.resumed) == (True, True)
    assert events[-1] == EndEvent(output={"answer": "decided"}, state={})
    assert (again.ok, again.resumed) == (True, False)
    assert (changed, other_reason) == ("ALREADY_ANSWERED", "ALREADY_ANSWERED")
    assert final == after
    (decision,) = [e for e in final if isinstance(e, ApprovalGiven)]
    assert (decision.approved, decision.reason) == (approved, "why")
    (result,) = [e for e in final if isinstance(e, ToolEnd) and e.tool_name == "lookup"]
    if approved:
        assert result.error is None
        assert result.result == {"found": "TIDES"}
    else:
        assert result.error == "denied by a person: why"
