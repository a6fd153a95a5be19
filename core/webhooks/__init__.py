"""Signed webhooks from the log (specs/server.md "Webhooks"): the outbox, signatures, verify.

A start may name a :class:`Webhook`; the server that runs the session POSTs
each run end it asks about, signed, at least once. A receiver checks a POST
with :func:`verify`::

    from helix_agents.webhooks import SIGNATURE_HEADER, verify

    verify(secret, raw_body, request.headers[SIGNATURE_HEADER])  # raises if forged or stale

and drops repeats by the ``Helix-Delivery`` header (:data:`DELIVERY_HEADER`).
The deliverer itself is the server's (``helix_agents.server.webhooks``).
"""

from __future__ import annotations

from helix_agents.events import WEBHOOK_EVENT_KINDS, Webhook, WebhookEventKind

from .gate import WebhookGate
from .outbox import Delivery, Outbox, WebhookStatus, delivery_id, fold_outbox, webhook_of
from .signing import (
    DEFAULT_TOLERANCE,
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    WebhookSignatureError,
    sign,
    signature,
    verify,
)

__all__ = [
    "DEFAULT_TOLERANCE",
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "WEBHOOK_EVENT_KINDS",
    "Delivery",
    "Outbox",
    "Webhook",
    "WebhookEventKind",
    "WebhookGate",
    "WebhookSignatureError",
    "WebhookStatus",
    "delivery_id",
    "fold_outbox",
    "sign",
    "signature",
    "verify",
    "webhook_of",
]
