"""A NATS outage longer than the appends' retries fails no run: they wait, then finish.

Real processes: a ``nats-server`` with JetStream, ``helix-agents host`` running
``sleeper`` sessions (each waits in its tool for a few seconds) and ``serve
--nats`` in front. With 20 sessions in their tools, the NATS server is stopped
for 30 s and started again on the same port and storage. Every session then
completes. Before, an append unanswered three times (15 s) failed its run for
good (``StoreError: ... no acknowledgement after 3 tries``). While NATS is
down the gateway's ``/health`` is ``503 UNAVAILABLE``, not a 500.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from _serve_process import ROOT
from anyio.abc import Process
from nats_server import NatsServer
from servers import listen_port

pytestmark = [pytest.mark.slow, pytest.mark.nats]

SLOW = "tests.integration.slow_app:agents"
SESSIONS = 20
NAP = 6.0  # seconds each session waits in its tool: its next append falls in the outage
OUTAGE = 30.0
LIMIT = 180  # seconds for the whole test; generous, the machine is shared


@asynccontextmanager
async def _process(command: list[str], log: Path, env: dict[str, str]) -> AsyncIterator[Process]:
    with log.open("ab") as output:
        process = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", *command],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(15, shield=True):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def _healthy(client: httpx.AsyncClient, url: str, log: Path) -> None:
    while True:
        try:
            if (await client.get(f"{url}/health")).json().get("agents") == ["sleeper"]:
                return
        except (httpx.TransportError, ValueError):
            pass
        await anyio.sleep(0.1)  # polling: a subprocess gives no other signal


async def _statuses(client: httpx.AsyncClient, url: str, ids: list[str]) -> dict[str, str]:
    found: dict[str, str] = {}
    for session_id in ids:
        answer = await client.get(f"{url}/status", params={"sessionId": session_id})
        found[session_id] = answer.json().get("status", answer.text)
    return found


async def test_a_30_s_nats_outage_fails_no_run(tmp_path: Path) -> None:
    port = listen_port()
    gateway_port = listen_port()
    url = f"http://127.0.0.1:{gateway_port}"
    store = tmp_path / "nats"
    host_log, gateway_log = tmp_path / "host.log", tmp_path / "gateway.log"
    nats = NatsServer.start(store, port=port)
    ids = [f"outage-{n}" for n in range(SESSIONS)]
    try:
        with anyio.fail_after(LIMIT):
            async with (
                _process(["host", SLOW, "--nats", nats.url], host_log, {"SLOW_APP_NAP": str(NAP)}),
                _process(
                    ["serve", "--nats", nats.url, "--port", str(gateway_port)], gateway_log, {}
                ),
                httpx.AsyncClient(timeout=10) as client,
            ):
                await _healthy(client, url, gateway_log)
                for session_id in ids:
                    answer = await client.post(
                        f"{url}/start",
                        json={"sessionId": session_id, "agentType": "sleeper", "message": "hi"},
                    )
                    assert answer.status_code == 200, answer.text
                # Each is in its tool once its stream shows the tool's start.
                for session_id in ids:
                    async with client.stream(
                        "GET", f"{url}/sse", params={"sessionId": session_id}
                    ) as stream:
                        async for data in stream.aiter_text():
                            if "tool_start" in data:
                                break
                nats.stop()
                stopped = time.monotonic()
                health = await client.get(f"{url}/health")
                assert health.status_code == 503, health.text
                assert health.json()["code"] == "UNAVAILABLE"
                await anyio.sleep(OUTAGE)  # the outage itself: nothing to wait for
                nats = NatsServer.start(store, port=port)
                outage = time.monotonic() - stopped
                await _healthy(client, url, gateway_log)
                while True:
                    statuses = await _statuses(client, url, ids)
                    assert "failed" not in statuses.values(), (
                        statuses,
                        host_log.read_text()[-3000:],
                    )
                    if set(statuses.values()) == {"completed"}:
                        break
                    await anyio.sleep(0.5)  # polling: the runs finish in another process
    finally:
        nats.stop()
    assert outage >= OUTAGE
    text = host_log.read_text()
    assert "NATS is out of reach" in text
    assert "NATS is back after" in text
