"""The webhook outbox, folded from a session's log (specs/server.md "Webhooks").

A session started with a webhook (``session_created.webhook``) owes one
delivery for each end of a run its webhook asks about: ``completed``,
``failed`` (``aborted`` included) and ``paused_for_person`` (the session is
paused and an approval or a client tool in its tree waits for an answer).
Each delivery's id is ``<session id>#<seq of the event that ended the run>``,
the same on every attempt. ``webhook_attempted``, ``webhook_delivered`` and
``webhook_failed`` record its progress, so what was delivered, and when the
next attempt is due, is read back from the log after a restart.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import msgspec

from helix_agents.events import (
    Aborted,
    Completed,
    Event,
    Failed,
    PendingInput,
    SessionCreated,
    Webhook,
    WebhookAttempted,
    WebhookDelivered,
    WebhookEventKind,
    WebhookFailed,
)
from helix_agents.log.projections import SessionProjector, pending_inputs
from helix_agents.log.state import SessionState, SessionStatus

__all__ = ["Delivery", "Outbox", "WebhookStatus", "delivery_id", "fold_outbox", "webhook_of"]


def delivery_id(session_id: str, seq: int) -> str:
    """The id of the delivery owed for the run end at ``seq`` (``#`` is never in a session id)."""
    return f"{session_id}#{seq}"


class Delivery(msgspec.Struct, kw_only=True, rename="camel"):
    """One delivery owed by a session: what it tells, and how its attempts went."""

    delivery_id: str
    event: WebhookEventKind
    seq: int
    run_id: str
    status: SessionStatus
    output: Any = None
    error: str | None = None
    pending_inputs: list[PendingInput] = []
    attempts: int = 0
    delivered: bool = False
    gave_up: bool = False
    last_error: str | None = None
    next_at: float | None = None
    """When the next attempt is due, unless the last one is recorded delivered (None: now)."""

    @property
    def settled(self) -> bool:
        """Delivered, or given up on."""
        return self.delivered or self.gave_up

    def body(self, session_id: str, agent_type: str) -> dict[str, Any]:
        """The JSON object POSTed (the same on every attempt)."""
        payload: dict[str, Any] = {
            "deliveryId": self.delivery_id,
            "sessionId": session_id,
            "agentType": agent_type,
            "event": self.event,
            "status": self.status,
            "runId": self.run_id,
            "seq": self.seq,
            "output": self.output,
            "error": self.error,
        }
        if self.event == "paused_for_person":
            payload["pendingInputs"] = msgspec.to_builtins(self.pending_inputs)
        return payload


class WebhookStatus(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A delivery as ``/status`` shows it (``webhooks``)."""

    url: str
    event: WebhookEventKind
    delivery_id: str
    seq: int
    attempts: int
    delivered: bool
    failed: bool
    """Given up on: its last attempt failed."""
    last_error: str | None = None
    next_at: float | None = None
    """When the next attempt is due (seconds since the epoch); None once settled."""


class Outbox(msgspec.Struct, kw_only=True):
    """A session's webhook and its deliveries, in log order, as of ``last_seq``."""

    webhook: Webhook | None
    deliveries: list[Delivery]
    state: SessionState
    last_seq: int

    def status(self) -> list[WebhookStatus]:
        """The deliveries as ``/status`` shows them."""
        if self.webhook is None:
            return []
        url = self.webhook.url
        return [
            WebhookStatus(
                url=url,
                event=d.event,
                delivery_id=d.delivery_id,
                seq=d.seq,
                attempts=d.attempts,
                delivered=d.delivered,
                failed=d.gave_up,
                last_error=d.last_error,
                next_at=None if d.settled else d.next_at,
            )
            for d in self.deliveries
        ]

    def pending(self) -> list[Delivery]:
        """The deliveries not yet settled."""
        return [d for d in self.deliveries if not d.settled]


def webhook_of(first: Event) -> Webhook | None:
    """The webhook a log's first event names (None: none)."""
    if isinstance(first, SessionCreated) and isinstance(first.webhook, Webhook):
        return first.webhook
    return None


def fold_outbox(log: Iterable[Event]) -> Outbox:
    """Fold a whole session log into its :class:`Outbox` (its state folded on the way)."""
    projector = SessionProjector()
    webhook: Webhook | None = None
    wanted: frozenset[str] = frozenset()
    by_id: dict[str, Delivery] = {}
    awaiting = False
    state: SessionState | None = None
    for event in log:
        state = projector.apply(event)
        if isinstance(event, SessionCreated):
            webhook = webhook_of(event)
            wanted = frozenset(webhook.events) if webhook is not None else frozenset()
            continue
        if webhook is None:
            continue
        if isinstance(event, WebhookAttempted | WebhookDelivered | WebhookFailed):
            _progress(by_id.get(event.delivery_id), event)
            continue
        kind: WebhookEventKind | None = None
        if isinstance(event, Completed):
            kind = "completed"
        elif isinstance(event, Failed | Aborted):
            kind = "failed"
        elif state.status == "paused":
            now_awaiting = bool(pending_inputs(state))
            if now_awaiting and not awaiting:
                kind = "paused_for_person"
            awaiting = now_awaiting
        if state.status != "paused":
            awaiting = False
        if kind is None or kind not in wanted:
            continue
        delivery = Delivery(
            delivery_id=delivery_id(state.session_id, event.seq),
            event=kind,
            seq=event.seq,
            run_id=state.run_id,
            status=state.status,
            output=state.output if kind == "completed" else None,
            error=state.error if kind == "failed" else None,
            pending_inputs=pending_inputs(state) if kind == "paused_for_person" else [],
        )
        by_id[delivery.delivery_id] = delivery
    if state is None:
        raise ValueError("an empty log has no outbox")
    return Outbox(
        webhook=webhook, deliveries=list(by_id.values()), state=state, last_seq=state.last_seq
    )


def _progress(
    delivery: Delivery | None, event: WebhookAttempted | WebhookDelivered | WebhookFailed
) -> None:
    if delivery is None:  # a delivery this log never owed (a copied branch): nothing to fold
        return
    if isinstance(event, WebhookAttempted):
        delivery.attempts = max(delivery.attempts, event.attempt)
        delivery.next_at = event.next_at
    elif isinstance(event, WebhookDelivered):
        delivery.delivered = True
        delivery.last_error = None
    else:
        delivery.last_error = event.error
        delivery.next_at = event.next_at
        if event.final:
            delivery.gave_up = True
