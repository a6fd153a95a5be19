"""Transports: ``RemoteAgentTransport`` implementations (in-process, HTTP+SSE, NATS).

The runtime and remote issues fill this package; today it holds nothing.
"""

from __future__ import annotations

__all__: list[str] = []
