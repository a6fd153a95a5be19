"""The gateway can front any RemoteAgentTransport, not only an AgentServer.

Chain: client -> gateway B (fronting an HttpRemoteAgentTransport) -> gateway A
(fronting an AgentServer). The client must not be able to tell B from A.
"""

from __future__ import annotations

import anyio
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentServerError, EndEvent, RemoteStartRequest, ScriptedLLM, define_agent
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
