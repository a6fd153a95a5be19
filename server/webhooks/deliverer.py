"""``WebhookDeliverer``: POSTs the deliveries session logs owe, at least once (specs/server.md).

The log is the outbox. The deliverer follows each session that has a webhook
(started here, moved by a request here, or found by its scan of the store),
folds its log into its deliveries (``helix_agents.webhooks.fold_outbox``) and
makes each due attempt:

1. it claims the attempt by appending ``webhook_attempted`` at the head it read
   (compare-and-append: of two hosts or processes, one wins; the other reads
   again and finds the attempt made), with the time the next attempt is due
   should this one never record an answer (its process died mid-POST);
2. it resolves the URL's host again, checks every address against the allow
   list, and POSTs the signed body to the checked address (no redirects, a short
   timeout, no proxy);
3. it appends ``webhook_delivered`` (a 2xx answer) or ``webhook_failed`` with
   the next attempt's time (exponential backoff with jitter), ``final`` after
   the last attempt.

A scan of the store finds the sessions to follow: at start and every
``rescan_interval`` seconds it asks the store for every session's head (one
call) and, for a session it has not seen, reads only its first event (its
``session_created`` says whether it has a webhook); a session it has seen is
read again only when its head moved and it has one. So a restart, a takeover
by another host, or a run that ended on a durable engine's worker is picked up.
"""

from __future__ import annotations

import contextlib
import logging
import math
import random
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
import msgspec
from anyio.streams.memory import MemoryObjectSendStream

from helix_agents.errors import AgentServerError, ConcurrencyConflict, UsageError
from helix_agents.events import (
    Aborted,
    ApprovalRequested,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    Completed,
    Event,
    Failed,
    Interrupted,
    RunStarted,
    Suspended,
    Webhook,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
)
from helix_agents.log.store import EventStore, ReadsPages
from helix_agents.runtime.service import append_decided
from helix_agents.runtime.writer import stamp
from helix_agents.webhooks.outbox import Delivery, Outbox, fold_outbox, webhook_of
from helix_agents.webhooks.signing import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    sign,
)

from .allow import AllowList, check_url

__all__ = ["WebhookDeliverer", "WebhookSettings"]

log = logging.getLogger("helix_agents.webhooks")

# What wakes a follower: a run's end or pause, a pending input, a delivery's progress.
_WAKE: tuple[type[Event], ...] = (
    RunStarted,
    Completed,
    Failed,
    Aborted,
    Interrupted,
    Suspended,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ApprovalRequested,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
)


@dataclass(frozen=True)
class WebhookSettings:
    """How a server delivers webhooks: its secret, its allow-list, its retries.

    Attributes:
        secret: signs every POST (``serve --webhook-secret``, ``$HELIX_WEBHOOK_SECRET``).
        allow: networks and host names allowed besides public addresses
            (``serve --webhook-allow``, repeatable).
        max_attempts: attempts per delivery before it is given up (``webhook_failed``
            with ``final``).
        backoff: the delay before the second attempt, in seconds; it doubles with
            each attempt (with jitter: a delay ``d`` is drawn from ``[d/2, d]``).
        max_backoff: the longest delay between attempts.
        timeout: seconds an attempt may take (connect, send, answer).
        rescan_interval: seconds between scans of the store for sessions to follow.
    """

    secret: str
    allow: tuple[str, ...] = ()
    max_attempts: int = 8
    backoff: float = 5.0
    max_backoff: float = 3600.0
    timeout: float = 10.0
    rescan_interval: float = 30.0
    allow_list: AllowList = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.secret:
            raise UsageError("a webhook secret must not be empty")
        if self.max_attempts < 1 or self.backoff < 0 or self.timeout <= 0:
            raise UsageError("webhook settings: attempts >= 1, backoff >= 0, timeout > 0")
        object.__setattr__(self, "allow_list", AllowList(self.allow))

    def delay(self, attempt: int) -> float:
        """The delay after failed attempt ``attempt`` (1 for the first), with jitter."""
        full = min(self.max_backoff, self.backoff * 2 ** min(attempt - 1, 60))
        return random.uniform(full / 2, full)


class WebhookDeliverer:
    """Delivers the webhooks of the sessions on ``store`` (one per server process).

    The server's :class:`~helix_agents.webhooks.WebhookGate`: a start's webhook
    is checked by :meth:`check`; :meth:`watch` follows a session. Run it with
    :meth:`run` (``AgentServer`` does, while it is entered).
    """

    def __init__(self, store: EventStore, settings: WebhookSettings) -> None:
        self.store = store
        self.settings = settings
        self._following: set[str] = set()
        self._again: set[str] = set()  # poked while followed: follow once more after
        self._has_webhook: dict[str, bool] = {}
        self._heads: dict[str, int] = {}
        self._early: list[str] = []  # watched before run()
        self._send: MemoryObjectSendStream[str] | None = None
        self._client: httpx.AsyncClient | None = None

    async def check(self, webhook: Webhook) -> Webhook:
        """The webhook if its URL is allowed now (``INVALID_REQUEST`` naming why, if not)."""
        if not webhook.events:
            raise AgentServerError("INVALID_REQUEST", "webhook.events must name an event")
        await check_url(webhook.url, self.settings.allow_list)
        return msgspec.structs.replace(webhook, events=list(dict.fromkeys(webhook.events)))

    def watch(self, session_id: str) -> None:
        """Follow ``session_id`` for run ends (a no-op for a session without a webhook)."""
        if self._send is None:
            self._early.append(session_id)
            return
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._send.send_nowait(session_id)

    async def run(self) -> None:
        """Scan, follow and deliver until cancelled."""
        limits = httpx.Limits(max_connections=50, max_keepalive_connections=10)
        send, receive = anyio.create_memory_object_stream[str](math.inf)
        self._send = send
        for session_id in self._early:
            send.send_nowait(session_id)
        self._early.clear()
        async with (
            send,
            receive,
            httpx.AsyncClient(
                timeout=self.settings.timeout,
                follow_redirects=False,
                trust_env=False,  # a proxy would connect to what the allow-list did not check
                limits=limits,
            ) as client,
            anyio.create_task_group() as tg,
        ):
            self._client = client
            tg.start_soon(self._scan_forever)
            async for session_id in receive:
                if session_id in self._following:
                    self._again.add(session_id)
                else:
                    self._following.add(session_id)
                    tg.start_soon(self._follow_guarded, session_id)

    async def _scan_forever(self) -> None:
        while True:
            try:
                await self.scan()
            except Exception as exc:  # the store is down, say: the next scan tries again
                log.warning("webhooks: the scan of the store failed: %s", exc)
            await anyio.sleep(self.settings.rescan_interval)

    async def scan(self) -> None:
        """Follow every session with a webhook whose log moved since the last scan."""
        heads = await self.store.session_heads()
        for session_id, head in heads.items():
            if self._heads.get(session_id) == head:
                continue
            self._heads[session_id] = head
            if await self._with_webhook(session_id):
                self.watch(session_id)

    async def _with_webhook(self, session_id: str) -> bool:
        """Whether the session was started with a webhook: its first event only, read once."""
        known = self._has_webhook.get(session_id)
        if known is None:
            if isinstance(self.store, ReadsPages):
                first, _ = await self.store.read_page(session_id, 0, 1)
            else:
                first = await self.store.read(session_id)
            known = bool(first) and webhook_of(first[0]) is not None
            self._has_webhook[session_id] = known
        return known

    async def _follow_guarded(self, session_id: str) -> None:
        try:
            if await self._with_webhook(session_id):
                await self._follow(session_id)
        except Exception as exc:  # the store failed: the next scan follows it again
            log.warning("webhooks: following %s failed: %s", session_id, exc)
            self._heads.pop(session_id, None)
        finally:
            self._following.discard(session_id)
            if session_id in self._again:
                self._again.discard(session_id)
                self.watch(session_id)

    async def _follow(self, session_id: str) -> None:
        """Deliver what ``session_id`` owes as it comes due; return once nothing more can be."""
        while True:
            outbox = fold_outbox(await self.store.read(session_id))
            pending = outbox.pending()
            if not pending and outbox.state.status not in ("running", "paused"):
                return  # settled; a request or the scan follows it again when its log moves
            now = time.time()
            due = [d for d in pending if d.next_at is None or d.next_at <= now]
            if due:
                await self._attempt(session_id, outbox, due[0])
                continue
            upcoming = [d.next_at for d in pending if d.next_at is not None]
            wait = min(upcoming) - now if upcoming else math.inf
            with anyio.move_on_after(wait):
                async for _ in self.store.tail(session_id, outbox.last_seq, kinds=_WAKE):
                    break

    async def _attempt(self, session_id: str, outbox: Outbox, delivery: Delivery) -> None:
        settings = self.settings
        now = time.time()
        if delivery.attempts >= settings.max_attempts:
            # The last attempt was claimed, but its answer never recorded (its process died).
            await self._claim(
                session_id,
                outbox,
                WebhookFailed(
                    delivery_id=delivery.delivery_id,
                    attempt=delivery.attempts,
                    error=delivery.last_error or "no answer was recorded for the last attempt",
                    final=True,
                ),
            )
            return
        attempt = delivery.attempts + 1
        # Due again if this attempt never records an answer: after its timeout and a backoff.
        unanswered = now + settings.timeout + settings.delay(attempt)
        claim = WebhookAttempted(
            delivery_id=delivery.delivery_id, attempt=attempt, next_at=unanswered
        )
        if not await self._claim(session_id, outbox, claim):
            return  # another host or process moved the log first: decide again
        status_code, error = await self._post(session_id, outbox, delivery)
        result: Event
        if error is None:
            result = WebhookDelivered(
                delivery_id=delivery.delivery_id, attempt=attempt, status_code=status_code or 200
            )
        else:
            final = attempt >= settings.max_attempts
            log.info("webhook %s attempt %d failed: %s", delivery.delivery_id, attempt, error)
            result = WebhookFailed(
                delivery_id=delivery.delivery_id,
                attempt=attempt,
                error=error,
                status_code=status_code,
                next_at=None if final else time.time() + settings.delay(attempt),
                final=final,
            )
        await append_decided(self.store, session_id, lambda state: [result])

    async def _claim(self, session_id: str, outbox: Outbox, event: Event) -> bool:
        """Append ``event`` right after what ``outbox`` was folded from; False if the log moved."""
        try:
            await self.store.append(
                session_id, stamp(session_id, outbox.last_seq, [event]), outbox.last_seq
            )
        except ConcurrencyConflict:
            return False
        return True

    async def _post(
        self, session_id: str, outbox: Outbox, delivery: Delivery
    ) -> tuple[int | None, str | None]:
        """POST the delivery once: ``(status code, None)`` if accepted, else ``(code, why)``."""
        assert outbox.webhook is not None
        assert self._client is not None
        body = msgspec.json.encode(delivery.body(session_id, outbox.state.agent_type))
        try:
            target = await check_url(outbox.webhook.url, self.settings.allow_list)
        except AgentServerError as exc:
            return None, str(exc)
        headers: Mapping[str, str] = {
            "Host": target.host_header,
            "Content-Type": "application/json",
            "User-Agent": "helix-agents-webhooks",
            SIGNATURE_HEADER: sign(self.settings.secret, body),
            DELIVERY_HEADER: delivery.delivery_id,
            EVENT_HEADER: delivery.event,
        }
        extensions: dict[str, Any] = {}
        if target.url.scheme == "https":
            extensions["sni_hostname"] = target.host
        try:
            response = await self._client.post(
                target.connect_url(), content=body, headers=headers, extensions=extensions
            )
        except httpx.HTTPError as exc:
            return None, f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if 200 <= response.status_code < 300:
            return response.status_code, None
        where = response.headers.get("location")
        moved = f" (to {where[:200]}: redirects are not followed)" if where else ""
        return response.status_code, f"HTTP {response.status_code}{moved}"
