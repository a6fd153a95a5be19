"""Seed 000's remote-call recovery on the durable runtimes: a remote child's stream cut
mid-frame, the remote-call step (Temporal: activity) retried by the engine, status asked
first, the stream followed on from the last seq held.

The remote child is ``helix-agents serve`` of ``remote_app`` behind a loopback proxy that
cuts the first SSE stream after 1500 bytes. Temporal's heartbeat-carried resume point is
in ``test_temporal_children.py``. A remote child without an ``output_schema`` (served
over uvicorn in-process) gives its output as it came, as on the built-in runtime.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import pytest
from servers import serve
from tcp_proxy import TcpProxy, tcp_proxy

from helix_agents import create_remote_sub_agent_tool, define_agent
from helix_agents.events import ChildChunkForwarded, SubSessionFinished
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import Runtime
from tests.integration._serve_process import ServeProcess
from tests.integration._temporal_kit import results_of, seqs_contiguous, stream_to_end
from tests.integration.remote_app import Query, Report, expected_report

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("runtime", ["temporal", "dbos"], indirect=True),
]


@pytest.fixture
async def remote(tmp_path: Path) -> AsyncIterator[tuple[ServeProcess, TcpProxy]]:
    served = ServeProcess(tmp_path, "tests.integration.remote_app:agents")
    await served.start()
    try:
        async with tcp_proxy(served.url) as proxy:
            yield served, proxy
    finally:
        await served.terminate()


async def test_seed_000_remote_call_step_retried_after_a_stream_drop(
    runtime: Runtime, remote: tuple[ServeProcess, TcpProxy]
) -> None:
    """The remote child's SSE stream is cut mid-frame: the remote-call step (Temporal: its
    activity) raises StreamDropError (the tool allows no in-step reconnect), the engine
    retries it, and the retry asks the status first and follows on from the last seq the
    parent's log holds: every forwarded chunk once, in order, and the child's output."""
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
        armed = proxy.cut_after(1500, request_prefix=b"GET /sse")
        with anyio.fail_after(90):
            async with runtime.server({"lead": lead}, store) as server:
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
    requests = [line for line in served.output().splitlines() if '"GET /' in line]
    assert sum("GET /sse" in line for line in requests) >= 2  # followed again after the cut
    first_sse = next(n for n, line in enumerate(requests) if "GET /sse" in line)
    asked = [n for n, line in enumerate(requests) if "GET /status" in line]
    assert any(n > first_sse for n in asked)  # the retry asked the status first
    if runtime.name == "temporal":
        # The history shows the activity's retry after the drop.
        from temporalio.client import Client

        assert runtime.dev is not None
        client = await Client.connect(runtime.dev.address)
        attempts = [
            event.activity_task_started_event_attributes
            async for event in client.get_workflow_handle("r").fetch_history_events()
            if event.HasField("activity_task_started_event_attributes")
        ]
        retried = [a for a in attempts if a.attempt > 1]
        assert retried, "the remote call's activity was not retried"
        assert "StreamDropError" in retried[0].last_failure.application_failure_info.type


async def test_a_remote_child_without_an_output_schema_gives_its_output_as_it_came(
    runtime: Runtime,
) -> None:
    """No output_schema on the durable runtimes as on the built-in one (the remote-call
    step finishes the call with the same code): a text child's text is the result, a
    typed child's JSON passes unvalidated."""
    writer = define_agent("writer", llm=ScriptedLLM([ScriptedLLM.reply("tea is a leaf")]))
    typed = define_agent(
        "typed",
        output_schema=Report,
        llm=ScriptedLLM([ScriptedLLM.finish({"topic": "tea", "findings": ["leaf"]})]),
    )
    store = MemoryEventStore()
    async with (
        AgentServer([writer, typed], MemoryEventStore()) as child_server,
        serve(create_http_app(child_server)) as url,
        HttpRemoteAgentTransport(url, retry_base_delay=0.01) as transport,
    ):
        lead = define_agent(
            "lead",
            tools=[
                create_remote_sub_agent_tool(
                    name,
                    description=f"Ask the {name}.",
                    input_schema=Query,
                    transport=transport,
                    remote_agent_type=name,
                )
                for name in ("writer", "typed")
            ],
            llm=ScriptedLLM(
                [
                    [ScriptedLLM.call("subagent__writer", {"query": "tea"}, id="w1")],
                    [ScriptedLLM.call("subagent__typed", {"query": "tea"}, id="t1")],
                    "done",
                ]
            ),
        )
        with anyio.fail_after(90):
            async with runtime.server({"lead": lead}, store) as server:
                await server.start(
                    RemoteStartRequest(session_id="u", agent_type="lead", message="go")
                )
                assert await stream_to_end(server, "u") == "done"
    log = await store.read("u")
    finished = [e for e in log if isinstance(e, SubSessionFinished)]
    assert [(f.status, f.output) for f in finished] == [
        ("completed", "tea is a leaf"),
        ("completed", {"topic": "tea", "findings": ["leaf"]}),
    ]
    assert [e.message.content for e in results_of(log, "w1")] == ["tea is a leaf"]
