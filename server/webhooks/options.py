"""``serve`` and ``host``'s webhook options: the secret, the allow-list, the retries."""

from __future__ import annotations

import argparse
import os

from helix_agents.errors import UsageError

from .deliverer import WebhookSettings

__all__ = ["WEBHOOK_SECRET_ENV", "add_webhook_arguments", "webhook_settings"]

WEBHOOK_SECRET_ENV = "HELIX_WEBHOOK_SECRET"
"""The environment variable ``--webhook-secret`` defaults to."""


def add_webhook_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--webhook-secret``, ``--webhook-allow``, ``--webhook-attempts`` and ``-backoff``."""
    parser.add_argument(
        "--webhook-secret",
        metavar="SECRET",
        default=None,
        help="sign webhook POSTs with this secret (default: $HELIX_WEBHOOK_SECRET); without "
        'one, a start that names a webhook is refused (specs/server.md "Webhooks")',
    )
    parser.add_argument(
        "--webhook-allow",
        action="append",
        default=[],
        metavar="CIDR_OR_HOST",
        help="also POST webhooks to this network or host name (repeatable); by default only "
        "public addresses (no loopback, private, link-local, multicast or reserved ones)",
    )
    parser.add_argument(
        "--webhook-attempts",
        type=int,
        default=8,
        metavar="N",
        help="attempts per webhook delivery before it is given up (default: %(default)s)",
    )
    parser.add_argument(
        "--webhook-backoff",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="the delay before a webhook's second attempt, doubling with each one, with "
        "jitter (default: %(default)s)",
    )


def webhook_settings(
    args: argparse.Namespace, *, runs_sessions: bool = True
) -> WebhookSettings | None:
    """The parsed options as :class:`WebhookSettings` (None without a secret).

    ``runs_sessions`` False (a fleet's gateway): None, and an explicit
    ``--webhook-secret`` is refused (the hosts deliver; ``$HELIX_WEBHOOK_SECRET``,
    which may be set for every process, is ignored). Raises ``UsageError`` for a
    bad allow entry or number.
    """
    if not runs_sessions:
        if args.webhook_secret:
            raise UsageError("a fleet's hosts deliver its webhooks: give them --webhook-secret")
        return None
    secret = args.webhook_secret or os.environ.get(WEBHOOK_SECRET_ENV)
    if not secret:
        return None
    return WebhookSettings(
        secret=secret,
        allow=tuple(args.webhook_allow),
        max_attempts=args.webhook_attempts,
        backoff=args.webhook_backoff,
    )
