"""One ``/sse`` request reads the session's log once: the 404 check and the stream share it.

The gateway must answer 404 for an unknown session before the first byte of
a stream, and then stream from the log; both come from one read (of the
server's store in process, of the fleet's store behind NATS), counted by a
store that counts its ``read`` calls. The stream's own tail (a paused session)
reads nothing more before the first frame. The in-process gateway runs its
sessions on each runtime (``runtime``); the fleet's gateway is the NATS
fleet's own (the durable engines have no NATS fleet).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import httpx
import nats
import pytest
from _served_agents import read_sse
from conftest import fresh_stream_name
from nats_server import NatsServer
from pydantic import BaseModel
from servers import serve
from wrapped_store import WrappedStore

from helix_agents import AgentConfig, EventStore, define_agent, define_tool
from helix_agents.events import Event
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime, create_http_app
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import SSEParser
from helix_agents.transports.nats import NatsRemoteAgentTransport
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

LIMIT = 20


class CountingStore(WrappedStore):
    """Counts ``read`` calls per session."""

    def __init__(self, inner: EventStore) -> None:
        super().__init__(inner)
        self.reads: Counter[str] = Counter()

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        self.reads[session_id] += 1
        return await super().read(session_id, from_seq)


class Question(BaseModel):
    question: str


def _agents() -> list[AgentConfig]:
    writer = define_agent("writer", llm=ScriptedLLM(["one two three four"], chunk_words=1))
    asker = define_agent(
        "asker",
        tools=[define_tool("confirm", "Asks the user to confirm.", Question, "client")],
        llm=ScriptedLLM([ScriptedLLM.call("confirm", {"question": "go?"}, id="c1"), "ok"]),
    )
    return [writer, asker]


async def _first_frame(client: httpx.AsyncClient, url: str, session_id: str) -> bytes:
    """Open ``/sse`` of a session whose stream stays open; return its first frame's bytes."""
    parser = SSEParser()
    async with client.stream("GET", f"{url}/sse", params={"sessionId": session_id}) as response:
        assert response.status_code == 200
        async for data in response.aiter_bytes():
            if list(parser.feed(data)):
                return data
    raise AssertionError("the stream ended without a frame")


async def _check_one_read_each(
    url: str, stores: list[CountingStore], done: str, paused: str
) -> None:
    """``/sse`` of a completed, a paused and an unknown session: one read of each log."""

    def reads(session_id: str) -> int:
        return sum(store.reads[session_id] for store in stores)

    for store in stores:
        store.reads.clear()
    async with httpx.AsyncClient(timeout=LIMIT) as client:
        events = await read_sse(client, url, done)
        assert isinstance(events[-1], EndEvent)
        assert reads(done) == 1

        assert b"event: chunk" in await _first_frame(client, url, paused)
        assert reads(paused) == 1

        missing = await client.get(f"{url}/sse", params={"sessionId": "no-such-1"})
        assert missing.status_code == 404
        assert missing.json()["code"] == "NOT_FOUND"
        assert reads("no-such-1") == 1


async def test_sse_reads_the_log_once_in_process(runtime: Runtime) -> None:
    store = CountingStore(MemoryEventStore())
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server(_agents(), store) as server,
            serve(create_http_app(server)) as url,
        ):
            for session_id, agent_type in (("done-1", "writer"), ("wait-1", "asker")):
                await server.start_agent(
                    RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
                )
                await runtime.settled(server, session_id)
            assert (await server.get_status("wait-1")).status == "paused"
            await _check_one_read_each(url, [store], "done-1", "wait-1")


@asynccontextmanager
async def _fleet_gateway(url: str) -> AsyncIterator[tuple[str, CountingStore, CountingStore]]:
    """A host and a gateway in front of it, each on its own counting store of one stream."""
    stream = fresh_stream_name()
    host_store = CountingStore(await JetStreamEventStore.connect(url, stream=stream))
    gateway_store = CountingStore(await JetStreamEventStore.connect(url, stream=stream))
    host_nc = await nats.connect(url)
    gateway_nc = await nats.connect(url)
    server = AgentServer(
        _agents(), host_store, recover=False, runtime=NatsRuntime(host_nc, lease_ttl=60)
    )
    try:
        # A lease TTL far beyond the test: no takeover scan reads the logs meanwhile.
        async with (
            NatsAgentHost(server),
            serve(create_http_app(NatsRemoteAgentTransport(gateway_nc, gateway_store))) as gw,
        ):
            for session_id, agent_type in (("fleet-done-1", "writer"), ("fleet-wait-1", "asker")):
                await server.start_agent(
                    RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
                )
                await server.executor.wait_idle(session_id)
            yield gw, host_store, gateway_store
    finally:
        await gateway_nc.close()
        await host_nc.close()
        await gateway_store.close()
        await host_store.close()


@pytest.mark.nats
async def test_sse_reads_the_log_once_in_front_of_a_fleet(nats_server: NatsServer) -> None:
    with anyio.fail_after(LIMIT):
        async with _fleet_gateway(nats_server.url) as (url, host_store, gateway_store):
            await _check_one_read_each(
                url, [host_store, gateway_store], "fleet-done-1", "fleet-wait-1"
            )
