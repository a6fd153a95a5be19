"""Human in the loop through NATS, and mixed two remote hops deep (specs/hitl.md).

- **NATS**: the child is hosted by a ``NatsAgentHost`` on a real nats-server
  (its log in JetStream) and reached through ``NatsRemoteAgentTransport``.
- **Mixed, depth 3**: root (an executor in this process) -> HTTP server B
  (uvicorn) running ``child`` -> NATS host running ``grand``, which calls a
  client tool or passes an approval gate.

Every answer is given at the ROOT only; one answer resumes the whole tree,
and the root's stream holds every chunk of the tree once, in order.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from hitl_app import ASK_ARGS, RM_ARGS, relay, remote_tool, removed, root_agent, worker
from hitl_checks import (
    assert_answered_once,
    assert_entry,
    assert_every_chunk_once,
    tree_logs,
    until,
)
from nats_server import NatsServer
from servers import serve

from helix_agents import AgentConfig, AgentExecutor, EventStore
from helix_agents.events import InputRequired
from helix_agents.log import project_state, project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.fleet.host import NatsAgentHost
from helix_agents.server.fleet.runtime import NatsRuntime
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 40


@asynccontextmanager
async def nats_host(
    server: NatsServer, agents: Sequence[AgentConfig]
) -> AsyncIterator[tuple[NatsRemoteAgentTransport, EventStore]]:
    """A ``NatsAgentHost`` running ``agents`` on a fresh JetStream stream; (a client, its store)."""
    stream = fresh_stream_name()
    host_store = await JetStreamEventStore.connect(server.url, stream=stream)
    client_store = await JetStreamEventStore.connect(server.url, stream=stream)
    host_nc = await nats.connect(server.url)
    client_nc = await nats.connect(server.url)
    try:
        async with NatsAgentHost(AgentServer(agents, host_store, runtime=NatsRuntime(host_nc))):
            yield (
                NatsRemoteAgentTransport(
                    client_nc, client_store, timeout=5, max_retries=2, retry_base_delay=0.05
                ),
                client_store,
            )
    finally:
        await client_nc.close()
        await host_nc.close()
        await client_store.close()
        await host_store.close()


def _tool_results(log: list[object]) -> dict[str, ToolResultMessage]:
    state = project_state(log)  # type: ignore[arg-type]
    return {m.tool_name: m for m in state.messages if isinstance(m, ToolResultMessage)}


async def _run_tree(
    root: AgentConfig, session_id: str, stores: Sequence[EventStore], owner: str, answer: str
) -> tuple[str, dict[str, list[object]]]:
    """Run ``root`` to its pause, check the one entry, answer it at the root; (output, logs)."""
    store = stores[0]
    async with AgentExecutor(store, [root]) as executor:
        handle = await executor.execute(root, "hi", session_id=session_id)
        assert (await handle.result()).status == "paused"
        status = await executor.service.get_status(session_id)
        assert status.awaiting_input
        (entry,) = status.pending_inputs
        logs = await tree_logs(session_id, stores)
        path = [session_id]
        while path[-1] != owner:
            path.append(next(c for c in logs if c.startswith(path[-1] + "-remote-")))
        kind = "client_tool" if answer == "tool" else "approval"
        assert_entry(
            entry,
            kind=kind,
            tool_name="ask_user" if kind == "client_tool" else "rm",
            arguments=ASK_ARGS if kind == "client_tool" else RM_ARGS,
            owner=owner,
            path=path,
            logs=logs,
        )
        # Every ancestor holds the route to the entry, and is paused on it.
        for ancestor in path[:-1]:
            state = project_state(logs[ancestor])
            assert state.status == "paused", ancestor
            assert state.client_tool_ownership[entry.tool_call_id].owner_session_id == owner
        if answer == "tool":
            response = await handle.submit_tool_result(entry.tool_call_id, {"color": "teal"})
        elif answer == "approve":
            response = await handle.approve(entry.tool_call_id)
        else:
            response = await handle.deny(entry.tool_call_id, "ask me tomorrow")
        assert response.resumed
        await until(store, session_id, lambda state: state.is_terminal)
        result = await handle.result()
    assert result.status == "completed", result.error
    logs = await tree_logs(session_id, stores)
    assert_every_chunk_once(logs, session_id)  # type: ignore[arg-type]
    assert assert_answered_once(logs) == 1  # type: ignore[arg-type]
    waits = [
        item.chunk.agent_id
        for item in project_stream(logs[session_id])
        if isinstance(item.chunk, InputRequired)
    ]
    assert waits == [*reversed(path)]  # the owner's notice first, then each ancestor's
    return str(result.output), logs  # type: ignore[return-value]


def _check_answer(answer: str, output: str, owner_log: list[object]) -> None:
    results = _tool_results(owner_log)
    if answer == "tool":
        assert "teal" in output  # through every level's result
        assert results["ask_user"].content == '{"color":"teal"}'
    elif answer == "approve":
        assert removed == [RM_ARGS["question"]]
        assert not results["rm"].is_error
    else:
        assert removed == []
        assert results["rm"].is_error
        assert "denied by a person: ask me tomorrow" in results["rm"].content
        assert "denied by a person: ask me tomorrow" in output  # the LLM saw it


ANSWERS = [
    pytest.param("tool", id="client-tool"),
    pytest.param("approve", id="approve"),
    pytest.param("deny", id="deny"),
]


def _tools(answer: str) -> tuple[str, ...]:
    return ("ask_user",) if answer == "tool" else ("rm",)


@pytest.mark.parametrize("answer", ANSWERS)
async def test_a_child_on_a_nats_host_is_answered_at_the_root(
    nats_server: NatsServer, answer: str
) -> None:
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with nats_host(nats_server, [worker("child", _tools(answer))]) as (transport, remote):
            root = root_agent(remote_tool("child", transport))
            session_id = f"n-{answer}"
            owner = f"{session_id}-remote-call_0_0"
            output, logs = await _run_tree(
                root, session_id, [MemoryEventStore(), remote], owner, answer
            )
    _check_answer(answer, output, logs[owner])
    # The host recorded where the child belongs in the tree.
    assert project_state(logs[owner]).parent_session_id == session_id  # type: ignore[arg-type]


@pytest.mark.parametrize("answer", ANSWERS)
async def test_root_to_http_server_to_nats_host_three_deep(
    nats_server: NatsServer, answer: str
) -> None:
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with nats_host(nats_server, [worker("grand", _tools(answer))]) as (to_grand, c_store):
            b_store = MemoryEventStore()
            child = relay("child", remote_tool("grand", to_grand))
            async with (
                serve(create_http_app(AgentServer([child], b_store))) as b_url,
                HttpRemoteAgentTransport(b_url, max_retries=2, retry_base_delay=0.05) as to_b,
            ):
                root = root_agent(remote_tool("child", to_b))
                session_id = f"m-{answer}"
                owner = f"{session_id}-remote-call_0_0-remote-call_0_0"
                output, logs = await _run_tree(
                    root, session_id, [MemoryEventStore(), b_store, c_store], owner, answer
                )
    _check_answer(answer, output, logs[owner])
    assert output.startswith("root got: subagent__child=")
    assert "relay(subagent__grand=" in output


async def test_a_500_kb_client_tool_result_on_a_nats_host_completes_the_run(
    nats_server: NatsServer,
) -> None:
    """Issue 25.10: the answer was accepted, then its batch (over 1 MiB) failed the run."""
    large = "t" * 500_000
    async with nats_host(nats_server, [worker("asker")]) as (transport, store):
        with anyio.fail_after(LIMIT):
            await transport.start(
                RemoteStartRequest(session_id="large", agent_type="asker", message="hi")
            )
            await until(store, "large", lambda state: state.status == "paused")
            status = await transport.get_status("large")
            (pending,) = status.pending_client_tool_call_ids
            answered = await transport.submit_tool_result("large", pending, {"color": large})
            assert answered.resumed
            await until(store, "large", lambda state: state.is_terminal)
        state = project_state(await store.read("large"))
    assert state.status == "completed", state.error
    assert large in str(state.output)
