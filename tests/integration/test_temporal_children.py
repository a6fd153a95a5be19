"""Temporal runs with people and remote children: an approval answered at the root, and a
remote child behind a connection that is cut mid-stream (seed 000, "Temporal Runtime -
Activity Retry")."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl

import anyio
import pytest
from servers import serve
from tcp_proxy import TcpProxy, tcp_proxy
from temporal_server import TemporalDev
from temporalio.client import Client

from helix_agents import (
    ToolContext,
    create_remote_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.events import ChildChunkForwarded, SubSessionFinished, Suspended, ToolStart
from helix_agents.log import project_state, project_stream
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._serve_process import ServeProcess
from tests.integration._temporal_kit import (
    gateway_and_worker,
    options_for,
    results_of,
    seqs_contiguous,
    stream_to_end,
    wait_for,
)
from tests.integration.remote_app import Query, Report, expected_report
from tests.integration.temporal_app import agents

pytestmark = [pytest.mark.slow]


async def test_approval_answered_at_the_root_resumes_the_tree(temporal_dev: TemporalDev) -> None:
    """A grandchild-free tree: the child's gated call pauses child and root, whose workflows
    wait on their resume signal (open, no activity running); the approval given at the root
    is routed to the child, and both runs go on to the end."""
    store = MemoryEventStore()
    with anyio.fail_after(90):
        async with gateway_and_worker(agents, store, options_for(temporal_dev)) as (server, _):
            await server.start(
                RemoteStartRequest(session_id="a1", agent_type="hitl_boss", message="pay")
            )
            await wait_for(store, "a1", lambda e: isinstance(e, Suspended))
            status = await server.get_status("a1")
            assert status.status == "paused"
            [entry] = status.pending_inputs
            assert entry.kind == "approval"
            service = server.executor.service
            # Waiting on a signal: the workflows are open, yet nothing polls.
            assert await service.workflow_open("a1")  # type: ignore[attr-defined]
            assert await service.workflow_open("a1-sub-c1")  # type: ignore[attr-defined]
            answer = await server.submit_approval("a1", entry.tool_call_id, True)
            assert answer.resumed
            assert await stream_to_end(server, "a1") == "payment done"
    child = project_state(await store.read("a1-sub-c1"))
    assert child.status == "completed"
    assert child.output == {"value": 5}
    for session_id in ("a1", "a1-sub-c1"):
        assert seqs_contiguous(await store.read(session_id))


async def test_client_tool_answered_at_the_root_resumes_the_run(temporal_dev: TemporalDev) -> None:
    """A client tool pauses the run (its workflow waits on a signal); the result submitted
    at the root is recorded and the run goes on with it."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with gateway_and_worker(agents, store, options_for(temporal_dev)) as (server, _):
            await server.start(RemoteStartRequest(session_id="ct", agent_type="asker", message="?"))
            await wait_for(store, "ct", lambda e: isinstance(e, Suspended))
            assert (await server.get_status("ct")).pending_client_tool_call_ids == ["k1"]
            answer = await server.submit_tool_result("ct", "k1", {"colour": "teal"})
            assert answer.resumed
            assert await stream_to_end(server, "ct") == "picked"
    log = await store.read("ct")
    assert seqs_contiguous(log)
    assert [r.message.content for r in results_of(log, "k1")] == ['{"colour":"teal"}']


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[tuple[ServeProcess, TcpProxy]]:
    served = ServeProcess(tmp_path, "tests.integration.remote_app:agents")
    await served.start()
    try:
        async with tcp_proxy(served.url) as proxy:
            yield served, proxy
    finally:
        await served.terminate()


async def test_seed_000_temporal_runtime_activity_retry_after_a_stream_drop(
    temporal_dev: TemporalDev, remote: tuple[ServeProcess, TcpProxy]
) -> None:
    """The remote child's SSE stream is cut mid-frame: the remote-call activity raises
    StreamDropError (the tool allows no in-step reconnect), Temporal retries it, and the
    retried attempt asks the status first and follows on from the last seq the parent's
    log holds: every forwarded chunk once, in order, and the child's output."""
    served, proxy = remote
    async with HttpRemoteAgentTransport(proxy.url, max_retries=0) as transport:
        lead = define_agent(
            "lead",
            tools=[
                create_remote_sub_agent_tool(
                    "researcher",
                    description="Research (remote).",
                    input_schema=Query,
                    output_schema=Report,
                    transport=transport,
                    remote_agent_type="researcher",
                    stream_retries=0,
                )
            ],
            llm=ScriptedLLM(
                [[ScriptedLLM.call("subagent__researcher", {"query": "tea"}, id="r1")], "done"]
            ),
        )
        store = MemoryEventStore()
        options = options_for(temporal_dev)
        armed = proxy.cut_after(1500, request_prefix=b"GET /sse")
        with anyio.fail_after(90):
            async with gateway_and_worker({"lead": lead}, store, options) as (server, _):
                await server.start(
                    RemoteStartRequest(session_id="r", agent_type="lead", message="go")
                )
                assert await stream_to_end(server, "r") == "done"
    assert armed.fired
    log = await store.read("r")
    assert seqs_contiguous(log)
    forwarded = [e.child_seq for e in log if isinstance(e, ChildChunkForwarded)]
    assert forwarded == sorted(set(forwarded))  # once each, in order
    [finished] = [e for e in log if isinstance(e, SubSessionFinished)]
    assert finished.status == "completed"
    assert finished.output == expected_report("tea")
    # The history shows the activity's retry after the drop.
    client = await Client.connect(temporal_dev.address)
    attempts = [
        event.activity_task_started_event_attributes
        async for event in client.get_workflow_handle("r").fetch_history_events()
        if event.HasField("activity_task_started_event_attributes")
    ]
    retried = [a for a in attempts if a.attempt > 1]
    assert retried, "the remote call's activity was not retried"
    assert "StreamDropError" in retried[0].last_failure.application_failure_info.type
    assert served.output()  # the remote served it all along


class _SseCursors:
    """An ASGI app in front of ``app`` that records the ``fromSequence`` of every ``GET /sse``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cursors: list[int] = []
        self.reconnected = anyio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/sse" and scope["method"] == "GET":
            query = dict(parse_qsl(scope["query_string"].decode()))
            self.cursors.append(int(query.get("fromSequence", "0")))
            if len(self.cursors) > 1:
                self.reconnected.set()
        await self.app(scope, receive, send)


async def _heartbeat_reaches(client: Client, workflow_id: str, held: int) -> None:
    """Wait until the pending remote-call activity's last heartbeat carries ``held``."""
    handle = client.get_workflow_handle(workflow_id)
    while True:
        described = await handle.describe()
        for pending in described.raw_description.pending_activities:
            if pending.activity_type.name == "helix_remote_child" and pending.heartbeat_details:
                details = await client.data_converter.decode(
                    pending.heartbeat_details.payloads, [int]
                )
                if details == [held]:
                    return
        # The server's view of a heartbeat: it tells no one, so it is asked.
        await anyio.sleep(0.1)


async def test_a_retried_remote_call_resumes_from_its_heartbeats_sequence(
    temporal_dev: TemporalDev, caplog: pytest.LogCaptureFixture
) -> None:
    """Seed 000 (Activity Retry): the remote-call activity's heartbeat carries the last child
    seq the parent holds; the child waits mid-stream, the heartbeat reaches it, the stream is
    cut, and the retried attempt reads the heartbeat and reconnects with ``fromSequence`` at
    it: every child chunk in the parent's log once, no gap."""
    gate = anyio.Event()

    async def wait_at_gate(value: Query, ctx: ToolContext) -> dict[str, str]:
        await gate.wait()
        return {"opened": value.query}

    child = define_agent(
        "waiter",
        tools=[define_tool("hold", "Wait for the gate.", Query, wait_at_gate)],
        output_schema=Report,
        llm=ScriptedLLM(
            [
                ScriptStep(
                    text="one two three",
                    tool_calls=[ScriptedLLM.call("hold", {"query": "tea"}, id="h1")],
                ),
                ScriptedLLM.finish(expected_report("tea"), text="done waiting"),
            ],
            chunk_words=1,
        ),
    )
    remote_store = MemoryEventStore()
    app = _SseCursors(create_http_app(AgentServer([child], remote_store)))
    caplog.set_level(logging.INFO, logger="helix_agents.engines.durable")
    with anyio.fail_after(90):
        async with (
            serve(app) as url,
            tcp_proxy(url) as proxy,
            HttpRemoteAgentTransport(proxy.url, max_retries=0) as transport,
        ):
            lead = define_agent(
                "lead",
                tools=[
                    create_remote_sub_agent_tool(
                        "waiter",
                        description="Wait (remote).",
                        input_schema=Query,
                        output_schema=Report,
                        transport=transport,
                        remote_agent_type="waiter",
                        stream_retries=0,
                    )
                ],
                llm=ScriptedLLM(
                    [[ScriptedLLM.call("subagent__waiter", {"query": "tea"}, id="w1")], "done"]
                ),
            )
            store = MemoryEventStore()
            # A short heartbeat timeout: the SDK sends heartbeats at most every 0.8 of it.
            options = options_for(temporal_dev, heartbeat_timeout=1.0)
            child_id = "hb-remote-w1"
            async with gateway_and_worker({"lead": lead}, store, options) as (server, _):
                await server.start(
                    RemoteStartRequest(session_id="hb", agent_type="lead", message="go")
                )
                # The child waits in its tool: the parent holds its tool_start, the last chunk.
                started = await wait_for(
                    store,
                    "hb",
                    lambda e: isinstance(e, ChildChunkForwarded) and isinstance(e.chunk, ToolStart),
                )
                held = started.child_seq  # type: ignore[attr-defined]
                client = await Client.connect(temporal_dev.address)
                await _heartbeat_reaches(client, "hb", held)
                assert proxy.cut_all() >= 1  # the child's stream drops mid-way
                # The retried attempt reconnects from the heartbeat's seq; then the child goes on.
                await app.reconnected.wait()
                gate.set()
                assert await stream_to_end(server, "hb") == "done"
            remote_log = await remote_store.read(child_id)
    assert app.cursors == [0, held]
    # The retry read the heartbeat (and the log, which holds as much: it is never behind).
    assert f"resumes after seq {held} (heartbeat {held}, log {held})" in caplog.text
    log = await store.read("hb")
    assert seqs_contiguous(log)
    forwarded = [e.child_seq for e in log if isinstance(e, ChildChunkForwarded)]
    # Every chunk of the child's stream, once, in order: no gap, no duplicate.
    assert forwarded == [item.sequence for item in project_stream(remote_log)]
