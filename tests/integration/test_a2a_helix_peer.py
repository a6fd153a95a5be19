"""helix -> A2A -> helix: a parent here, its child behind another gateway's A2A endpoint.

The child's gateway declares our A2A extension, so the transport follows its
log exactly (sequences and chunks in the events' metadata, replay from a
held sequence): the whole tree's stream holds every chunk once, in order,
across a pending input answered at the root, an interrupt and resume, and a
cut connection.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from a2a_kit import Gate, gateway
from hitl_app import ASK_ARGS, Out, Query, removed, root_agent
from hitl_checks import assert_answered_once, assert_every_chunk_once, tree_logs
from tcp_proxy import tcp_proxy

from helix_agents import AgentExecutor, EventStore
from helix_agents._aio import closing_iter
from helix_agents.a2a import A2ARemoteAgentTransport, create_a2a_sub_agent_tool
from helix_agents.events import TextDelta
from helix_agents.log import project_state, project_stream
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

LIMIT = 30


@asynccontextmanager
async def parent_of(url: str, agent: str) -> AsyncIterator[tuple[AgentExecutor, Any, EventStore]]:
    """A root delegating to ``agent`` behind the gateway at ``url`` over A2A."""
    async with A2ARemoteAgentTransport(f"{url}/a2a/{agent}") as transport:
        tool = create_a2a_sub_agent_tool(
            "child",
            input_schema=Query,
            output_schema=Out,
            transport=transport,
            stream_retry_base=0.05,
        )
        root = root_agent(tool)
        store = MemoryEventStore()
        async with AgentExecutor(store, [root]) as executor:
            yield executor, root, store


async def test_a_helix_childs_inputs_are_answered_at_the_root_and_every_chunk_arrives_once() -> (
    None
):
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, remote), parent_of(url, "child") as (executor, root, store):
            handle = await executor.execute(root, "hi", session_id="h1")
            assert (await handle.result()).status == "paused"
            child = "h1-remote-call_0_0"
            entries = {e.kind: e for e in await handle.pending_inputs()}
            asked = await handle.submit_tool_result(
                entries["client_tool"].tool_call_id, {"color": "teal"}
            )
            approved = await handle.approve(entries["approval"].tool_call_id)
            result = await handle.result()
            logs = await tree_logs("h1", [store, remote])
    # The child's own entries, as its server recorded them (its id suffixed: it has a parent).
    assert entries["client_tool"].owner_session_id == child
    assert entries["client_tool"].path == ["h1", child]
    assert entries["client_tool"].arguments == ASK_ARGS
    assert entries["client_tool"].tool_call_id.startswith("call_0_0-")
    assert entries["approval"].tool_name == "rm"
    assert (asked.resumed, approved.resumed) == (False, True)  # the last answer resumes
    assert result.status == "completed"
    assert result.output == (
        'root got: subagent__child={"answer":"ask_user={\\"color\\":\\"teal\\"}; '
        'rm={\\"removed\\":\\"/tmp/scratch\\"}"}'
    )
    # The A2A context is the child's session, a child of the root over there too.
    assert project_state(logs[child]).parent_session_id == "h1"
    assert_every_chunk_once(logs, "h1")
    assert assert_answered_once(logs) == 2


async def test_an_interrupted_helix_child_is_resumed_over_a2a() -> None:
    gate = Gate()
    with anyio.fail_after(LIMIT):
        async with (
            gateway(gate) as (url, remote),
            parent_of(url, "gated_out") as (executor, root, store),
        ):
            handle = await executor.execute(root, "hi", session_id="h2")
            await gate.entered.wait()
            await handle.interrupt("hold on")
            assert (await handle.result()).status == "interrupted"
            child_state = project_state(await remote.read("h2-remote-call_0_0"))
            gate.release.set()
            resumed = await executor.resume("h2")
            result = await resumed.result()
            logs = await tree_logs("h2", [store, remote])
    assert child_state.status == "interrupted"  # A2A's cancel is a soft stop here
    assert result.status == "completed"
    assert result.output == 'root got: subagent__child={"answer":"opened"}'
    assert_every_chunk_once(logs, "h2")


async def test_a_cut_connection_to_a_helix_child_loses_and_repeats_nothing() -> None:
    gate = Gate()
    with anyio.fail_after(LIMIT):
        async with (
            gateway(gate) as (url, remote),
            tcp_proxy(url) as proxy,
            parent_of(proxy.url, "gated_out") as (executor, root, store),
        ):
            handle = await executor.execute(root, "hi", session_id="h3")
            child = "h3-remote-call_0_0"
            async with closing_iter(handle.stream()) as items:
                async for item in items:
                    if isinstance(item.chunk, TextDelta) and item.chunk.delta == "gate":
                        break  # the child's first words are in: its stream is live
            connections = proxy.connections
            assert proxy.cut_all() >= 1
            gate.release.set()
            result = await handle.result()
            logs = await tree_logs("h3", [store, remote])
    assert proxy.connections > connections
    assert result.status == "completed"
    words = [
        item.chunk.delta
        for item in project_stream(logs["h3"])
        if isinstance(item.chunk, TextDelta) and item.chunk.agent_id == child
    ]
    assert words == ["before ", "the ", "gate", "after ", "the ", "gate"]
    assert_every_chunk_once(logs, "h3")
