"""Signed webhooks from the log, over real servers (specs/server.md "Webhooks").

The gateway is ``create_http_app(AgentServer(..., webhooks=...))`` on uvicorn;
the receiver is a Starlette app on uvicorn at 127.0.0.1 (``_webhook_kit``),
allowed with ``--webhook-allow 127.0.0.1``'s equivalent. The deliveries are
read back from the log and from ``/status``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from _webhook_kit import Receiver
from hitl_app import RM_ARGS, worker
from remote_app import expected_summary, summarizer
from servers import serve

from helix_agents import AgentConfig, EventStore
from helix_agents.events import (
    Completed,
    Event,
    RunStarted,
    SessionCreated,
    Webhook,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
)
from helix_agents.runtime.writer import stamp
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.webhooks import WebhookDeliverer, WebhookSettings
from helix_agents.stores import MemoryEventStore
from helix_agents.webhooks import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    WebhookSignatureError,
    verify,
)

SECRET = "test-webhook-secret"
LIVENESS = 30  # seconds: generous, the machine is shared


def settings(*allow: str, **knobs: Any) -> WebhookSettings:
    """Fast retries (a tenth of a second, doubling), loopback allowed when asked."""
    return WebhookSettings(secret=SECRET, allow=allow, backoff=0.1, **knobs)


@asynccontextmanager
async def gateway(
    agents: list[AgentConfig], store: EventStore, webhooks: WebhookSettings | None
) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    """The gateway's URL and a client, its server delivering with ``webhooks``."""
    server = AgentServer(agents, store, webhooks=webhooks)
    async with serve(create_http_app(server)) as url, httpx.AsyncClient(timeout=10) as client:
        yield url, client


async def delivered(store: EventStore, session_id: str, count: int = 1) -> None:
    """Wait until ``count`` deliveries of the session are recorded delivered."""
    seen = 0
    async for _ in store.tail(session_id, kinds=(WebhookDelivered,)):
        seen += 1
        if seen == count:
            return


async def test_a_receiver_failing_twice_gets_three_signed_attempts_and_one_delivery() -> None:
    receiver = Receiver(failures=2)
    store = MemoryEventStore()
    async with (
        serve(receiver.app()) as hook,
        gateway([summarizer], store, settings("127.0.0.1")) as (url, client),
    ):
        answer = await client.post(
            f"{url}/start",
            json={
                "sessionId": "w1",
                "agentType": "summarizer",
                "message": "hello webhooks",
                "webhook": {"url": f"{hook}/hook"},
            },
        )
        assert answer.status_code == 200, answer.text
        with anyio.fail_after(LIVENESS):
            await delivered(store, "w1")
        status = (await client.get(f"{url}/status", params={"sessionId": "w1"})).json()

    log = await store.read("w1")
    [completed] = [e for e in log if isinstance(e, Completed)]
    delivery_id = f"w1#{completed.seq}"
    # Exactly three attempts, the third accepted; each signed, the same delivery.
    assert len(receiver.received) == 3
    for got in receiver.received:
        assert got.headers[DELIVERY_HEADER.lower()] == delivery_id
        assert got.headers[EVENT_HEADER.lower()] == "completed"
        verify(SECRET, got.body, got.headers[SIGNATURE_HEADER.lower()])
        assert got.json == {
            "deliveryId": delivery_id,
            "sessionId": "w1",
            "agentType": "summarizer",
            "event": "completed",
            "status": "completed",
            "runId": status["runId"],
            "seq": completed.seq,
            "output": expected_summary("hello webhooks"),
            "error": None,
        }
    # A forged, a tampered or a stale request is refused by the same helper.
    accepted = receiver.received[-1]
    header = accepted.headers[SIGNATURE_HEADER.lower()]
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify("another secret", accepted.body, header)
    with pytest.raises(WebhookSignatureError, match="does not match"):
        verify(SECRET, accepted.body.replace(b"completed", b"failed", 1), header)
    stamped = int(header.split(",")[0].removeprefix("t="))
    with pytest.raises(WebhookSignatureError, match="replay"):
        verify(SECRET, accepted.body, header, now=stamped + 301)
    # The log is the outbox: every attempt, its answer, the delivery.
    progress = [
        (type(e).__name__, e.attempt)
        for e in log
        if isinstance(e, WebhookAttempted | WebhookFailed | WebhookDelivered)
    ]
    assert progress == [
        ("WebhookAttempted", 1),
        ("WebhookFailed", 1),
        ("WebhookAttempted", 2),
        ("WebhookFailed", 2),
        ("WebhookAttempted", 3),
        ("WebhookDelivered", 3),
    ]
    assert {e.error for e in log if isinstance(e, WebhookFailed)} == {"HTTP 500"}
    assert status["status"] == "completed"
    assert status["webhooks"] == [
        {
            "url": f"{hook}/hook",
            "event": "completed",
            "deliveryId": delivery_id,
            "seq": completed.seq,
            "attempts": 3,
            "delivered": True,
            "failed": False,
            "lastError": None,
            "nextAt": None,
        }
    ]


@pytest.mark.parametrize(
    ("target", "why"),
    [
        ("RECEIVER", "loopback"),
        ("http://localhost:9/hook", "loopback"),
        ("http://10.0.0.1/hook", "private"),
        ("http://169.254.169.254/latest/meta-data", "link-local"),
        ("http://[::1]:9/hook", "loopback"),
        ("http://0.0.0.0:9/hook", "unspecified"),
        ("ftp://example.com/hook", "scheme must be http or https"),
        ("http://user:pw@example.com/hook", "credentials"),
    ],
)
async def test_a_webhook_to_a_forbidden_address_is_refused_at_start(target: str, why: str) -> None:
    """Without ``--webhook-allow``, loopback, private, link-local... are refused: 400 in the
    protocol's error shape, and nothing is written (no session)."""
    receiver = Receiver()
    store = MemoryEventStore()
    async with (
        serve(receiver.app()) as hook,
        gateway([summarizer], store, settings()) as (url, client),
    ):
        webhook = f"{hook}/hook" if target == "RECEIVER" else target
        answer = await client.post(
            f"{url}/start",
            json={
                "sessionId": "refused",
                "agentType": "summarizer",
                "message": "hi",
                "webhook": {"url": webhook},
            },
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["code"] == "INVALID_REQUEST"
        assert why in answer.json()["error"]
        missing = await client.get(f"{url}/status", params={"sessionId": "refused"})
        assert missing.status_code == 404
    assert await store.list_sessions() == []
    assert receiver.received == []


async def test_a_server_without_a_secret_refuses_a_start_naming_a_webhook() -> None:
    store = MemoryEventStore()
    async with gateway([summarizer], store, None) as (url, client):
        answer = await client.post(
            f"{url}/start",
            json={
                "sessionId": "nosecret",
                "agentType": "summarizer",
                "message": "hi",
                "webhook": {"url": "https://hooks.example.com/x"},
            },
        )
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "INVALID_REQUEST"
    assert "webhook secret" in answer.json()["error"]
    assert await store.list_sessions() == []


async def test_a_run_paused_for_an_approval_is_delivered_then_its_completion() -> None:
    receiver = Receiver()
    store = MemoryEventStore()
    async with (
        serve(receiver.app()) as hook,
        gateway([worker("w", ("rm",))], store, settings("127.0.0.1/32")) as (url, client),
    ):
        answer = await client.post(
            f"{url}/start",
            json={
                "sessionId": "p1",
                "agentType": "w",
                "message": "clean up",
                "webhook": {"url": f"{hook}/hook"},
            },
        )
        assert answer.status_code == 200, answer.text
        with anyio.fail_after(LIVENESS):
            [paused] = await receiver.wait_for(1)
        body = paused.json
        assert body["event"] == "paused_for_person"
        assert body["status"] == "paused"
        [entry] = body["pendingInputs"]
        assert (entry["kind"], entry["toolName"], entry["arguments"]) == ("approval", "rm", RM_ARGS)
        approval = await client.post(
            f"{url}/submit-approval",
            json={"sessionId": "p1", "toolCallId": entry["toolCallId"], "approved": True},
        )
        assert approval.status_code == 200, approval.text
        with anyio.fail_after(LIVENESS):
            await receiver.wait_for(2)
            await delivered(store, "p1", 2)
        status = (await client.get(f"{url}/status", params={"sessionId": "p1"})).json()
    first, second = receiver.received
    assert second.json["event"] == "completed"
    assert second.json["output"] == {"answer": 'rm={"removed":"/tmp/scratch"}'}
    assert first.headers[DELIVERY_HEADER.lower()] != second.headers[DELIVERY_HEADER.lower()]
    for got in receiver.received:
        verify(SECRET, got.body, got.headers[SIGNATURE_HEADER.lower()])
    assert [(w["event"], w["attempts"], w["delivered"]) for w in status["webhooks"]] == [
        ("paused_for_person", 1, True),
        ("completed", 1, True),
    ]


class SlowReads:
    """A store whose reads take a while after reading: two readers read the same head."""

    def __init__(self, inner: MemoryEventStore) -> None:
        self.inner = inner

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        events = await self.inner.read(session_id, from_seq)
        await anyio.sleep(0.05)
        return events

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


async def test_two_deliverers_on_one_store_make_each_attempt_once() -> None:
    """Two processes (fleet hosts) follow the same session and read the same head: the
    compare-and-append of ``webhook_attempted`` lets one of them make the attempt, the
    other sees it made."""
    receiver = Receiver()
    store = MemoryEventStore()
    slow: Any = SlowReads(store)
    async with serve(receiver.app()) as hook:
        created = SessionCreated(
            agent_type="summarizer", run_id="run-1", webhook=Webhook(url=f"{hook}/hook")
        )
        events = stamp("twice", 0, [created, RunStarted(run_id="run-1"), Completed(output=1)])
        await store.append("twice", events, 0)
        first = WebhookDeliverer(slow, settings("127.0.0.1"))
        second = WebhookDeliverer(slow, settings("127.0.0.1"))
        with anyio.fail_after(LIVENESS):
            async with anyio.create_task_group() as tg:
                tg.start_soon(first.run)
                tg.start_soon(second.run)
                first.watch("twice")
                second.watch("twice")
                await delivered(store, "twice")
                tg.cancel_scope.cancel()
    log = await store.read("twice")
    assert len(receiver.received) == 1
    assert [e.attempt for e in log if isinstance(e, WebhookAttempted)] == [1]
