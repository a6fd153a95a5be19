"""The server's webhook deliverer and its allow-list (specs/server.md "Webhooks").

``AgentServer(..., webhooks=WebhookSettings(secret=...))`` (``serve
--webhook-secret``) accepts starts that name a webhook and delivers them from
the session logs; ``helix_agents.webhooks`` holds what a receiver needs
(``verify``).
"""

from __future__ import annotations

from .allow import AllowList, CheckedTarget, check_url
from .deliverer import WebhookDeliverer, WebhookSettings

__all__ = ["AllowList", "CheckedTarget", "WebhookDeliverer", "WebhookSettings", "check_url"]
