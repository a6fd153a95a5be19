"""Fleet discovery: hosts announce their agent types; a start of a type no host runs is 404 at once.

Two hosts (in this process) serve different agent types. The transport lists
their union (what the gateway's ``/health`` shows); a host that leaves takes
its types with it. A start of a type no live host announces is ``NOT_FOUND``
without the retries that wait for a restarting host: the retry delay here is
far longer than the bound the call must finish in.
"""

from __future__ import annotations

import uuid

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from nats.js.errors import KeyNotFoundError
from nats_server import NatsServer

from helix_agents import define_agent
from helix_agents.errors import AgentServerError
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import HOSTS_BUCKET, NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 30
SLOW_RETRY = 60.0  # a retried call would outlive LIMIT


def _agent(name: str) -> object:
    return define_agent(name, llm=ScriptedLLM(["done"]))


async def test_hosts_announce_their_types_and_unknown_types_are_not_found_at_once(
    nats_server: NatsServer,
) -> None:
    stream = fresh_stream_name()
    url = nats_server.url
    store = await JetStreamEventStore.connect(url, stream=stream)
    store_1 = await JetStreamEventStore.connect(url, stream=stream)
    store_2 = await JetStreamEventStore.connect(url, stream=stream)
    nc, nc_1, nc_2 = await nats.connect(url), await nats.connect(url), await nats.connect(url)
    client = NatsRemoteAgentTransport(nc, store, max_retries=3, retry_base_delay=SLOW_RETRY)
    host_1_id = f"disc-{uuid.uuid4().hex[:8]}"
    try:
        with anyio.fail_after(LIMIT):
            fleet_1 = NatsRuntime(nc_1, host_id=host_1_id)
            server_1 = AgentServer([_agent("researcher")], store_1, recover=False, runtime=fleet_1)  # type: ignore[list-item]
            server_2 = AgentServer(
                [_agent("summarizer"), _agent("critic")],
                store_2,
                recover=False,
                runtime=NatsRuntime(nc_2),
            )  # type: ignore[list-item]
            async with NatsAgentHost(server_1):
                async with NatsAgentHost(server_2):
                    both = await client.list_agent_types()
                    with pytest.raises(AgentServerError) as unknown:
                        await client.start(
                            RemoteStartRequest(
                                session_id="d-1", agent_type="astronomer", message="hi"
                            )
                        )
                    started = await client.start(
                        RemoteStartRequest(session_id="d-2", agent_type="critic", message="hi")
                    )
                after_leaving = await client.list_agent_types()
                with pytest.raises(AgentServerError) as gone:
                    await client.start(
                        RemoteStartRequest(session_id="d-3", agent_type="critic", message="hi")
                    )
            kv = await nc.jetstream().key_value(HOSTS_BUCKET)
            with pytest.raises(KeyNotFoundError):
                await kv.get(host_1_id)  # withdrawn on leaving
    finally:
        for connection in (nc, nc_1, nc_2):
            await connection.close()
        for opened in (store, store_1, store_2):
            await opened.close()
    assert {"critic", "researcher", "summarizer"} <= set(both)
    assert both == sorted(both)
    assert (unknown.value.code, unknown.value.message) == (
        "NOT_FOUND",
        "agent type not found: astronomer",
    )
    assert started.session_id == "d-2"
    assert "critic" not in after_leaving
    assert "researcher" in after_leaving
    assert gone.value.code == "NOT_FOUND"
