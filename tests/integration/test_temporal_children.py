"""Temporal runs with people and remote children: an approval answered at the root, and a
remote child behind a connection that is cut mid-stream (seed 000, "Temporal Runtime -
Activity Retry")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from tcp_proxy import TcpProxy, tcp_proxy
from temporal_server import TemporalDev
from temporalio.client import Client

from helix_agents import create_remote_sub_agent_tool, define_agent
from helix_agents.events import ChildChunkForwarded, SubSessionFinished, Suspended
from helix_agents.log import project_state
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
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
