"""Traces across processes (specs/otel.md): the trace context crosses HTTP and NATS.

Each side has its own ``TracerProvider`` and in-memory exporter, as two
processes would; the only link between their spans is the W3C trace context
that the start request carries (body field and header). A 3-deep tree with a
remote child, over real uvicorn and over a real nats-server, gives one trace
shaped like the agent tree. The gateway and the NATS host also take the
standard ``traceparent`` header alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import anyio
import httpx
import msgspec
import nats
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from otel_spans import (
    assert_trace_follows_tree,
    failed_tools,
    leaf,
    local_tool,
    mid,
    recording,
    remote_tool,
    root,
    runs_of,
)
from servers import serve

from helix_agents import AgentConfig, AgentExecutor, EventStore
from helix_agents.events import Event, SessionCreated
from helix_agents.otel import OtelTracer
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.fleet.host import NatsAgentHost
from helix_agents.server.fleet.runtime import NatsRuntime
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from helix_agents.transports.nats import NatsRemoteAgentTransport, Reply

pytestmark = pytest.mark.slow

LIMIT = 30
PARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
TRACE_ID, SPAN_ID = int("4bf92f3577b34da6a3ce929d0e0e4736", 16), int("00f067aa0ba902b7", 16)


async def _logs(stores: Sequence[EventStore]) -> dict[str, list[Event]]:
    logs: dict[str, list[Event]] = {}
    for store in stores:
        for session_id in await store.list_sessions():
            logs[session_id] = list(await store.read(session_id))
    return logs


def _spans(*exporters: InMemorySpanExporter) -> list[ReadableSpan]:
    return [span for exporter in exporters for span in exporter.get_finished_spans()]


async def _run_root(top: AgentConfig, store: EventStore, tracer: OtelTracer) -> None:
    async with AgentExecutor(store, [top], tracer=tracer) as executor:
        handle = await executor.execute(top, "go", session_id="t")
        result = await handle.result()
    assert result.status == "completed", result.error
    assert isinstance(result.output, str)
    assert "mid(subagent__leaf=" in result.output


def _check_remote_tree(spans: list[ReadableSpan], logs: dict[str, list[Event]]) -> None:
    assert sorted(logs) == ["t", "t-remote-call_0_0", "t-remote-call_0_0-sub-call_0_0"]
    assert_trace_follows_tree(spans, logs)
    assert failed_tools(spans) == {"broken": "RuntimeError: disk on fire"}
    # the remote child's run really came over the wire: its parent span is remote to it
    (remote_run,) = runs_of(spans)["t-remote-call_0_0"]
    assert remote_run.parent is not None
    assert remote_run.parent.is_remote


async def test_a_remote_child_over_http_continues_the_roots_trace() -> None:
    tracer_a, spans_a = recording()
    tracer_b, spans_b = recording()
    store_a, store_b = MemoryEventStore(), MemoryEventStore()
    served = mid(local_tool(leaf()))
    with anyio.fail_after(LIMIT):
        async with (
            serve(create_http_app(AgentServer([served], store_b, tracer=tracer_b))) as url,
            HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.05) as to_b,
        ):
            await _run_root(root(remote_tool("mid", to_b)), store_a, tracer_a)
    assert spans_a.get_finished_spans()
    assert spans_b.get_finished_spans()
    _check_remote_tree(_spans(spans_a, spans_b), await _logs([store_a, store_b]))


@asynccontextmanager
async def _nats_host(
    server: NatsServer, agents: Sequence[AgentConfig], tracer: OtelTracer
) -> AsyncIterator[tuple[NatsRemoteAgentTransport, EventStore]]:
    """A traced ``NatsAgentHost`` on a fresh stream; (a client transport, the host's store)."""
    stream = fresh_stream_name()
    host_store = await JetStreamEventStore.connect(server.url, stream=stream)
    client_store = await JetStreamEventStore.connect(server.url, stream=stream)
    host_nc = await nats.connect(server.url)
    client_nc = await nats.connect(server.url)
    try:
        async with NatsAgentHost(
            AgentServer(agents, host_store, tracer=tracer, runtime=NatsRuntime(host_nc))
        ):
            yield (
                NatsRemoteAgentTransport(
                    client_nc, client_store, timeout=5, max_retries=2, retry_base_delay=0.05
                ),
                host_store,
            )
    finally:
        await client_nc.close()
        await host_nc.close()
        await client_store.close()
        await host_store.close()


@pytest.mark.nats
async def test_a_remote_child_over_nats_continues_the_roots_trace(
    nats_server: NatsServer,
) -> None:
    tracer_a, spans_a = recording()
    tracer_c, spans_c = recording()
    store_a = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with _nats_host(nats_server, [mid(local_tool(leaf()))], tracer_c) as (to_c, store_c):
            await _run_root(root(remote_tool("mid", to_c)), store_a, tracer_a)
            logs = await _logs([store_a, store_c])
    _check_remote_tree(_spans(spans_a, spans_c), logs)


@pytest.mark.nats
async def test_root_to_http_to_nats_is_one_trace(nats_server: NatsServer) -> None:
    """Two remote hops: root -> gateway B (uvicorn) running mid -> NATS host C running leaf."""
    tracer_a, spans_a = recording()
    tracer_b, spans_b = recording()
    tracer_c, spans_c = recording()
    store_a, store_b = MemoryEventStore(), MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with _nats_host(nats_server, [leaf()], tracer_c) as (to_c, store_c):
            served = mid(remote_tool("leaf", to_c))
            async with (
                serve(create_http_app(AgentServer([served], store_b, tracer=tracer_b))) as url,
                HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.05) as to_b,
            ):
                await _run_root(root(remote_tool("mid", to_b)), store_a, tracer_a)
            logs = await _logs([store_a, store_b, store_c])
    assert sorted(logs) == ["t", "t-remote-call_0_0", "t-remote-call_0_0-remote-call_0_0"]
    spans = _spans(spans_a, spans_b, spans_c)
    assert_trace_follows_tree(spans, logs)
    assert failed_tools(spans) == {"broken": "RuntimeError: disk on fire"}


def _start_body(session_id: str, agent_type: str, **extra: object) -> dict[str, object]:
    return {"sessionId": session_id, "agentType": agent_type, "message": "go", **extra}


async def test_the_gateway_takes_the_w3c_headers_and_refuses_a_bad_body_field() -> None:
    tracer, exporter = recording()
    store = MemoryEventStore()
    server = AgentServer([leaf()], store, tracer=tracer)
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(server)) as url, httpx.AsyncClient(timeout=10) as client:
            headers = {"traceparent": PARENT, "tracestate": "vendor=1"}
            answer = await client.post(
                f"{url}/start", json=_start_body("h1", "leaf"), headers=headers
            )
            assert answer.status_code == 200, answer.text
            # an unreadable header is ignored (W3C): the session starts a trace of its own
            bad = {"traceparent": "00-nope"}
            answer = await client.post(f"{url}/start", json=_start_body("h2", "leaf"), headers=bad)
            assert answer.status_code == 200, answer.text
            # a bad body field is our protocol's: refused, and nothing is created
            answer = await client.post(
                f"{url}/start",
                json=_start_body("h3", "leaf", traceContext={"traceparent": "x"}),
            )
            assert answer.status_code == 400
            assert answer.json()["code"] == "INVALID_REQUEST"
            assert "traceparent" in answer.json()["error"]
            await server.executor.wait_idle("h1")
            await server.executor.wait_idle("h2")
    assert sorted(await store.list_sessions()) == ["h1", "h2"]
    created = (await store.read("h1"))[0]
    assert isinstance(created, SessionCreated)
    assert created.trace_context == {"traceparent": PARENT, "tracestate": "vendor=1"}
    runs = runs_of(exporter.get_finished_spans())
    (h1,) = runs["h1"]
    assert h1.context.trace_id == TRACE_ID
    assert h1.parent is not None
    assert h1.parent.span_id == SPAN_ID
    (h2,) = runs["h2"]
    assert h2.context.trace_id != TRACE_ID


@pytest.mark.nats
async def test_the_nats_host_takes_the_w3c_headers(nats_server: NatsServer) -> None:
    tracer, exporter = recording()
    with anyio.fail_after(LIMIT):
        async with _nats_host(nats_server, [leaf()], tracer) as (transport, store):
            body = msgspec.json.encode(
                RemoteStartRequest(session_id="n1", agent_type="leaf", message="go")
            )
            reply = await transport.nc.request(
                "helix.rpc.start.leaf", body, timeout=5, headers={"traceparent": PARENT}
            )
            assert msgspec.json.decode(reply.data, type=Reply).error is None, reply.data
            created = (await store.read("n1"))[0]
            assert isinstance(created, SessionCreated)
            assert created.trace_context == {"traceparent": PARENT}
            events = [event async for event in transport.stream("n1")]
            assert isinstance(events[-1], EndEvent)
    (run,) = runs_of(exporter.get_finished_spans())["n1"]
    assert run.context.trace_id == TRACE_ID
    assert run.parent is not None
    assert run.parent.span_id == SPAN_ID
