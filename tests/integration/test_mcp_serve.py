"""Agents out over MCP: the gateway's ``/mcp`` endpoint, driven by the ``mcp`` SDK's own client.

The gateway (``create_http_app(..., mcp=MCPOptions(...))``) runs on uvicorn over
loopback in the test's loop (so the test can reach the ``AgentServer``), and
``helix-agents serve --mcp`` runs as a subprocess once, with a token.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import mcp_types
import pytest
from _serve_process import ServeProcess
from mcp import Client, MCPError
from mcp.client.streamable_http import streamable_http_client
from mcp_app import Findings, Question, agents
from servers import listen_port, serve

from helix_agents import InProcessTransport
from helix_agents.bridges.mcp.endpoint import INTERRUPT_REASON
from helix_agents.errors import UsageError
from helix_agents.mcp import SESSION_META_KEY, MCPOptions
from helix_agents.messages import UserMessage
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.cli.serve import run_serve
from helix_agents.server.cli.serve_uvicorn import ServeOptions
from helix_agents.server.cli.target import TargetError
from helix_agents.server.gateway.app import DEFAULT_MAX_BODY_BYTES
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

LIMIT = 30
TOKEN = "s3cret"
JSON = "application/json"
ORIGIN = "https://app.example.com"  # the one browser origin the gateways here allow


@asynccontextmanager
async def gateway(*, token: str | None = TOKEN) -> AsyncIterator[tuple[str, AgentServer]]:
    """The agents behind a gateway with ``/mcp``; yields its base URL and the server."""
    server = AgentServer(agents, MemoryEventStore())
    options = MCPOptions(input_models={"researcher": Question}, allowed_origins=[ORIGIN])
    app = create_http_app(server, auth=[token] if token else None, mcp=options)
    async with serve(app) as url:
        yield url, server


@asynccontextmanager
async def client(
    url: str, token: str | None = TOKEN, *, mode: str = "auto"
) -> AsyncIterator[Client]:
    """The SDK's client on ``/mcp``, with the bearer token.

    ``mode``: ``"auto"`` speaks the 2026-07-28 protocol (one POST per request,
    cancellation by closing it); ``"legacy"`` the initialize handshake and a
    session (cancellation by ``notifications/cancelled``).
    """
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http), mode=mode) as mcp,
    ):
        yield mcp


MODES = pytest.mark.parametrize("mode", ["auto", "legacy"])


async def test_every_served_agent_is_a_tool_with_its_input_and_output_schemas() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _), client(url) as mcp:
            listed = {tool.name: tool for tool in (await mcp.list_tools()).tools}
    assert set(listed) == {"researcher", "chatter", "failer", "sleeper", "gated"}
    researcher = listed["researcher"]
    assert researcher.description == "Finds facts about a topic."
    assert researcher.input_schema == Question.model_json_schema()
    assert researcher.output_schema == Findings.model_json_schema()
    chatter = listed["chatter"]
    assert chatter.input_schema["required"] == ["message"]
    assert chatter.output_schema is None


@MODES
async def test_a_call_runs_a_session_and_answers_with_its_typed_output(mode: str) -> None:
    seen: list[tuple[float, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, message))

    with anyio.fail_after(LIMIT):
        async with gateway() as (url, server), client(url, mode=mode) as mcp:
            result = await mcp.call_tool(
                "researcher", {"query": "anyio"}, progress_callback=on_progress
            )
            assert (mode == "legacy") == (mcp.protocol_version != "2026-07-28")
            session_id = (result.meta or {})[SESSION_META_KEY]
            state = await server.executor.state(session_id)
    assert not result.is_error
    assert result.structured_content == {
        "topic": "anyio",
        "facts": ["anyio is real", "anyio is documented"],
    }
    assert isinstance(result.content[0], mcp_types.TextContent)
    assert Findings.model_validate_json(result.content[0].text).topic == "anyio"
    assert state.status == "completed"
    assert state.messages[0] == UserMessage(content="anyio")  # the input's query
    values = [value for value, _ in seen]
    assert values[0] == 0
    assert values == sorted(set(values))  # strictly increasing: the chunks' sequences
    messages = [message for _, message in seen]
    assert messages[0] == f"session {session_id} started"
    assert "researcher calls lookup" in messages
    assert "researcher: lookup done" in messages
    assert "researcher produced its output" in messages
    # The finishing call reads as the output it is, its tool name never shown.
    assert "researcher gives its output" in messages
    assert "researcher: output accepted" in messages
    assert not [message for message in messages if "__finish__" in message]


async def test_an_untyped_agent_answers_with_text_and_a_failure_is_an_error_result() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, server), client(url) as mcp:
            chat = await mcp.call_tool("chatter", {"message": "hi"})
            failed = await mcp.call_tool("failer", {"message": "hi"})
            failed_state = await server.executor.state((failed.meta or {})[SESSION_META_KEY])
    assert not chat.is_error
    assert chat.structured_content is None
    assert [block.text for block in chat.content if isinstance(block, mcp_types.TextContent)] == [
        "hello there"
    ]
    assert failed.is_error
    assert isinstance(failed.content[0], mcp_types.TextContent)
    assert "the model is down" in failed.content[0].text
    assert failed_state.status == "failed"


async def test_bad_arguments_and_unknown_tools_get_mcp_errors_and_start_nothing() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, server), client(url) as mcp:
            bad = await mcp.call_tool("chatter", {"message": "", "extra": 1})
            with pytest.raises(MCPError) as unknown:
                await mcp.call_tool("nobody", {"message": "hi"})
            sessions = await server.store.list_sessions()
    assert bad.is_error
    assert isinstance(bad.content[0], mcp_types.TextContent)
    assert bad.content[0].text.startswith("invalid arguments: ")
    assert "message" in bad.content[0].text
    assert unknown.value.code == mcp_types.INVALID_PARAMS
    assert "Unknown tool: nobody" in unknown.value.message
    assert sessions == []


@MODES
async def test_a_client_that_cancels_its_call_interrupts_the_session(mode: str) -> None:
    waiting = anyio.Event()
    started: list[str] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message and (match := re.fullmatch(r"session (\S+) started", message)):
            started.append(match.group(1))
        if message == "sleeper calls wait":
            waiting.set()

    with anyio.fail_after(LIMIT):
        async with gateway() as (url, server), client(url, mode=mode) as mcp:
            async with anyio.create_task_group() as tg:

                async def call() -> None:
                    await mcp.call_tool(
                        "sleeper", {"message": "nap"}, progress_callback=on_progress
                    )

                tg.start_soon(call)
                await waiting.wait()
                tg.cancel_scope.cancel()  # the client gives up on the call
            [session_id] = started
            await server.executor.wait_idle(session_id)
            state = await server.executor.state(session_id)
    assert state.status == "interrupted"
    assert state.stop_reason == INTERRUPT_REASON


async def test_a_run_that_waits_for_a_person_goes_on_once_answered() -> None:
    paused = anyio.Event()
    session: list[str] = []
    results: list[mcp_types.CallToolResult] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        if message and message.startswith("session "):
            session.append(message.split()[1])
        if message and "waits for people: approval publish (c-publish)" in message:
            paused.set()

    with anyio.fail_after(LIMIT):
        async with gateway() as (url, server), client(url) as mcp:

            async def call() -> None:
                results.append(
                    await mcp.call_tool("gated", {"message": "go"}, progress_callback=on_progress)
                )

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await paused.wait()
                await server.submit_approval(session[0], "c-publish", True)
    [result] = results
    assert not result.is_error
    assert [block.text for block in result.content if isinstance(block, mcp_types.TextContent)] == [
        "posted"
    ]


async def test_the_endpoint_wants_the_token_and_refuses_other_origins_and_big_bodies() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _):
            # the SDK's client reads the refusal's JSON-RPC error (in its task groups)
            refused = pytest.RaisesExc(MCPError, match="^missing or invalid bearer token$")
            with pytest.RaisesGroup(refused, flatten_subgroups=True):
                async with client(url, token="wrong"):
                    pass
            async with httpx.AsyncClient() as http:
                no_token = await http.post(f"{url}/mcp", json={})
                too_big = await http.post(
                    f"{url}/mcp",
                    content=b"x" * (DEFAULT_MAX_BODY_BYTES + 1),
                    headers={
                        "Authorization": f"Bearer {TOKEN}",
                        "Content-Type": "application/json",
                    },
                )
                foreign = await http.post(
                    f"{url}/mcp",
                    json={},
                    headers={"Authorization": f"Bearer {TOKEN}", "Origin": "https://evil.test"},
                )
            # a page of the allowed origin gets through, with the SDK's client
            browser = {"Authorization": f"Bearer {TOKEN}", "Origin": ORIGIN}
            async with (
                httpx2.AsyncClient(headers=browser) as http2,
                Client(streamable_http_client(f"{url}/mcp", http_client=http2)) as mcp,
            ):
                allowed = [tool.name for tool in (await mcp.list_tools()).tools]
    assert too_big.status_code == 413
    assert no_token.status_code == 401
    assert no_token.headers["www-authenticate"] == 'Bearer realm="helix-agents"'
    assert no_token.json()["error"]["message"] == "missing or invalid bearer token"
    assert foreign.status_code == 403
    assert foreign.json()["error"]["message"] == "origin 'https://evil.test' is not allowed"
    assert "chatter" in allowed


async def test_bad_mcp_options_and_a_target_without_agents_are_refused() -> None:
    server = AgentServer(agents, MemoryEventStore())
    with pytest.raises(UsageError, match="not served here: \\['nobody'\\]"):
        create_http_app(server, mcp=MCPOptions(input_models={"nobody": Question}))
    with pytest.raises(UsageError, match="is not a pydantic model"):
        MCPOptions(input_models={"chatter": dict})  # type: ignore[dict-item]
    with pytest.raises(UsageError, match="allowed_origins must be a list of origins"):
        MCPOptions(allowed_origins="https://app.example.com")
    fleet_like = InProcessTransport(server.executor.service)  # a transport, no agents of its own
    with pytest.raises(UsageError, match="MCP serves the agents of an AgentServer"):
        create_http_app(fleet_like, mcp=MCPOptions())


async def test_helix_agents_serve_with_mcp_serves_the_agents_at_slash_mcp(tmp_path: Path) -> None:
    process = ServeProcess(
        tmp_path,
        "tests.integration.mcp_app:agents",
        "--mcp",
        env={"HELIX_TOKEN": TOKEN},
    )
    try:
        with anyio.fail_after(LIMIT):
            await process.start()
            async with client(process.url) as mcp:
                names = sorted(tool.name for tool in (await mcp.list_tools()).tools)
                result = await mcp.call_tool("researcher", {"message": "nats"})
    finally:
        await process.stop()
    assert names == ["chatter", "failer", "gated", "researcher", "sleeper"]
    assert result.structured_content == {
        "topic": "nats",
        "facts": ["nats is real", "nats is documented"],
    }


async def test_serve_refuses_mcp_in_front_of_a_fleet() -> None:
    with pytest.raises(TargetError, match="--mcp serves the agents of MODULE:ATTR, not a fleet"):
        await run_serve(
            None,
            host="127.0.0.1",
            port=listen_port(),
            url="memory://",
            heartbeat=15.0,
            nats_url="nats://127.0.0.1:1",  # never reached: refused first
            options=ServeOptions(mcp=True),
        )
