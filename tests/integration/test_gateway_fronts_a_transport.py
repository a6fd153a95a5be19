"""The gateway can front any RemoteAgentTransport, not only an AgentServer.

Chain: client -> gateway B (fronting an HttpRemoteAgentTransport) -> gateway A
(fronting an AgentServer). The client must not be able to tell B from A.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from pydantic import BaseModel
from servers import serve
from starlette.applications import Starlette
from starlette.routing import Mount

from helix_agents import define_agent
from helix_agents.errors import AgentServerError, StoreError
from helix_agents.events import Event
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport


class Found(BaseModel):
    findings: str


async def test_a_gateway_in_front_of_a_transport_speaks_the_same_protocol() -> None:
    researcher = define_agent(
        "researcher",
        output_schema=Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"}, text="one two three four")]),
    )
    store = MemoryEventStore()
    with anyio.fail_after(30):
        async with serve(create_http_app(AgentServer([researcher], store))) as inner_url:
            inner = HttpRemoteAgentTransport(inner_url, retry_base_delay=0.01)
            async with (
                serve(create_http_app(inner)) as outer_url,
                HttpRemoteAgentTransport(outer_url, retry_base_delay=0.01) as client,
            ):
                started = await client.start(
                    RemoteStartRequest(session_id="s1", agent_type="researcher", message="go")
                )
                events = [event async for event in client.stream("s1")]
                direct = [event async for event in inner.stream("s1")]
                status = await client.get_status("s1")
                with pytest.raises(AgentServerError) as missing:
                    await client.get_status("nope")
                with pytest.raises(AgentServerError) as unknown_type:
                    await client.start(
                        RemoteStartRequest(session_id="s2", agent_type="ghost", message="go")
                    )
            await inner.aclose()
    assert started.session_id == "s1"
    assert events == direct  # the same chunks, sequences and end, through two gateways
    assert isinstance(events[-1], EndEvent)
    assert events[-1].output == {"findings": "f"}
    assert status.status == "completed"
    assert status.latest_sequence == (await store.read("s1"))[-1].seq
    # Errors keep their protocol code across the hop.
    assert missing.value.code == "NOT_FOUND"
    assert unknown_type.value.code == "NOT_FOUND"
    assert await store.list_sessions() == ["s1"]


async def test_a_failing_store_is_a_server_error_not_the_clients() -> None:
    class Broken(MemoryEventStore):
        async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
            raise StoreError("disk on fire")

    with anyio.fail_after(10):
        async with (
            serve(create_http_app(AgentServer([], Broken()))) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            answer = await client.get("/status", params={"sessionId": "s1"})
    assert answer.status_code == 500
    body = answer.json()
    assert body["code"] == "INTERNAL_ERROR"
    # The store's text stays in the server's log (issue 12, finding 1).
    assert body["error"].startswith("internal error (ref ")
    assert "disk on fire" not in body["error"]


async def test_the_gateway_mounted_under_a_prefix() -> None:
    # A mounted app's lifespan does not run: the host app enters the server.
    researcher = define_agent(
        "researcher",
        output_schema=Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"}, text="mounted")]),
    )
    server = AgentServer([researcher], MemoryEventStore())
    host = Starlette(routes=[Mount("/agents", app=create_http_app(server))])
    with anyio.fail_after(30):
        async with (
            server,
            serve(host) as url,
            HttpRemoteAgentTransport(url + "/agents", retry_base_delay=0.01) as client,
        ):
            await client.start(
                RemoteStartRequest(session_id="m1", agent_type="researcher", message="go")
            )
            events = [event async for event in client.stream("m1")]
            async with httpx.AsyncClient(base_url=url) as raw:
                outside = await raw.get("/start")
                health = await raw.get("/agents/health")
    assert isinstance(events[-1], EndEvent)
    assert events[-1].output == {"findings": "f"}
    assert outside.status_code == 404  # nothing leaks outside the prefix
    assert health.json() == {"status": "ok", "agents": ["researcher"]}
