"""The HTTP gateway and the NATS host, fronting one server, answer a bad request alike.

Both edges decode bodies, check session ids and map failures with one module
(``server/edge.py``), so the same body gets the same ``{"error", "code"}`` on
both: the field a message names, the code, the words. Each case is sent raw
(httpx, nats-py) to both edges; every mismatch is reported at once.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import anyio
import httpx
import msgspec
import nats
import pytest
from conftest import fresh_stream_name
from nats.aio.client import Client as NatsClient
from nats_server import NatsServer
from pydantic import BaseModel
from servers import serve

from helix_agents import define_agent
from helix_agents.ids import encode_session_token
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime, create_http_app
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 20


class Found(BaseModel):
    findings: str


class Settings(BaseModel):
    depth: int = 1


@dataclass
class Edges:
    """One server behind both edges: a gateway's URL and a NATS client."""

    http: httpx.AsyncClient
    nc: NatsClient


@pytest.fixture
async def edges(nats_server: NatsServer) -> AsyncIterator[Edges]:
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    agent = define_agent(
        "researcher",
        output_schema=Found,
        state_schema=Settings,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"})]),
    )
    host_nc = await nats.connect(nats_server.url)
    fleet = NatsRuntime(host_nc, lease_ttl=60)
    server = AgentServer([agent], store, recover=False, runtime=fleet)
    client_nc = await nats.connect(nats_server.url)
    try:
        async with (
            server,
            NatsAgentHost(server),
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url, timeout=LIMIT) as http,
        ):
            yield Edges(http=http, nc=client_nc)
    finally:
        await client_nc.close()
        await host_nc.close()
        await store.close()


# (label, HTTP path, NATS operation, the body's session id for the NATS subject, body)
START = ("/start", "start")
CASES: list[tuple[str, tuple[str, str], str | None, bytes]] = [
    ("malformed JSON", START, None, b"{not json"),
    ("missing sessionId", START, None, b'{"agentType": "researcher", "message": "m"}'),
    ("mistyped sessionId", START, None, b'{"sessionId": 5, "agentType": "researcher"}'),
    (
        "bad sessionId",
        START,
        None,
        b'{"sessionId": "a b", "agentType": "researcher", "message": "m"}',
    ),
    (
        "bad parentSessionId",
        START,
        None,
        b'{"sessionId": "ok-1", "agentType": "researcher", "message": "m",'
        b' "parentSessionId": "a/b"}',
    ),
    (
        "bad rootSessionId",
        START,
        None,
        b'{"sessionId": "ok-1", "agentType": "researcher", "message": "m", "rootSessionId": ""}',
    ),
    (
        "state outside the schema",
        START,
        None,
        b'{"sessionId": "ok-2", "agentType": "researcher", "message": "m",'
        b' "state": {"depth": "deep"}}',
    ),
    ("resume of no session", ("/resume", "resume"), "gone-1", b'{"sessionId": "gone-1"}'),
    (
        "resume with a mistyped message",
        ("/resume", "resume"),
        "gone-1",
        b'{"sessionId": "gone-1", "message": 5}',
    ),
    ("interrupt of no session", ("/interrupt", "interrupt"), "gone-1", b'{"sessionId": "gone-1"}'),
    (
        "abort with a mistyped reason",
        ("/abort", "abort"),
        "gone-1",
        b'{"sessionId": "gone-1", "reason": 5}',
    ),
    ("abort, not an object", ("/abort", "abort"), "gone-1", b"[]"),
    (
        "submit to no session",
        ("/submit-tool-result", "submit"),
        "gone-1",
        b'{"sessionId": "gone-1", "toolCallId": "t1"}',
    ),
]


async def _over_http(edges: Edges, path: str, body: bytes) -> object:
    response = await edges.http.post(path, content=body)
    return response.json()


async def _over_nats(edges: Edges, operation: str, session_id: str | None, body: bytes) -> object:
    token = "researcher" if session_id is None else encode_session_token(session_id)
    reply = await edges.nc.request(f"helix.rpc.{operation}.{token}", body, timeout=5)
    answer = msgspec.json.decode(reply.data)
    return {"error": answer["error"], "code": answer["code"]}


async def test_the_same_bad_request_gets_the_same_answer_on_both_edges(edges: Edges) -> None:
    mismatches: list[str] = []
    with anyio.fail_after(LIMIT):
        for label, (path, operation), session_id, body in CASES:
            http = await _over_http(edges, path, body)
            over_nats = await _over_nats(edges, operation, session_id, body)
            assert isinstance(http, dict), (label, http)
            assert http.get("code"), (label, http)
            if http != over_nats:
                mismatches.append(f"{label}: HTTP {http!r} != NATS {over_nats!r}")
    assert not mismatches, "\n".join(mismatches)
