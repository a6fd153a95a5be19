"""``A2ARemoteAgentTransport`` and ``create_a2a_sub_agent_tool``: every option does what it says.

Against real servers on loopback: our gateway behind a bearer token (the
tool's ``url`` and ``headers``), and a2a-sdk's reference server (a ``card``
given instead of read, a ``client`` passed in, ``timeout``, ``poll_interval``).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest
from a2a_kit import gateway
from a2a_peer_app import Peer
from hitl_app import Out, Query, root_agent
from servers import serve

from helix_agents import AgentExecutor
from helix_agents.a2a import A2ARemoteAgentTransport, create_a2a_sub_agent_tool
from helix_agents.errors import TransportTimeoutError, UsageError
from helix_agents.events import InputRequired, TextDelta
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteStartRequest
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

LIMIT = 30


def test_bad_options_are_refused() -> None:
    with pytest.raises(UsageError):
        A2ARemoteAgentTransport()
    with pytest.raises(UsageError):
        A2ARemoteAgentTransport("ftp://example.com/agent")
    for option in ("timeout", "poll_interval", "answer_wait"):
        with pytest.raises(UsageError):
            A2ARemoteAgentTransport("http://127.0.0.1:1", **{option: 0})
    with pytest.raises(UsageError):
        create_a2a_sub_agent_tool("x", input_schema=Query, output_schema=Out)
    transport = A2ARemoteAgentTransport("http://127.0.0.1:1")
    with pytest.raises(UsageError):
        create_a2a_sub_agent_tool(
            "x", input_schema=Query, output_schema=Out, url="http://a", transport=transport
        )
    with pytest.raises(UsageError):
        create_a2a_sub_agent_tool(
            "x", input_schema=Query, output_schema=Out, transport=transport, headers={"a": "b"}
        )


@pytest.mark.parametrize("token", ["s3cret", None], ids=["with-token", "without"])
async def test_the_tools_url_and_headers_reach_an_agent_behind_a_token(token: str | None) -> None:
    headers = {"Authorization": f"Bearer {token}"} if token else None
    with anyio.fail_after(LIMIT):
        async with gateway(auth=["s3cret"]) as (url, _):
            tool = create_a2a_sub_agent_tool(
                "child",
                input_schema=Query,
                output_schema=Out,
                url=f"{url}/a2a/typed",
                headers=headers,
                stream_retries=0,
            )
            root = root_agent(tool)
            async with AgentExecutor(MemoryEventStore(), [root]) as executor:
                result = await (await executor.execute(root, "hi", session_id="t1")).result()
            assert isinstance(tool.transport, A2ARemoteAgentTransport)
            await tool.transport.aclose()
    assert result.status == "completed"
    if token:
        assert result.output == 'root got: subagent__child={"answer":"forty-two"}'
    else:
        assert "UNAUTHORIZED" in result.output


async def _peer_card(url: str, name: str) -> Any:
    async with httpx.AsyncClient() as http:
        return await A2ACardResolver(http, f"{url}/{name}").get_agent_card()


async def test_a_given_card_and_client_are_used_and_the_client_stays_open() -> None:
    peer = Peer()
    with anyio.fail_after(LIMIT):
        async with serve(peer.app()) as url:
            peer.base = url
            card = await _peer_card(url, "researcher")
            async with httpx.AsyncClient() as client:
                transport = A2ARemoteAgentTransport(card=card, client=client)
                request = RemoteStartRequest(session_id="c1", agent_type="r", message="why?")
                await transport.start(request)
                events = [event async for event in transport.stream("c1")]
                await transport.aclose()
                assert not client.is_closed  # the caller's client: the caller closes it
                reused = await client.get(f"{url}/researcher/.well-known/agent-card.json")
    assert transport.url is None
    assert isinstance(events[-1], EndEvent)
    assert reused.status_code == 200
    assert peer.seen["researcher"][0].context_id == "c1"


async def test_a_peer_that_says_nothing_for_longer_than_the_timeout_is_a_timeout() -> None:
    peer = Peer()
    with anyio.fail_after(LIMIT):
        async with serve(peer.app()) as url:
            peer.base = url
            async with A2ARemoteAgentTransport(f"{url}/slow", timeout=0.5) as transport:
                request = RemoteStartRequest(session_id="c2", agent_type="s", message="go")
                await transport.start(request)
                await peer.slow_started.wait()
                got: list[Any] = []

                async def read() -> None:
                    async for event in transport.stream("c2"):
                        got.append(event)

                with pytest.raises(TransportTimeoutError):
                    await read()
            peer.release.set()
    assert [e.chunk.delta for e in got if isinstance(e, ChunkEvent)] == ["first "]


async def test_a_stream_on_a_waiting_task_stays_open_until_it_goes_on() -> None:
    peer = Peer()
    with anyio.fail_after(LIMIT):
        async with serve(peer.app()) as url:
            peer.base = url
            transport = A2ARemoteAgentTransport(f"{url}/asker", poll_interval=0.05)
            async with transport, httpx.AsyncClient() as http:
                start = RemoteStartRequest(session_id="c3", agent_type="a", message="q")
                await transport.start(start)
                held = 0
                async for event in transport.stream("c3"):
                    if isinstance(event, ChunkEvent) and isinstance(event.chunk, InputRequired):
                        held = event.sequence
                        break
                status = await transport.get_status("c3")
                rest: list[Any] = []

                async def follow() -> None:  # from what it holds, while the task waits
                    rest.extend([event async for event in transport.stream("c3", held)])

                async with anyio.create_task_group() as tg:
                    tg.start_soon(follow)
                    # Someone else answers the task, over A2A directly.
                    card = await _peer_card(url, "asker")
                    config = ClientConfig(streaming=False, httpx_client=http)
                    other = ClientFactory(config).create(card)
                    answer = Message(
                        role=Role.ROLE_USER,
                        message_id="other",
                        context_id="c3",
                        task_id=status.run_id,
                        parts=[Part(text="red")],
                    )
                    [_ async for _ in other.send_message(SendMessageRequest(message=answer))]
    assert status.status == "paused"
    texts = [
        e.chunk.delta for e in rest if isinstance(e, ChunkEvent) and isinstance(e.chunk, TextDelta)
    ]
    assert texts == ["got red"]
    assert isinstance(rest[-1], EndEvent)
    assert rest[-1].output == {"answer": "colour=red"}
