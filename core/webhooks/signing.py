"""Webhook signatures: ``t=<unix ts>,v1=<hex HMAC-SHA256 of "<t>.<body>">`` (specs/server.md).

The server signs each POST with its secret; a receiver checks it with
:func:`verify` (the same secret, the raw body as received, the header), which
also refuses a timestamp too far from now, so a captured request cannot be
replayed later.
"""

from __future__ import annotations

import hashlib
import hmac
import time

from helix_agents.errors import HelixError

__all__ = [
    "DEFAULT_TOLERANCE",
    "DELIVERY_HEADER",
    "EVENT_HEADER",
    "SIGNATURE_HEADER",
    "WebhookSignatureError",
    "sign",
    "signature",
    "verify",
]

SIGNATURE_HEADER = "Helix-Signature"
"""The header that carries ``t=<unix ts>,v1=<hex>``."""

DELIVERY_HEADER = "Helix-Delivery"
"""The header that carries the delivery id (the same on every attempt: dedup on it)."""

EVENT_HEADER = "Helix-Event"
"""The header that carries the event kind (``completed``, ``failed``, ``paused_for_person``)."""

DEFAULT_TOLERANCE = 300.0
"""How far (seconds) a signature's timestamp may be from the receiver's clock."""


class WebhookSignatureError(HelixError):
    """A webhook's signature header is missing, malformed, stale, or does not match."""


def _key(secret: str | bytes) -> bytes:
    key = secret.encode() if isinstance(secret, str) else secret
    if not key:
        raise WebhookSignatureError("the webhook secret is empty")
    return key


def signature(secret: str | bytes, body: bytes, timestamp: int) -> str:
    """The hex HMAC-SHA256 of ``"<timestamp>.<body>"`` under ``secret``."""
    message = str(timestamp).encode() + b"." + body
    return hmac.new(_key(secret), message, hashlib.sha256).hexdigest()


def sign(secret: str | bytes, body: bytes, timestamp: int | None = None) -> str:
    """The signature header's value for ``body``: ``t=<timestamp>,v1=<hex>`` (now by default)."""
    t = int(time.time()) if timestamp is None else timestamp
    return f"t={t},v1={signature(secret, body, t)}"


def verify(
    secret: str | bytes,
    body: bytes,
    header: str | None,
    *,
    tolerance: float = DEFAULT_TOLERANCE,
    now: float | None = None,
) -> int:
    """Check a webhook's signature header; return its timestamp.

    ``body``: the request's raw bytes, exactly as received (not re-encoded).
    Any ``v1`` entry that matches counts (a sender rotating secrets may send
    two). Raises :class:`WebhookSignatureError` when the header is missing or
    malformed, its timestamp is more than ``tolerance`` seconds from ``now``
    (a replay), or no ``v1`` matches.
    """
    if not header:
        raise WebhookSignatureError(f"no {SIGNATURE_HEADER} header")
    timestamp: int | None = None
    candidates: list[str] = []
    for part in header.split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isascii() and value.isdigit():
            timestamp = int(value)
        elif name == "v1":
            candidates.append(value)
    if timestamp is None or not candidates:
        raise WebhookSignatureError(f"malformed {SIGNATURE_HEADER} header: {header[:100]!r}")
    clock = time.time() if now is None else now
    if abs(clock - timestamp) > tolerance:
        raise WebhookSignatureError(
            f"the signature's timestamp is {abs(clock - timestamp):.0f}s from now "
            f"(more than {tolerance:g}s): a replay, or a clock out of step"
        )
    expected = signature(secret, body, timestamp)
    if not any(hmac.compare_digest(expected, candidate) for candidate in candidates):
        raise WebhookSignatureError("the signature does not match the body")
    return timestamp
