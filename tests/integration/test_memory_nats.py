"""Memory on a NATS fleet: a session on one host reads what a session on another wrote.

``helix-agents host`` processes (the keeper of ``memory_app.py``) behind a
``serve --nats`` gateway on one nats-server. The first host runs the write
and is stopped before the second starts, so the read runs on another host by
construction; both reach the JetStream KV bucket beside the stream, and so
does the gateway's ``GET /memory``.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from nats_server import NatsServer
from servers import listen_port
from test_nats_fleet import _process

from helix_agents.events import MemoryRead, MemoryWritten
from helix_agents.memory import memory_of
from helix_agents.stores import JetStreamEventStore, JetStreamMemoryStore
from tests.integration.memory_app import PREFS
from tests.integration.test_memory_runs import _answer, _of, _run_over_http

pytestmark = [pytest.mark.slow, pytest.mark.nats]

TARGET = "tests.integration.memory_app:agents"
LIMIT = 90


async def test_a_host_reads_what_a_session_on_another_host_wrote(tmp_path: Path) -> None:
    with anyio.fail_after(LIMIT), NatsServer.start(tmp_path / "nats") as server:
        port = listen_port()
        host = ["host", TARGET, "--nats", server.url]
        gateway = ["serve", "--nats", server.url, "--port", str(port)]
        async with (
            _process(gateway, tmp_path / "gateway.log", "Uvicorn running"),
            httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=15) as client,
        ):
            async with _process(host, tmp_path / "host1.log", "helix-agents: hosting"):
                await _run_over_http(client, "w", "write nl")
            async with _process(host, tmp_path / "host2.log", "helix-agents: hosting"):
                await _run_over_http(client, "r", "read")
            listed = (await client.get("/memory", params={"namespace": "user-7.prefs"})).json()
        store = await JetStreamEventStore.connect(server.url)
        try:
            written, read = await store.read("w"), await store.read("r")
            memory = memory_of(store)
            assert isinstance(memory, JetStreamMemoryStore)
            item = await memory.get(("_", *PREFS), "language")
        finally:
            await store.close()
    assert _answer(read) == {"found": {"lang": "nl"}, "version": 1}
    assert [event.namespace for event in _of(MemoryWritten, written)] == [("_", *PREFS)]
    assert [len(event.items) for event in _of(MemoryRead, read)] == [1]
    assert item is not None
    assert item.value == {"lang": "nl"}
    assert [item["value"] for item in listed["items"]] == [{"lang": "nl"}]
