"""``serve``'s access flags on a real process: ``--token`` / ``$HELIX_TOKEN``, ``--cors-origin``,
``--log-level``, and ``GET /sessions`` through the gateway (also in front of a NATS fleet).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from nats_server import NatsServer
from servers import listen_port

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
TARGET = "tests.integration.remote_app:agents"
READY = "Uvicorn running on"  # printed once the port is bound (startup completes before)
TOKEN = "s3cret-token"
APP = "http://app.test:8080"


@asynccontextmanager
async def running(
    args: list[str], log: Path, *, env: Mapping[str, str] | None = None, ready: str = READY
) -> AsyncIterator[str]:
    """``helix-agents ARGS`` (``--port P`` for serve) until ``ready`` is in its output.

    Yields the base URL of ``serve``'s port.
    """
    port = listen_port()
    listen = ["--port", str(port)] if args[0] == "serve" else []
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}
    with log.open("ab") as out:
        process = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", *args, *listen],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**environ, "PYTHONUNBUFFERED": "1", **(env or {})},
        )
    try:
        with anyio.fail_after(30):
            while ready not in (text := await anyio.Path(log).read_text(errors="replace")):
                assert process.returncode is None, text
                await anyio.sleep(0.05)  # a subprocess's output is the only signal
        yield f"http://127.0.0.1:{port}"
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


def start_body(session_id: str, agent: str = "summarizer") -> dict[str, object]:
    return {"sessionId": session_id, "agentType": agent, "message": "hi"}


async def assert_bearer_required(client: httpx.AsyncClient, url: str) -> None:
    """Every route but /health needs the token; with it, requests go through."""
    assert (await client.get(f"{url}/health")).status_code == 200
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": TOKEN}):
        refused = await client.post(f"{url}/start", json=start_body("s-x"), headers=headers)
        assert refused.status_code == 401, refused.text
        assert refused.json()["code"] == "UNAUTHORIZED"
        listed = await client.get(f"{url}/sessions", headers=headers)
        assert listed.status_code == 401
    ok = {"Authorization": f"Bearer {TOKEN}"}
    started = await client.post(f"{url}/start", json=start_body("s-1"), headers=ok)
    assert started.status_code == 200, started.text
    status = await client.get(f"{url}/status", params={"sessionId": "s-1"}, headers=ok)
    assert status.status_code == 200


async def test_token_flag_cors_and_log_level(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    args = ["serve", TARGET, "--store", "memory://", "--token", TOKEN]
    args += ["--cors-origin", APP, "--log-level", "warning"]
    # at --log-level warning uvicorn's INFO lines never come: wait for /health instead
    async with (
        running(args, log, ready="serving") as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        with anyio.fail_after(30):
            while True:
                try:
                    if (await client.get(f"{url}/health")).status_code == 200:
                        break
                except httpx.TransportError:
                    await anyio.sleep(0.05)  # not listening yet
        await assert_bearer_required(client, url)
        # Not a terminal: the token form of the address, never the token itself.
        assert f"helix-agents: inspector at {url}/ui#token=YOUR_TOKEN\n" in log.read_text()
        assert TOKEN not in log.read_text()
        preflight = await client.options(
            f"{url}/start",
            headers={
                "Origin": APP,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 200  # answered before auth: a preflight has no token
        assert preflight.headers["access-control-allow-origin"] == APP
        assert "POST" in preflight.headers["access-control-allow-methods"]
        assert "authorization" in preflight.headers["access-control-allow-headers"].lower()
        # A preflight the policy refuses is a 400 in the protocol's shape, not text/plain.
        refused = [
            {"Origin": APP, "Access-Control-Request-Method": "DELETE"},
            {
                "Origin": APP,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "x-evil",
            },
            {"Origin": "http://evil.test", "Access-Control-Request-Method": "POST"},
        ]
        for headers, what in zip(refused, ("method", "headers", "origin"), strict=True):
            answer = await client.options(f"{url}/start", headers=headers)
            assert answer.status_code == 400, answer.text
            assert answer.headers["content-type"] == "application/json"
            assert answer.json() == {"error": f"Disallowed CORS {what}", "code": "INVALID_REQUEST"}
        ok = {"Authorization": f"Bearer {TOKEN}", "Origin": APP}
        listed = await client.get(f"{url}/sessions", headers=ok)
        assert listed.headers["access-control-allow-origin"] == APP
        other = await client.get(f"{url}/sessions", headers={**ok, "Origin": "http://evil.test"})
        assert "access-control-allow-origin" not in other.headers
    output = log.read_text()
    assert "(bearer token required)" in output
    assert f"(CORS: {APP})" in output
    assert TOKEN not in output
    assert "INFO" not in output  # --log-level warning


async def test_helix_token_from_the_environment_and_cors_off_by_default(tmp_path: Path) -> None:
    log = tmp_path / "serve.log"
    async with (
        running(["serve", TARGET, "--store", "memory://"], log, env={"HELIX_TOKEN": TOKEN}) as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        await assert_bearer_required(client, url)
        preflight = await client.options(
            f"{url}/start",
            headers={"Origin": APP, "Access-Control-Request-Method": "POST"},
        )
        assert "access-control-allow-origin" not in preflight.headers
        assert preflight.status_code == 405  # no CORS: OPTIONS is just another method
    assert "INFO" in log.read_text()  # the default level shows uvicorn's INFO lines


async def test_sessions_lists_through_the_gateway(tmp_path: Path) -> None:
    async with (
        running(["serve", TARGET, "--store", "memory://"], tmp_path / "serve.log") as url,
        httpx.AsyncClient(timeout=10) as client,
    ):
        for n, agent in enumerate(["summarizer", "summarizer", "researcher"]):
            started = await client.post(f"{url}/start", json=start_body(f"s-{n}", agent))
            assert started.status_code == 200, started.text
        everything = (await client.get(f"{url}/sessions")).json()
        assert [s["sessionId"] for s in everything["sessions"]] == ["s-2", "s-1", "s-0"]
        assert everything["nextCursor"] is None
        summary = everything["sessions"][0]
        assert summary["agentType"] == "researcher"
        assert {"status", "createdTs", "updatedTs", "latestSequence", "parentSessionId"} <= set(
            summary
        )
        first = (await client.get(f"{url}/sessions", params={"limit": 1})).json()
        assert [s["sessionId"] for s in first["sessions"]] == ["s-2"]
        rest = await client.get(
            f"{url}/sessions", params={"limit": 5, "cursor": first["nextCursor"]}
        )
        assert [s["sessionId"] for s in rest.json()["sessions"]] == ["s-1", "s-0"]
        filtered = await client.get(
            f"{url}/sessions", params={"agent": "summarizer", "topLevel": "true"}
        )
        assert [s["sessionId"] for s in filtered.json()["sessions"]] == ["s-1", "s-0"]
        for params in ({"status": "done"}, {"limit": "0"}, {"cursor": "x"}, {"topLevel": "yes"}):
            refused = await client.get(f"{url}/sessions", params=params)
            assert refused.status_code == 400, params
            assert refused.json()["code"] == "INVALID_REQUEST"


@pytest.mark.nats
async def test_the_fleet_gateway_takes_the_token_and_lists_the_fleets_sessions(
    tmp_path: Path,
) -> None:
    with NatsServer.start(tmp_path / "nats") as nats:
        async with (
            running(
                ["host", TARGET, "--nats", nats.url],
                tmp_path / "host.log",
                ready="helix-agents: hosting",
            ),
            running(
                ["serve", "--nats", nats.url],
                tmp_path / "gateway.log",
                env={"HELIX_TOKEN": TOKEN},
            ) as url,
            httpx.AsyncClient(timeout=10) as client,
        ):
            await assert_bearer_required(client, url)
            ok = {"Authorization": f"Bearer {TOKEN}"}
            listed = (await client.get(f"{url}/sessions", headers=ok)).json()
            assert [s["sessionId"] for s in listed["sessions"]] == ["s-1"]
            assert listed["sessions"][0]["agentType"] == "summarizer"
