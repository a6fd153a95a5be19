"""A Temporal run's remote child behind a connection that is cut mid-stream (seed 000,
"Temporal Runtime - Activity Retry"): the retried activity resumes from the sequence its
heartbeat carried. The retry both durable runtimes make is in ``test_durable_remote.py``;
approvals and client tools answered at the root, in ``test_durable_runtime.py``."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

import anyio
import pytest
from servers import serve
from tcp_proxy import tcp_proxy
from temporal_server import TemporalDev
from temporalio.client import Client

from helix_agents import (
    ToolContext,
    create_remote_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.events import ChildChunkForwarded, ToolStart
from helix_agents.log import project_stream
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._temporal_kit import (
    gateway_and_worker,
    options_for,
    seqs_contiguous,
    stream_to_end,
    wait_for,
)
from tests.integration.remote_app import Query, Report, expected_report

pytestmark = [pytest.mark.slow]


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
