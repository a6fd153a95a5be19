"""A state machine over random human-in-the-loop trees, answers, repeats and restarts.

Each example draws a tree (at most 3 levels, at most 2 children per agent);
every agent calls, in its first turn, its own waits (a client tool, an
approval-gated tool) and its children at once, some of them **remote** (on an
``AgentServer`` with its own store, reached through an in-process transport
wrapped in a ``FaultyTransport`` whose planned faults drop and duplicate
stream events and fail starts, resumes, status calls and submissions), some
delegations behind an approval gate. The root runs on an executor; the
machine then answers the open entries at the root in a random order
(approving or denying, with repeats of earlier answers and conflicting
ones, and interrupts of the paused root, maybe answered, then resumed), and
between steps restarts the root's executor, the remote server or
both: a crash (the task group is cancelled, nothing is cleaned up) and a new
executor on the same store, which calls ``recover()``. A submission that
fails (an injected fault) is retried as a client would. After each step the
machine waits, on the root's run, until the tree is at rest again.

Invariants, after every step: no entry has two answers in any log; the
root's stream has strictly increasing sequences and no chunk twice. At the
end, every open entry is answered, and then the tree completes; every
entry the tree raised was answered exactly once in its owner's log (and
each agent raised as many as it called); the root's stream holds every
chunk of the tree once.
"""

from __future__ import annotations

import functools
import itertools
import zlib
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import ExitStack, asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
from anyio.from_thread import start_blocking_portal
from hitl_checks import (
    answers_in,
    assert_answered_once,
    assert_every_chunk_once,
    log_bytes,
    tree_logs,
)
from hypothesis import HealthCheck, event as tally, note, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    EventStore,
    InProcessTransport,
    PendingInput,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.errors import AgentServerError, TransportError
from helix_agents.events import (
    ApprovalGiven,
    ApprovalRequested,
    ClientToolPending,
    ClientToolResultSubmitted,
)
from helix_agents.log import project_state, project_stream
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from helix_agents.transports.faults import Fault, FaultyTransport

ROOT = "root"
STEP_LIMIT = 20.0
"""Seconds any one step (an answer and the tree's run up to its next pause) may take."""


class Query(BaseModel):
    query: str


class Out(BaseModel):
    answer: str


class Color(BaseModel):
    color: str


def _remove(value: Query, ctx: Any) -> dict[str, str]:
    return {"removed": value.query}


ASK = define_tool("ask", "Ask the user.", Query, "client", output_schema=Color)
RM = define_tool("rm", "Remove.", Query, _remove, requires_approval=True)


@dataclass
class Node:
    """One agent of a generated tree."""

    name: str
    waits: list[str]
    """Its own calls that wait for a person: ``ask`` (client tool), ``rm`` (approval)."""
    children: list[Node]
    remote: bool = False
    """Reached through the faulty transport, on the remote server."""
    gated: bool = False
    """Its delegation waits for an approval first."""
    agent: AgentConfig | None = field(default=None, repr=False)

    def walk(self) -> list[Node]:
        return [self, *(node for child in self.children for node in child.walk())]


@st.composite
def trees(draw: st.DrawFn, name: str = "n0", level: int = 1) -> Node:
    fanout = draw(st.integers(0, 2)) if level < 3 else 0
    children = [draw(trees(f"{name}_{i}", level + 1)) for i in range(fanout)]
    for child in children:
        child.remote = draw(st.booleans())
        child.gated = draw(st.integers(0, 3)) == 0
    waits = draw(st.lists(st.sampled_from(["ask", "rm"]), max_size=2))
    return Node(name=name, waits=waits, children=children)


FAULTS = st.lists(
    st.one_of(
        st.builds(
            Fault,
            op=st.just("stream"),
            kind=st.sampled_from(["drop", "duplicate"]),
            after=st.integers(0, 6),
        ),
        st.builds(
            Fault,
            op=st.sampled_from(["submit", "status", "resume", "start"]),
            kind=st.just("fail"),
            error=st.sampled_from(["server", "network"]),
        ),
    ),
    max_size=4,
)


def _turn(request: LLMRequest) -> int:
    return sum(1 for message in request.messages if isinstance(message, AssistantMessage))


def build(node: Node, remote: Any, *, root: bool = True) -> AgentConfig:
    """The agent of ``node`` and, recursively, its children's (remote ones over ``remote``)."""
    tools: list[Any] = [ASK, RM]
    for child in node.children:
        agent = build(child, remote, root=False)
        if child.remote:
            tools.append(
                create_remote_sub_agent_tool(
                    child.name,
                    description="remote",
                    input_schema=Query,
                    output_schema=Out,
                    transport=remote,
                    remote_agent_type=child.name,
                    requires_approval=child.gated,
                    stream_retries=10,
                    stream_retry_base=0.01,
                )
            )
        else:
            tools.append(create_sub_agent_tool(agent, Query, requires_approval=child.gated))
    calls = [
        ScriptedLLM.call(kind, {"query": f"{node.name}/{i}"}) for i, kind in enumerate(node.waits)
    ]
    calls += [ScriptedLLM.call(f"subagent__{c.name}", {"query": node.name}) for c in node.children]

    def script(request: LLMRequest) -> ScriptStep:
        if _turn(request) == 0 and calls:
            return ScriptStep(text=f"{node.name} asks", tool_calls=calls)
        seen = sorted(
            f"{m.tool_name}:{m.content}"
            for m in request.messages
            if isinstance(m, ToolResultMessage)
        )
        text = f"{node.name} saw {len(seen)}"
        return ScriptStep(text=text) if root else ScriptedLLM.finish({"answer": text})

    node.agent = define_agent(
        node.name,
        tools=tools,
        output_schema=None if root else Out,
        llm=ScriptedLLM(script, chunk_words=2),
    )
    return node.agent


class Switch:
    """A ``RemoteAgentTransport`` to whichever remote server runs now (it is restarted)."""

    def __init__(self) -> None:
        self.target: InProcessTransport | None = None

    def __getattr__(self, name: str) -> Any:
        assert self.target is not None, "the remote server is down"
        return getattr(self.target, name)


@asynccontextmanager
async def _root_executor(store: EventStore, agent: AgentConfig) -> AsyncIterator[AgentExecutor]:
    async with AgentExecutor(store, [agent], stop_grace=2) as executor:
        await executor.recover()
        yield executor


async def _hosted(make: Callable[[], Any], *, task_status: Any) -> None:
    """Hold ``make()`` open until this task is cancelled (a crash: nothing is cleaned up)."""
    with anyio.CancelScope() as scope:
        async with make() as held:
            task_status.started((held, scope))
            await anyio.sleep_forever()


def _answer_of(entry: PendingInput) -> tuple[Any, ...]:
    """The one answer a person gives to ``entry`` (its repeats are identical)."""
    digest = zlib.crc32(entry.tool_call_id.encode())
    if entry.kind == "client_tool":
        return ("client_tool", {"color": f"c{digest % 97}"})
    return ("approval", digest % 3 != 0, f"reason {digest % 5}")


class HitlTrees(RuleBasedStateMachine):
    """A random tree, answered at the root in random orders across restarts."""

    def __init__(self) -> None:
        super().__init__()
        self._resources = ExitStack()
        self.portal = self._resources.enter_context(start_blocking_portal("asyncio"))
        self.store = MemoryEventStore()
        self.remote_store = MemoryEventStore()
        self.switch = Switch()
        self.answered: dict[str, tuple[Any, ...]] = {}
        self.tree: Node | None = None
        self.faulty: FaultyTransport | None = None
        self.hosts: dict[str, tuple[Any, Any, Any]] = {}

    def teardown(self) -> None:
        for name in list(self.hosts):
            self._crash(name)
        self._resources.close()

    # --- processes ----------------------------------------------------------------

    def _start(self, name: str) -> None:
        assert self.tree is not None
        assert self.tree.agent is not None
        if name == "root":
            agent = self.tree.agent

            def make() -> Any:
                return _root_executor(self.store, agent)
        else:
            agents = [node.agent for node in self.tree.walk() if node.remote]

            def make() -> Any:
                return AgentServer(agents, self.remote_store, executor=None, recover=True)

        future, (held, scope) = self.portal.start_task(_hosted, make)
        self.hosts[name] = (future, held, scope)
        if name == "remote":
            self.switch.target = InProcessTransport(held)

    def _crash(self, name: str) -> None:
        future, _, scope = self.hosts.pop(name)
        self.portal.call(scope.cancel)
        future.exception(timeout=STEP_LIMIT)  # a cancelled task: nothing to report

    @property
    def executor(self) -> AgentExecutor:
        return self.hosts["root"][1]  # type: ignore[no-any-return]

    def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        async def bounded() -> Any:
            with anyio.fail_after(STEP_LIMIT):
                return await fn(*args)

        return self.portal.call(bounded)

    async def _settle(self) -> None:
        """Wait until the root's run (if any) has ended: the tree is paused or finished.

        A root that is running is running here (``recover()`` took over a crashed run),
        so its run ending is the signal.
        """
        await self.executor.wait_idle(ROOT)
        status = (await self.executor.state(ROOT)).status
        assert status != "running", "the root's log says running, but nothing runs it"

    # --- rules --------------------------------------------------------------------------

    @initialize(tree=trees(), plan=FAULTS)
    def start_tree(self, tree: Node, plan: list[Fault]) -> None:
        self.faulty = FaultyTransport(self.switch, plan)  # type: ignore[arg-type]
        self.tree = tree
        build(tree, self.faulty)
        self._start("remote")
        self._start("root")
        assert tree.agent is not None
        self._call(functools.partial(self.executor.execute, tree.agent, "go", session_id=ROOT))
        self._call(self._settle)

    def _pending(self) -> list[PendingInput]:
        return self._call(self.executor.pending_inputs, ROOT)  # type: ignore[no-any-return]

    async def _submit(self, entry_id: str, answer: tuple[Any, ...]) -> Any:
        """Answer at the root; a failed hop (an injected fault) is retried, as a client would."""
        for _ in range(10):
            try:
                if answer[0] == "client_tool":
                    return await self.executor.submit_tool_result(ROOT, entry_id, answer[1])
                return await self.executor.submit_approval(ROOT, entry_id, answer[1], answer[2])
            except TransportError:
                continue
            except AgentServerError as exc:
                if exc.code != "INTERNAL_ERROR":
                    raise
        raise AssertionError(f"the answer to {entry_id} failed 10 times")

    @rule(pick=st.integers(0, 7))
    def answer_one(self, pick: int) -> None:
        pending = sorted(self._pending(), key=lambda entry: entry.tool_call_id)
        if not pending:
            return
        entry = pending[pick % len(pending)]
        note(f"answering {entry}")
        answer = _answer_of(entry)
        self._call(self._submit, entry.tool_call_id, answer)
        self.answered[entry.tool_call_id] = answer
        self._call(self._settle)

    @precondition(lambda self: bool(self.answered))
    @rule(pick=st.integers(0, 7))
    def repeat_an_answer(self, pick: int) -> None:
        entry_id = sorted(self.answered)[pick % len(self.answered)]
        note(f"repeating the answer to {entry_id}")
        before = self._logs_bytes()
        response = self._call(self._submit, entry_id, self.answered[entry_id])
        self._call(self._settle)
        # The tree is at rest (paused or done) and the answer is in: an identical repeat
        # changes nothing and resumes nothing (specs/hitl.md).
        assert (response.ok, response.resumed) == (True, False)
        assert self._logs_bytes() == before

    @precondition(lambda self: bool(self.answered))
    @rule(pick=st.integers(0, 7))
    def contradict_an_answer(self, pick: int) -> None:
        entry_id = sorted(self.answered)[pick % len(self.answered)]
        note(f"contradicting the answer to {entry_id}")
        answer = self.answered[entry_id]
        other = (
            ("client_tool", {"color": "other"})
            if answer[0] == "client_tool"
            else ("approval", not answer[1], answer[2])
        )
        before = self._logs_bytes()
        with pytest.raises(AgentServerError) as refused:
            self._call(self._submit, entry_id, other)
        assert refused.value.code == "ALREADY_ANSWERED", refused.value
        assert self._logs_bytes() == before

    @rule(answer_first=st.booleans(), pick=st.integers(0, 7))
    def interrupt_then_resume(self, answer_first: bool, pick: int) -> None:
        """A person stops the paused tree (maybe answers it meanwhile), then resumes it."""
        state = self._call(self.executor.state, ROOT)
        if state.is_terminal:
            return
        self._call(self.executor.service.interrupt, ROOT, "a break")
        assert self._call(self.executor.state, ROOT).status == "interrupted"
        pending = sorted(self._pending(), key=lambda entry: entry.tool_call_id)
        if answer_first and pending:
            entry = pending[pick % len(pending)]
            self.answered[entry.tool_call_id] = _answer_of(entry)
            self._call(self._submit, entry.tool_call_id, self.answered[entry.tool_call_id])
            assert self._call(self.executor.state, ROOT).status == "interrupted"
        self._call(self.executor.resume, ROOT)
        self._call(self._settle)

    @rule(which=st.sampled_from(["root", "remote", "both"]))
    def restart(self, which: str) -> None:
        names = ["root", "remote"] if which == "both" else [which]
        for name in names:
            self._crash(name)
        for name in reversed(names):
            self._start(name)
        self._call(self._settle)

    # --- invariants ------------------------------------------------------------------------

    def _logs(self) -> dict[str, list[Any]]:
        return self._call(tree_logs, ROOT, [self.store, self.remote_store])  # type: ignore[no-any-return]

    def _logs_bytes(self) -> Any:
        return self._call(log_bytes, [self.store, self.remote_store])

    @invariant()
    def no_entry_has_two_answers_and_the_stream_has_no_duplicate(self) -> None:
        if "root" not in self.hosts:
            return
        logs = self._logs()
        for log in logs.values():
            ids = Counter(
                e.tool_call_id
                for e in log
                if isinstance(e, ClientToolResultSubmitted | ApprovalGiven)
            )
            assert not [i for i, n in ids.items() if n > 1], ids
        stream = project_stream(logs[ROOT])
        sequences = [item.sequence for item in stream]
        assert all(a < b for a, b in itertools.pairwise(sequences))
        origins = Counter((item.chunk.session_id, item.chunk.seq) for item in stream)
        assert not [o for o, n in origins.items() if n > 1], origins

    def check_the_end(self) -> None:
        """Answer whatever is open until the tree completes; then the whole-tree checks."""
        for _ in range(60):
            state = self._call(self.executor.state, ROOT)
            if state.is_terminal:
                break
            pending = self._pending()
            assert pending, f"the root is {state.status} with nothing left to answer"
            entry = pending[0]
            self.answered[entry.tool_call_id] = _answer_of(entry)
            self._call(self._submit, entry.tool_call_id, self.answered[entry.tool_call_id])
            self._call(self._settle)
        assert state.status == "completed", (state.status, state.error)
        logs = self._logs()
        tally(f"entries: {min(len(self.answered), 6)}")
        tally(f"sessions: {len(logs)}")
        tally(f"remote: {sum(1 for n in self.tree.walk() if n.remote) if self.tree else 0}")
        tally(f"faults fired: {len(self.faulty.injected) if self.faulty else 0}")
        assert_every_chunk_once(logs, ROOT)
        assert assert_answered_once(logs) == len(self.answered)
        assert self.tree is not None
        nodes = {node.name: node for node in self.tree.walk()}
        for session_id, log in logs.items():
            state = project_state(log)
            assert state.status == "completed", (session_id, state.status, state.error)
            node = nodes[state.agent_type]
            raised = [e for e in log if isinstance(e, ClientToolPending | ApprovalRequested)]
            gates = sum(1 for child in node.children if child.gated)
            assert len(raised) == len(node.waits) + gates, (session_id, raised)
            for event in raised:
                assert len(answers_in(log, event.tool_call_id)) == 1


class HitlTreesToTheEnd(HitlTrees):
    """The machine, finishing every example by answering the rest (see ``check_the_end``)."""

    def teardown(self) -> None:
        try:
            if self.tree is not None and "root" in self.hosts:
                self.check_the_end()
        finally:
            super().teardown()


HitlTreesToTheEnd.TestCase.settings = settings(
    max_examples=100,
    stateful_step_count=10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestHitlTrees = HitlTreesToTheEnd.TestCase


async def test_a_parent_catching_up_past_an_old_notice_follows_its_running_child() -> None:
    """The machine's find: a stale ``input_required`` must not pause a parent for good.

    root -> remote ``n0_0`` -> two gated local children, the second asking the
    client. One failed status call (an injected 5xx, retried) lets ``n0_0``
    pause again before its resumed parent looks: the parent's re-open resumes
    it, it pauses once more, and the parent holds an older seq. Once the
    client answers, the parent catches up through that older notice while
    ``n0_0`` runs again; it must follow it to the end, not pause on the notice.
    """
    tree = Node(
        name="n0",
        waits=[],
        children=[
            Node(
                name="n0_0",
                waits=[],
                remote=True,
                children=[
                    Node(name="n0_0_0", waits=[], children=[], gated=True),
                    Node(name="n0_0_1", waits=["ask"], children=[], gated=True),
                ],
            )
        ],
    )
    store, remote_store, switch = MemoryEventStore(), MemoryEventStore(), Switch()
    build(tree, FaultyTransport(switch, [Fault(op="status", kind="fail")]))  # type: ignore[arg-type]
    assert tree.agent is not None
    with anyio.fail_after(STEP_LIMIT):
        remote = [node.agent for node in tree.walk() if node.remote and node.agent]
        async with AgentServer(remote, remote_store) as server:
            switch.target = InProcessTransport(server)
            async with AgentExecutor(store, [tree.agent]) as executor:
                await executor.execute(tree.agent, "go", session_id=ROOT)
                for _ in range(3):  # the two gates, then the client tool
                    await executor.wait_idle(ROOT)
                    pending = await executor.pending_inputs(ROOT)
                    assert pending, f"the root is {(await executor.state(ROOT)).status}, no entry"
                    entry = min(pending, key=lambda e: e.tool_call_id)
                    answer = _answer_of(entry)
                    if answer[0] == "client_tool":
                        await executor.submit_tool_result(ROOT, entry.tool_call_id, answer[1])
                    else:
                        await executor.submit_approval(ROOT, entry.tool_call_id, True)
                await executor.wait_idle(ROOT)
                state = await executor.state(ROOT)
                assert state.status == "completed", (state.status, state.error)
        logs = await tree_logs(ROOT, [store, remote_store])
    assert_every_chunk_once(logs, ROOT)
    assert assert_answered_once(logs) == 3
