"""Transports: ``RemoteAgentTransport`` implementations.

- :class:`InProcessTransport`: sessions in this process (local sub-agents).
  It is defined in core, because the executor uses it by default and core
  imports nothing from this folder; it is re-exported here beside the others.

HTTP+SSE and NATS transports join this package in later issues.
"""

from __future__ import annotations

from helix_agents.inprocess import InProcessTransport as InProcessTransport

__all__ = ["InProcessTransport"]
