"""A NATS outage a run waits out shows in the session's ``/status``, and goes with it.

Real processes: a ``nats-server`` with JetStream and ``helix-agents serve``
running ``sleeper`` on a ``nats://`` store (the server answers ``/status`` for
the runs it executes). A session waits in its tool; NATS is stopped; when the
tool ends, the run's next append waits for NATS. Meanwhile ``/status`` answers
at once (from the run's state, without reading the store) with ``waiting``:
``reason`` ``store_unavailable`` and ``since``, when the connection was lost. NATS is
started again on the same port and storage: the session completes, and its
``/status`` no longer has the field. Before, ``/status`` only failed while the
store was down, and the wait showed in the server's log alone. A session
that needs the store meanwhile is ``503 UNAVAILABLE`` with ``Retry-After``
(before: ``500 INTERNAL_ERROR``).
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
NAP = 1.0  # seconds the session waits in its tool: its next append falls in the outage
LIMIT = 90


@asynccontextmanager
async def _serve(nats_url: str, port: int, log: Path) -> AsyncIterator[Process]:
    with log.open("ab") as output:
        process = await anyio.open_process(
            [
                sys.executable,
                "-m",
                "helix_agents.server",
                "serve",
                SLOW,
                "--store",
                f"{nats_url}?stream=OUTAGE",
                "--port",
                str(port),
            ],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", "SLOW_APP_NAP": str(NAP)},
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


async def _status(client: httpx.AsyncClient, url: str, session_id: str) -> dict[str, object]:
    answer = await client.get(f"{url}/status", params={"sessionId": session_id})
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


async def test_status_shows_a_nats_outage_the_run_waits_out_and_drops_it_after(
    tmp_path: Path,
) -> None:
    port, http_port = listen_port(), listen_port()
    url = f"http://127.0.0.1:{http_port}"
    store = tmp_path / "nats"
    nats = NatsServer.start(store, port=port)
    session_id = "outage-status-1"
    params = {"sessionId": session_id}
    try:
        with anyio.fail_after(LIMIT):
            async with (
                _serve(nats.url, http_port, tmp_path / "serve.log"),
                httpx.AsyncClient(timeout=10) as client,
            ):
                while True:
                    try:
                        if (await client.get(f"{url}/health")).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    await anyio.sleep(0.1)  # a subprocess gives no other signal
                answer = await client.post(
                    f"{url}/start",
                    json={"sessionId": session_id, "agentType": "sleeper", "message": "hi"},
                )
                assert answer.status_code == 200, answer.text
                async with client.stream(
                    "GET", f"{url}/sse", params={"sessionId": session_id}
                ) as s:
                    async for data in s.aiter_text():
                        if "tool_start" in data:
                            break
                before = await _status(client, url, session_id)
                assert before["status"] == "running"
                assert "waiting" not in before
                nats.stop()
                stopped = time.time()
                # The tool ends NAP s later; its append then waits for NATS.
                while "waiting" not in (during := await _status(client, url, session_id)):
                    assert during["status"] == "running", during
                    await anyio.sleep(0.1)  # polling /status is what a client does
                waiting = during["waiting"]
                assert isinstance(waiting, dict)
                assert waiting["reason"] == "store_unavailable"
                assert stopped - 1.0 <= float(waiting["since"]) <= time.time()
                assert during["status"] == "running"
                assert during["isExecuting"] is True
                assert during["latestSequence"] == before["latestSequence"]
                # The tool has ended and the run's append waits (the server's log says).
                log = anyio.Path(tmp_path / "serve.log")
                while True:
                    if "appends wait for it" in await log.read_text(errors="replace"):
                        break
                    await anyio.sleep(0.1)  # a subprocess's output is the only signal
                # A session no run here holds needs the store: the outage is a 503
                # the client may retry, not an internal error.
                other = await client.get(f"{url}/status", params={"sessionId": "outage-other"})
                assert other.status_code == 503, other.text
                assert other.json()["code"] == "UNAVAILABLE"
                assert other.headers["Retry-After"] == "2"
                again = await _status(client, url, session_id)  # the same wait, the same since
                assert again["waiting"] == waiting
                assert again["status"] == "running"
                nats = NatsServer.start(store, port=port)
                async with client.stream("GET", f"{url}/sse", params=params) as events:
                    async for _ in events.aiter_text():
                        pass  # the stream ends with the session
                after = await _status(client, url, session_id)
                assert after["status"] == "completed", after
                assert "waiting" not in after
                assert after["isExecuting"] is False
    finally:
        nats.stop()
