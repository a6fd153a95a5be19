"""The seam between a start and the deliverer of its webhook (the server's)."""

from __future__ import annotations

from typing import Protocol

from helix_agents.events import Webhook

__all__ = ["WebhookGate"]


class WebhookGate(Protocol):
    """What a start asks of the process that delivers webhooks (``AgentServer``'s deliverer)."""

    async def check(self, webhook: Webhook) -> Webhook:
        """The webhook to record, or ``AgentServerError`` ``INVALID_REQUEST`` (nothing written)."""
        ...

    def watch(self, session_id: str) -> None:
        """Follow ``session_id`` (started with a webhook, or moved by a request) for run ends."""
        ...
