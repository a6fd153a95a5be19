"""Webhooks on a NATS fleet: two ``host --webhook-secret`` processes, ``serve --nats`` in front.

Sessions started through the gateway land on either host; whichever runs one
delivers its webhook from the log in JetStream: one POST per run end across
the fleet, each attempt claimed once (``webhook_attempted`` by
compare-and-append), the attempts visible in ``/status`` through the gateway.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx
import pytest
from _webhook_kit import Receiver
from anyio.abc import Process
from nats_server import NatsServer
from remote_app import expected_summary
from servers import listen_port, serve

from helix_agents.events import WebhookAttempted
from helix_agents.stores import JetStreamEventStore
from helix_agents.webhooks import SIGNATURE_HEADER, verify

pytestmark = [pytest.mark.slow, pytest.mark.nats]

ROOT = Path(__file__).parents[2]
TARGET = "tests.integration.remote_app:agents"
SECRET = "fleet-secret"
LIVENESS = 60


@asynccontextmanager
async def _process(args: list[str], log: Path, ready: str) -> AsyncIterator[Process]:
    """Run ``helix-agents ARGS``; wait (bounded) for ``ready`` in its output; stop it by PID."""
    with log.open("ab") as out:
        process = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "HELIX_WEBHOOK_SECRET": SECRET},
        )
    try:
        with anyio.fail_after(30):
            while ready not in (text := await anyio.Path(log).read_text(errors="replace")):
                assert process.returncode is None, text
                await anyio.sleep(0.05)  # a subprocess's output is the only signal
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()


async def test_a_fleet_delivers_each_run_end_once(tmp_path: Path) -> None:
    receiver = Receiver(failures=1)  # the first POST fails: one session is retried
    sessions = [f"fleet-{n}" for n in range(4)]
    with NatsServer.start(tmp_path / "nats") as nats_server:
        port = listen_port()
        host = ["host", TARGET, "--nats", nats_server.url, "--webhook-allow", "127.0.0.1"]
        host += ["--webhook-backoff", "0.2"]
        gateway = ["serve", "--nats", nats_server.url, "--port", str(port)]
        url = f"http://127.0.0.1:{port}"
        async with (
            serve(receiver.app()) as hook,
            _process(host, tmp_path / "host1.log", "helix-agents: hosting"),
            _process(host, tmp_path / "host2.log", "helix-agents: hosting"),
            _process(gateway, tmp_path / "gateway.log", "Uvicorn running"),
            httpx.AsyncClient(timeout=10) as client,
        ):
            for session_id in sessions:
                answer = await client.post(
                    f"{url}/start",
                    json={
                        "sessionId": session_id,
                        "agentType": "summarizer",
                        "message": f"about {session_id}",
                        "webhook": {"url": f"{hook}/hook"},
                    },
                )
                assert answer.status_code == 200, answer.text
            with anyio.fail_after(LIVENESS):
                await receiver.wait_for(len(sessions) + 1)
                statuses = {}
                for session_id in sessions:
                    while True:
                        status = (
                            await client.get(f"{url}/status", params={"sessionId": session_id})
                        ).json()
                        if status.get("webhooks") and status["webhooks"][0]["delivered"]:
                            break
                        # Other processes write the logs: polling /status is the only signal.
                        await anyio.sleep(0.05)
                    statuses[session_id] = status
            await anyio.sleep(1)  # room for a duplicate POST, were there one to come
        store = await JetStreamEventStore.connect(nats_server.url)
        try:
            attempts = {
                session_id: [
                    e.attempt
                    for e in await store.read(session_id)
                    if isinstance(e, WebhookAttempted)
                ]
                for session_id in sessions
            }
        finally:
            await store.close()
    # One POST per session, plus the one retried: no attempt made twice.
    assert len(receiver.received) == len(sessions) + 1
    by_session: dict[str, int] = {}
    for got in receiver.received:
        verify(SECRET, got.body, got.headers[SIGNATURE_HEADER.lower()])
        body = got.json
        assert body["output"] == expected_summary(f"about {body['sessionId']}")
        by_session[body["sessionId"]] = by_session.get(body["sessionId"], 0) + 1
    assert sorted(by_session.values()) == [1] * (len(sessions) - 1) + [2]
    assert sorted(len(a) for a in attempts.values()) == [1] * (len(sessions) - 1) + [2]
    for session_id, status in statuses.items():
        [entry] = status["webhooks"]
        assert entry["attempts"] == len(attempts[session_id])
