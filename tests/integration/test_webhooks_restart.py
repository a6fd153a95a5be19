"""Webhooks across a crash, and on a durable runtime (specs/server.md "Webhooks").

- ``helix-agents serve --webhook-secret ... --webhook-allow 127.0.0.1`` in a
  subprocess on a SQLite store: SIGKILLed after its first attempt failed (500),
  mid-backoff, and started again, it still delivers: the next attempt's time
  and the attempts so far are read back from the log.
- A DBOS gateway (``dbos_server``) delivers from the log the same way: its
  sessions run as DBOS workflows, the deliverer follows their logs (a pause for
  a child's approval, then the completion).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import pytest
from _serve_process import ServeProcess
from _webhook_kit import Receiver
from remote_app import expected_summary
from servers import serve

from helix_agents.dbos import DbosOptions, dbos_server
from helix_agents.events import Webhook, WebhookDelivered
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server.webhooks import WebhookSettings
from helix_agents.stores import MemoryEventStore
from helix_agents.webhooks import SIGNATURE_HEADER, verify
from tests.integration.temporal_app import agents as durable_agents

pytestmark = [pytest.mark.slow]

SECRET = "restart-secret"
LIVENESS = 60  # seconds: generous, the machine is shared


async def _status(client: httpx.AsyncClient, url: str, session_id: str) -> dict:
    answer = await client.get(f"{url}/status", params={"sessionId": session_id})
    assert answer.status_code == 200, answer.text
    status: dict = answer.json()
    return status


async def _settled(client: httpx.AsyncClient, url: str, session_id: str) -> dict:
    """The session's one delivery, once ``/status`` shows it delivered."""
    while True:
        [entry] = (await _status(client, url, session_id))["webhooks"]
        if entry["delivered"]:
            return dict(entry)
        # Another process writes the log: polling /status is the only signal.
        await anyio.sleep(0.05)


async def test_a_delivery_mid_backoff_survives_a_sigkill_and_a_restart(tmp_path: Path) -> None:
    receiver = Receiver(failures=1)
    server = ServeProcess(
        tmp_path,
        "tests.integration.remote_app:agents",
        "--webhook-allow",
        "127.0.0.1",
        # The second attempt is due 2.5 to 5 s after the first failed: the kill comes first.
        "--webhook-backoff",
        "5",
        env={"HELIX_WEBHOOK_SECRET": SECRET},
    )
    try:
        async with serve(receiver.app()) as hook, httpx.AsyncClient(timeout=10) as client:
            await server.start()
            answer = await client.post(
                f"{server.url}/start",
                json={
                    "sessionId": "crash",
                    "agentType": "summarizer",
                    "message": "survive this",
                    "webhook": {"url": f"{hook}/hook", "events": ["completed"]},
                },
            )
            assert answer.status_code == 200, answer.text
            with anyio.fail_after(LIVENESS):
                await receiver.wait_for(1)
                # The failure is recorded once /status shows it: then the kill.
                while True:
                    hooks = (await _status(client, server.url, "crash")).get("webhooks", [])
                    if hooks and hooks[0]["lastError"] == "HTTP 500":
                        break
                    await anyio.sleep(0.05)
            [before] = hooks
            assert (before["attempts"], before["delivered"]) == (1, False)
            assert before["nextAt"] is not None
            await server.kill()
            assert len(receiver.received) == 1  # nothing more while it was down
            await server.start()
            with anyio.fail_after(LIVENESS):
                await receiver.wait_for(2)
                after = await _settled(client, server.url, "crash")
    finally:
        await server.stop()
    assert len(receiver.received) == 2
    first, second = receiver.received
    assert first.json == second.json  # the same delivery, body and id
    assert second.json["output"] == expected_summary("survive this")
    verify(SECRET, second.body, second.headers[SIGNATURE_HEADER.lower()])
    assert (after["attempts"], after["delivered"], after["failed"]) == (2, True, False)


async def test_a_dbos_gateway_delivers_a_childs_approval_then_the_completion(
    tmp_path: Path,
) -> None:
    """On DBOS the runs execute as workflows; the gateway's deliverer follows the logs. The
    root pauses for its child's approval (a person must answer at the root): delivered as
    ``paused_for_person``; approved, the tree resumes past the delivery facts in the log and
    completes: delivered too."""
    receiver = Receiver()
    store = MemoryEventStore()
    options = DbosOptions(
        system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}", polling_interval=0.02
    )
    async with serve(receiver.app()) as hook:
        server = dbos_server(durable_agents, store, options)
        server.deliver_webhooks(WebhookSettings(secret=SECRET, allow=("127.0.0.1",)))
        with anyio.fail_after(LIVENESS):
            async with server:
                await server.start(
                    RemoteStartRequest(
                        session_id="durable",
                        agent_type="hitl_boss",
                        message="pay",
                        webhook=Webhook(url=f"{hook}/hook"),
                    )
                )
                [paused] = await receiver.wait_for(1)
                [entry] = paused.json["pendingInputs"]
                assert (entry["kind"], entry["toolName"]) == ("approval", "pay")
                assert entry["ownerSessionId"] == "durable-sub-c1"
                answer = await server.submit_approval("durable", entry["toolCallId"], True)
                assert answer.resumed
                await receiver.wait_for(2)
                seen = 0
                async for _ in store.tail("durable", kinds=(WebhookDelivered,)):
                    seen += 1
                    if seen == 2:
                        break
                status = await server.get_status("durable")
    first, second = receiver.received
    for got in receiver.received:
        verify(SECRET, got.body, got.headers[SIGNATURE_HEADER.lower()])
    assert (first.json["event"], first.json["status"]) == ("paused_for_person", "paused")
    assert (second.json["event"], second.json["output"]) == ("completed", "payment done")
    assert status.status == "completed"
    assert isinstance(status.webhooks, list)
    assert [(w.event, w.attempts, w.delivered) for w in status.webhooks] == [
        ("paused_for_person", 1, True),
        ("completed", 1, True),
    ]
