"""Any A2A agent as a remote child: a helix parent and a2a-sdk's reference server.

The peer (``a2a_peer_app.py``) is written with the SDK's own server classes,
served by uvicorn on loopback; the parent reaches it through
``create_a2a_sub_agent_tool`` / ``A2ARemoteAgentTransport``. Checked: the
child's output validated into the tool's schema (an output that misses it
named in the error; no schema: a text agent's text is the result), its artifacts forwarded
into the parent's log once and in order, deterministic ids (a retried start
sends nothing twice, even from a new transport), its ``input-required`` as a
pending input answered at the root with one call, a cut stream recovered by
subscribing again, interrupt and abort as cancel.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from a2a.types import Role
from a2a_peer_app import CHUNKS, FINDINGS, TEXT, TEXT_CHUNKS, Peer
from hitl_app import Out, Query
from pydantic import BaseModel
from servers import serve
from tcp_proxy import tcp_proxy

from helix_agents import AgentConfig, AgentExecutor, EventStore, define_agent
from helix_agents._aio import closing_iter
from helix_agents.a2a import A2ARemoteAgentTransport, create_a2a_sub_agent_tool
from helix_agents.bridges.a2a.wire import helix_metadata, part_value
from helix_agents.errors import AgentServerError
from helix_agents.events import SubSessionFinished, SubSessionStarted, TextDelta
from helix_agents.log import project_state, project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteMessageRequest, RemoteStartRequest
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

LIMIT = 30
QUERY = {"query": "why logs?"}


class Findings(BaseModel):
    findings: str
    sources: int


@asynccontextmanager
async def peer_server() -> AsyncIterator[tuple[Peer, str]]:
    """The reference peer on uvicorn: (its state, its URL)."""
    peer = Peer()
    async with serve(peer.app()) as url:
        peer.base = url
        yield peer, url


def lead(
    transport: A2ARemoteAgentTransport, output: type[BaseModel] | None = Findings
) -> AgentConfig:
    """A parent that delegates once to the A2A agent behind ``transport``, then says done."""
    tool = create_a2a_sub_agent_tool(
        "peer",
        input_schema=Query,
        output_schema=output,
        transport=transport,
        stream_retry_base=0.05,
    )
    return define_agent(
        "lead",
        tools=[tool],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__peer", {"query": "why logs?"})],
                ScriptedLLM.reply("done"),
            ]
        ),
    )


def _forwarded_text(log: list[Any], child: str) -> list[str]:
    return [
        item.chunk.delta
        for item in project_stream(log)
        if isinstance(item.chunk, TextDelta) and item.chunk.agent_id == child
    ]


def _tool_result(log: list[Any]) -> ToolResultMessage:
    state = project_state(log)
    (result,) = [m for m in state.messages if isinstance(m, ToolResultMessage)]
    return result


async def _run(agent: AgentConfig, session_id: str) -> tuple[EventStore, Any]:
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        handle = await executor.execute(agent, "go", session_id=session_id)
        result = await handle.result()
    return store, result


async def test_an_a2a_agent_is_a_remote_child_whose_output_is_validated() -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (peer, url), A2ARemoteAgentTransport(f"{url}/researcher") as t:
            store, result = await _run(lead(t), "p1")
            log = await store.read("p1")
    child = "p1-remote-call_0_0"
    assert result.status == "completed"
    tool_result = _tool_result(log)
    assert not tool_result.is_error
    assert json.loads(tool_result.content) == FINDINGS
    assert _forwarded_text(log, child) == [f"part {i} " for i in range(CHUNKS)]
    (started,) = [e for e in log if isinstance(e, SubSessionStarted)]
    assert started.remote is not None
    assert started.remote.transport == "A2ARemoteAgentTransport"
    assert started.remote.url == f"{url}/researcher"
    # The context is the child's session id, the message id derived from it: a
    # retried call reaches the same context and says the same thing.
    (message,) = peer.seen["researcher"]
    assert message.context_id == child
    assert message.message_id == f"{child}:start"
    assert message.role == Role.ROLE_USER
    assert message.parts[0].text == "why logs?"
    assert part_value(message.parts[1]) == {"query": "why logs?"}  # its card takes JSON
    linkage = helix_metadata(message.metadata)
    assert linkage["parentSessionId"] == "p1"
    assert linkage["ancestors"] == ["p1"]


async def test_an_output_that_fits_no_schema_is_a_tool_error() -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (_, url), A2ARemoteAgentTransport(f"{url}/wrong") as t:
            store, result = await _run(lead(t), "p2")
            log = await store.read("p2")
    assert result.status == "completed"
    tool_result = _tool_result(log)
    assert tool_result.is_error
    error = json.loads(tool_result.content)["error"]
    # What did not match, then what came back.
    assert "remote output does not match Findings: findings: Field required; " in error
    assert "sources: Field required" in error
    assert error.endswith('the child returned: {"nothing":"useful"}')


async def test_a_text_agent_without_an_output_schema_gives_its_text() -> None:
    """Most A2A agents answer with text: with no output_schema the call's result is it."""
    with anyio.fail_after(LIMIT):
        async with peer_server() as (_, url), A2ARemoteAgentTransport(f"{url}/texter") as t:
            store, result = await _run(lead(t, None), "p-text")
            log = await store.read("p-text")
    child = "p-text-remote-call_0_0"
    assert result.status == "completed"
    assert result.output == "done"
    tool_result = _tool_result(log)
    assert not tool_result.is_error
    assert tool_result.content == TEXT
    (finished,) = [e for e in log if isinstance(e, SubSessionFinished)]
    assert finished.status == "completed"
    assert finished.output == TEXT
    assert _forwarded_text(log, child) == TEXT_CHUNKS


async def test_a_data_output_without_an_output_schema_passes_unvalidated() -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (_, url), A2ARemoteAgentTransport(f"{url}/wrong") as t:
            store, result = await _run(lead(t, None), "p-data")
            log = await store.read("p-data")
    assert result.status == "completed"
    tool_result = _tool_result(log)
    assert not tool_result.is_error
    assert json.loads(tool_result.content) == {"nothing": "useful"}


async def test_a_text_that_misses_the_schema_names_what_came_back() -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (_, url), A2ARemoteAgentTransport(f"{url}/texter") as t:
            store, result = await _run(lead(t, Findings), "p-miss")
            log = await store.read("p-miss")
    assert result.status == "completed"  # the parent's model saw the error and went on
    tool_result = _tool_result(log)
    assert tool_result.is_error
    error = json.loads(tool_result.content)["error"]
    assert error.startswith("remote session 'p-miss-remote-call_0_0' failed: ")
    assert "remote output does not match Findings: " in error
    assert "Input should be a valid dictionary or instance of Findings" in error
    assert f"the child returned: {TEXT!r}" in error
    assert "leave output_schema out" in error
    (finished,) = [e for e in log if isinstance(e, SubSessionFinished)]
    assert finished.status == "failed"
    assert finished.error == error


async def test_a_message_reply_is_a_child_that_ended() -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (_, url), A2ARemoteAgentTransport(f"{url}/replier") as t:
            store, result = await _run(lead(t, Out), "p3")
            log = await store.read("p3")
    assert result.status == "completed"
    assert json.loads(_tool_result(log).content) == {"answer": "quick"}
    assert _forwarded_text(log, "p3-remote-call_0_0") == ["a quick reply"]


async def test_input_required_is_a_pending_input_answered_at_the_root_with_one_call() -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (peer, url), A2ARemoteAgentTransport(f"{url}/asker") as t:
            agent = lead(t, Out)
            store = MemoryEventStore()
            async with AgentExecutor(store, [agent]) as executor:
                handle = await executor.execute(agent, "go", session_id="p4")
                assert (await handle.result()).status == "paused"
                (entry,) = await handle.pending_inputs()
                response = await handle.submit_tool_result(entry.tool_call_id, "teal")
                result = await handle.result()  # the resumed run's end
            log = await store.read("p4")
    child = "p4-remote-call_0_0"
    assert entry.kind == "client_tool"
    assert entry.tool_name == "a2a_input"
    assert entry.tool_call_id == f"{child}.input1"
    assert entry.owner_session_id == child
    assert entry.path == ["p4", child]
    assert entry.arguments["message"] == "What colour?"
    assert response.resumed
    assert result.status == "completed"
    assert json.loads(_tool_result(log).content) == {"answer": "colour=teal"}
    assert _forwarded_text(log, child) == ["let me ask. ", "got teal"]
    # The answer was the task's next message: in its task, with a derived id.
    _, answer = peer.seen["asker"]
    assert answer.task_id
    assert answer.message_id == f"{child}:answer:{entry.tool_call_id}"
    assert answer.parts[0].text == "teal"


async def test_a_cut_stream_is_subscribed_to_again_without_a_gap_or_a_repeat() -> None:
    with anyio.fail_after(LIMIT):
        async with (
            peer_server() as (peer, url),
            tcp_proxy(url) as proxy,
            A2ARemoteAgentTransport(f"{proxy.url}/slow") as t,
        ):
            peer.base = proxy.url  # its cards send every call through the proxy
            agent = lead(t)
            store = MemoryEventStore()
            child = "p5-remote-call_0_0"
            async with AgentExecutor(store, [agent]) as executor:
                handle = await executor.execute(agent, "go", session_id="p5")
                async with closing_iter(handle.stream()) as items:
                    async for item in items:
                        if isinstance(item.chunk, TextDelta) and item.chunk.agent_id == child:
                            break  # "first " reached the parent: the subscription is live
                connections = proxy.connections
                assert proxy.cut_all() >= 1  # the subscription, mid-task
                peer.release.set()
                result = await handle.result()
            log = await store.read("p5")
    assert result.status == "completed"
    assert proxy.connections > connections  # it connected again
    assert _forwarded_text(log, child) == ["first ", "second"]
    sequences = [item.sequence for item in project_stream(log)]
    assert sequences == sorted(set(sequences))
    assert json.loads(_tool_result(log).content) == FINDINGS


@pytest.mark.parametrize("stop", ["interrupt", "abort"])
async def test_interrupt_and_abort_cancel_the_a2a_task(stop: str) -> None:
    with anyio.fail_after(LIMIT):
        async with peer_server() as (peer, url), A2ARemoteAgentTransport(f"{url}/slow") as t:
            agent = lead(t)
            store = MemoryEventStore()
            async with AgentExecutor(store, [agent]) as executor:
                handle = await executor.execute(agent, "go", session_id="p6")
                await peer.slow_started.wait()
                await (handle.interrupt() if stop == "interrupt" else handle.abort())
                result = await handle.result()
                status = await t.get_status("p6-remote-call_0_0")
    assert peer.cancels == 1
    assert status.status == "interrupted"  # the A2A task is canceled
    assert result.status == ("interrupted" if stop == "interrupt" else "failed")


async def test_a_retried_start_sends_nothing_twice_even_from_a_new_transport() -> None:
    request = RemoteStartRequest(
        session_id="p7-remote-call_0_0", agent_type="peer", message="why logs?", input=None
    )
    with anyio.fail_after(LIMIT):
        async with peer_server() as (peer, url):
            async with A2ARemoteAgentTransport(f"{url}/researcher") as first:
                one = await first.start(request)
                again = await first.start(request)
            async with A2ARemoteAgentTransport(f"{url}/researcher") as restarted:
                three = await restarted.start(request)
                events = [e async for e in restarted.stream(request.session_id)]
                with pytest.raises(AgentServerError) as refused:
                    await restarted.send_message(
                        RemoteMessageRequest(session_id=request.session_id, message="more")
                    )
    assert len(peer.seen["researcher"]) == 1
    assert one.run_id == again.run_id == three.run_id
    texts = [e.chunk.delta for e in events if isinstance(getattr(e, "chunk", None), TextDelta)]
    assert "".join(texts) == "".join(f"part {i} " for i in range(CHUNKS))
    assert isinstance(events[-1], EndEvent)
    assert events[-1].output == FINDINGS
    assert refused.value.code == "INVALID_REQUEST"  # follow-ups need the helix extension
