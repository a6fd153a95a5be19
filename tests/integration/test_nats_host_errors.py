"""A host answers every raw NATS request, bad ones with the protocol's error shape, and
changes nothing for them (what a client that bypasses the transport would see)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import msgspec
import nats
import pytest
from conftest import fresh_stream_name
from nats.aio.client import Client as NatsClient
from pydantic import BaseModel
from servers import serve

from helix_agents import define_agent
from helix_agents.ids import encode_session_token
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime, create_http_app
from helix_agents.server.gateway.app import DEFAULT_MAX_BODY_BYTES
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = pytest.mark.nats


class Found(BaseModel):
    findings: str


@pytest.fixture
async def raw(nats_server: object) -> AsyncIterator[tuple[NatsClient, JetStreamEventStore]]:
    url = nats_server.url  # type: ignore[attr-defined]
    store = await JetStreamEventStore.connect(url, stream=fresh_stream_name())
    agent = define_agent(
        "researcher",
        output_schema=Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"})]),
    )
    host_nc = await nats.connect(url)
    client = await nats.connect(url)
    try:
        async with NatsAgentHost(AgentServer([agent], store, runtime=NatsRuntime(host_nc))):
            yield client, store
    finally:
        await client.close()
        await host_nc.close()
        await store.close()


async def _ask(client: NatsClient, subject: str, body: bytes) -> dict[str, object]:
    with anyio.fail_after(10):
        reply = await client.request(subject, body, timeout=5)
    decoded: dict[str, object] = msgspec.json.decode(reply.data)
    return decoded


@pytest.mark.parametrize(
    ("subject", "body", "needle"),
    [
        ("helix.rpc.start.researcher", b"{not json", "malformed JSON"),
        ("helix.rpc.start.researcher", b'{"agentType": "researcher"}', "sessionId"),
        (
            "helix.rpc.start.researcher",
            b'{"sessionId": 5, "agentType": "researcher", "message": "m"}',
            "sessionId",
        ),
        (
            "helix.rpc.start.researcher",
            b'{"sessionId": "a b", "agentType": "researcher", "message": "m"}',
            "invalid session id",
        ),
        (
            "helix.rpc.start.researcher",
            b'{"sessionId": "s1", "agentType": "other", "message": "m"}',
            "different agents",
        ),
        ("helix.rpc.status.s1", b'{"sessionId": "s2"}', "different sessions"),
        ("helix.rpc.status.bad_x", b'{"sessionId": "bad_x"}', "bad session token"),
        ("helix.rpc.interrupt.s1", b"[]", "invalid request"),
    ],
)
async def test_bad_requests_get_the_error_shape_and_change_nothing(
    raw: tuple[NatsClient, JetStreamEventStore], subject: str, body: bytes, needle: str
) -> None:
    client, store = raw
    answer = await _ask(client, subject, body)
    assert answer["code"] == "INVALID_REQUEST", answer
    assert needle in str(answer["error"])
    assert answer.get("result") is None
    assert await store.list_sessions() == []


async def test_unknown_sessions_are_not_found_and_a_good_start_works(
    raw: tuple[NatsClient, JetStreamEventStore],
) -> None:
    client, store = raw
    token = encode_session_token("no.such_one")
    answer = await _ask(client, f"helix.rpc.status.{token}", b'{"sessionId": "no.such_one"}')
    assert answer["code"] == "NOT_FOUND"
    started = await _ask(
        client,
        "helix.rpc.start.researcher",
        b'{"sessionId": "s1", "agentType": "researcher", "message": "go"}',
    )
    assert started["error"] is None
    assert isinstance(started["result"], dict)
    assert started["result"]["sessionId"] == "s1"
    assert await store.list_sessions() == ["s1"]


@pytest.mark.slow
async def test_a_body_over_the_nats_message_limit_is_413_at_the_gateway(
    raw: tuple[NatsClient, JetStreamEventStore],
) -> None:
    """Within the gateway's 1 MiB but, with the subject, over what NATS takes in one message.

    It was ``500 agent host unreachable`` (``MaxPayloadError`` as a transport
    failure); the caller can do something about it: ``413``, nothing sent.
    """
    client, store = raw
    app = create_http_app(NatsRemoteAgentTransport(client, store, max_retries=0))
    text = "x" * (DEFAULT_MAX_BODY_BYTES - 100)
    body = {"sessionId": "s-big", "agentType": "researcher", "message": text}
    assert client.max_payload <= DEFAULT_MAX_BODY_BYTES  # nats-server's default: 1 MiB
    async with serve(app) as url, httpx.AsyncClient(base_url=url, timeout=20) as http:
        with anyio.fail_after(20):
            answer = await http.post("/start", json=body)
            small = await http.post("/start", json={**body, "message": "go"})
    assert answer.status_code == 413, answer.text
    assert answer.json()["code"] == "PAYLOAD_TOO_LARGE"
    assert "NATS message limit" in answer.json()["error"]
    assert small.status_code == 200, small.text  # the same request, smaller, goes through
    assert await store.list_sessions() == ["s-big"]
