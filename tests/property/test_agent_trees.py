"""Generated agent trees: nesting, parallel calls and failures keep the root's stream exact.

Hypothesis draws a tree (at most 3 levels, at most 3 children per agent). Each agent
is scripted to call its children as sub-agents, spread over one or several steps
(several children in one step run concurrently), mixed with plain tool calls, some
of which raise. Some children fail: their model errors, or they run out of steps.
The root runs on a fresh ``MemoryEventStore``; then, on the root's stream:

(a) every sub-agent call, at any depth, reads ``tool_start(subagent__X)`` ->
    ``subagent_start`` -> that child's chunks (its own and its descendants') ->
    ``subagent_end`` -> ``tool_end``; a failed child has ``success`` false and the
    same error on ``tool_end``;
(b) every chunk of every session's own log appears exactly once, keyed by
    (agent_id, origin seq): a forwarded chunk keeps the seq it has in its own log;
(c) the root completes (its script carries on whatever the children do).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio
from hypothesis import given, settings, strategies as st
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    AgentResult,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.events import Chunk, ChunkBase, SubAgentEnd, SubAgentStart, ToolEnd, ToolStart
from helix_agents.log import project_state, project_stream
from helix_agents.messages import ToolCall
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.stores import MemoryEventStore

MAX_LEVELS = 3
MAX_FANOUT = 3
MAX_STEPS = 3
EXAMPLE_LIMIT = 20.0
"""Seconds one generated tree may take to run."""

ROOT = "root"

FailMode = Literal["llm", "max_steps"]
PlainCall = Literal["echo", "boom"]


class Query(BaseModel):
    query: str


class Answer(BaseModel):
    answer: str


@dataclass
class Node:
    """One agent of a generated tree and its script's shape."""

    name: str
    children: list[Node]
    steps: list[tuple[list[int], list[PlainCall]]]
    """Per step: which children it calls, and which plain tools."""
    fail: FailMode | None = None
    agent: AgentConfig | None = field(default=None, repr=False)

    def walk(self) -> list[Node]:
        return [self, *(node for child in self.children for node in child.walk())]

    @property
    def expected_error(self) -> str | None:
        if self.fail == "llm":
            return f"LLM call failed: {self.name} broke"
        if self.fail == "max_steps":
            return "Max steps exceeded"
        return None


@st.composite
def trees(draw: st.DrawFn, name: str = "n0", level: int = 1) -> Node:
    fanout = draw(st.integers(0, MAX_FANOUT)) if level < MAX_LEVELS else 0
    children = [draw(trees(f"{name}_{i}", level + 1)) for i in range(fanout)]
    step_count = draw(st.integers(1 if fanout else 0, MAX_STEPS))
    fail: FailMode | None = None
    if level > 1:
        fail = draw(st.sampled_from([None, None, "llm", "max_steps"]))
    if fail == "max_steps":
        step_count = max(step_count, 1)
    steps: list[tuple[list[int], list[PlainCall]]] = [([], []) for _ in range(step_count)]
    for index in range(fanout):
        steps[draw(st.integers(0, step_count - 1))][0].append(index)
    for called, plain in steps:
        plain.extend(draw(st.lists(st.sampled_from(["echo", "boom"]), max_size=2)))
        if not called and not plain:
            plain.append("echo")  # a step without calls would end the agent early
    return Node(name=name, children=children, steps=steps, fail=fail)


async def echo(value: Query, ctx: Any) -> str:
    await ctx.emit("echo", value.query)
    return value.query


def boom(value: Query, ctx: Any) -> str:
    raise RuntimeError(f"boom {value.query}")


TOOLS = [
    define_tool("echo", "Echo, with a custom chunk.", Query, echo),
    define_tool("boom", "Always fails.", Query, boom),
]


def build(node: Node, *, root: bool = True) -> AgentConfig:
    """The agent for ``node`` (and, recursively, its children)."""
    for child in node.children:
        build(child, root=False)
    turns: list[Any] = []
    for number, (called, plain) in enumerate(node.steps):
        calls: list[ToolCall] = [
            ScriptedLLM.call(f"subagent__{node.children[i].name}", {"query": node.name})
            for i in called
        ]
        calls += [
            ScriptedLLM.call(kind, {"query": f"{node.name}/{number}/{j}"})
            for j, kind in enumerate(plain)
        ]
        turns.append(ScriptStep(text=f"{node.name} step {number}", tool_calls=calls))
    if node.fail == "llm":
        turns.append(ScriptedLLM.fail(f"{node.name} broke"))
    elif node.fail is None:
        turns.append(
            ScriptedLLM.reply("root done") if root else ScriptedLLM.finish({"answer": node.name})
        )
    node.agent = define_agent(
        node.name,
        output_schema=None if root else Answer,
        tools=[*TOOLS, *(create_sub_agent_tool(c.agent, Query) for c in node.children if c.agent)],
        max_steps=len(node.steps) if node.fail == "max_steps" else len(node.steps) + 1,
        llm=ScriptedLLM(turns),
    )
    return node.agent


async def run_tree(tree: Node) -> tuple[MemoryEventStore, AgentResult]:
    store = MemoryEventStore()
    agent = build(tree)
    with anyio.fail_after(EXAMPLE_LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "go", session_id=ROOT)
            return store, await handle.result()


def in_subtree(agent_id: str, session_id: str) -> bool:
    return agent_id == session_id or agent_id.startswith(f"{session_id}-sub-")


def positions(chunks: list[Chunk], kind: type[Any], **fields: Any) -> list[int]:
    """Indexes of the chunks of type ``kind`` whose attributes equal ``fields``."""
    return [
        i
        for i, chunk in enumerate(chunks)
        if isinstance(chunk, kind)
        and all(getattr(chunk, name) == value for name, value in fields.items())
    ]


async def check(tree: Node) -> None:
    store, result = await run_tree(tree)
    nodes = {node.name: node for node in tree.walk()}

    # (c) the root completes whatever its children do.
    assert result.status == "completed", result
    assert result.output == "root done"

    # Every node ran exactly once, in its own session, and ended as scripted.
    session_of = {tree.name: ROOT}
    logs = {}
    queue = [ROOT]
    while queue:
        session_id = queue.pop(0)
        logs[session_id] = await store.read(session_id)
        for ref in project_state(logs[session_id]).sub_sessions.values():
            assert ref.agent_type not in session_of, f"{ref.agent_type} ran twice"
            session_of[ref.agent_type] = ref.sub_session_id
            node = nodes[ref.agent_type]
            expected = "completed" if node.fail is None else "failed"
            assert (ref.status, ref.error) == (expected, node.expected_error)
            queue.append(ref.sub_session_id)
    assert set(session_of) == set(nodes)
    assert await store.list_sessions() == sorted(session_of.values())
    for name, session_id in session_of.items():
        state = project_state(logs[session_id])
        assert state.status == ("completed" if nodes[name].fail is None else "failed")
        assert state.error == nodes[name].expected_error

    chunks = [item.chunk for item in project_stream(logs[ROOT])]

    # (b) each session's own chunks appear on the root's stream exactly once.
    own: Counter[tuple[str, int]] = Counter()
    for session_id, log in logs.items():
        for event in log:
            if isinstance(event, ChunkBase):
                assert event.agent_id == session_id
                own[(event.agent_id, event.seq)] += 1
    assert Counter((chunk.agent_id, chunk.seq) for chunk in chunks) == own

    # (a) the order of every sub-agent call, at any depth.
    starts = positions(chunks, SubAgentStart)
    assert len(starts) == len(nodes) - 1
    for at in starts:
        start = chunks[at]
        assert isinstance(start, SubAgentStart)
        parent, child, call_id = start.agent_id, start.sub_agent_id, start.tool_call_id
        node = nodes[start.sub_agent_type]
        assert session_of[node.name] == child
        tool_starts = positions(chunks, ToolStart, agent_id=parent, tool_call_id=call_id)
        ends = positions(chunks, SubAgentEnd, agent_id=parent, sub_agent_id=child)
        tool_ends = positions(chunks, ToolEnd, agent_id=parent, tool_call_id=call_id)
        assert len(tool_starts) == len(ends) == len(tool_ends) == 1
        begin, end, tool_end_at = tool_starts[0], ends[0], tool_ends[0]
        assert begin < at < end < tool_end_at
        tool_start = chunks[begin]
        assert isinstance(tool_start, ToolStart)
        assert tool_start.tool_name == f"subagent__{node.name}"
        inside = [i for i, c in enumerate(chunks) if in_subtree(c.agent_id, child)]
        assert inside, f"{node.name} has no chunks"
        assert all(at < i < end for i in inside), (node.name, at, end, inside)
        sub_end, tool_end = chunks[end], chunks[tool_end_at]
        assert isinstance(sub_end, SubAgentEnd)
        assert isinstance(tool_end, ToolEnd)
        if node.fail is None:
            assert (sub_end.success, sub_end.error) == (True, None)
            assert sub_end.result == tool_end.result == {"answer": node.name}
            assert tool_end.error is None
        else:
            assert (sub_end.success, sub_end.error) == (False, node.expected_error)
            assert tool_end.error == node.expected_error

    # Plain tools: every tool_start has its tool_end, and failures are error results.
    balance: Counter[tuple[str, str]] = Counter()
    for chunk in chunks:
        if isinstance(chunk, ToolStart):
            balance[(chunk.agent_id, chunk.tool_call_id)] += 1
        elif isinstance(chunk, ToolEnd):
            balance[(chunk.agent_id, chunk.tool_call_id)] -= 1
            if chunk.tool_name == "boom":
                assert chunk.error is not None
                assert chunk.error.startswith("RuntimeError: boom ")
    assert +balance == Counter()
    assert -balance == Counter()


@settings(max_examples=25, deadline=None)
@given(trees())
def test_agent_trees_keep_the_root_stream_exact(tree: Node) -> None:
    anyio.run(check, tree)


def test_a_full_tree_keeps_the_root_stream_exact() -> None:
    """The largest shape, deterministically: 3 levels, 3 children each, mixed failures."""

    def node(name: str, level: int, fail: FailMode | None = None) -> Node:
        children = []
        if level < MAX_LEVELS:
            modes: list[FailMode | None] = [None, "llm", "max_steps"]
            children = [node(f"{name}_{i}", level + 1, modes[i]) for i in range(MAX_FANOUT)]
        steps: list[tuple[list[int], list[PlainCall]]] = (
            [([0, 1], ["echo", "boom"]), ([2], ["echo"])] if children else [([], ["echo"])]
        )
        return Node(name=name, children=children, steps=steps, fail=fail)

    anyio.run(check, node("n0", 1))
