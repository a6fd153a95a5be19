"""Transports: ``RemoteAgentTransport`` implementations.

- :class:`InProcessTransport`: sessions in this process (local sub-agents).
  It is defined in core, because the executor uses it by default and core
  imports nothing from this folder; it is re-exported here beside the others.
- :class:`HttpRemoteAgentTransport`: sessions behind an HTTP gateway
  (``specs/http.md``), streamed over server-sent events parsed by
  :class:`SSEParser`.
- :class:`FaultyTransport`: wraps any transport and injects planned faults
  (:class:`Fault`), for tests.

The NATS transport joins this package in a later issue.
"""

from __future__ import annotations

from helix_agents.inprocess import InProcessTransport as InProcessTransport

from .faults import Fault as Fault, FaultyTransport as FaultyTransport, Operation as Operation
from .http import (
    HeadersSource as HeadersSource,
    HttpRemoteAgentTransport as HttpRemoteAgentTransport,
)
from .sse import SSEMessage as SSEMessage, SSEParser as SSEParser

__all__ = [
    "Fault",
    "FaultyTransport",
    "HeadersSource",
    "HttpRemoteAgentTransport",
    "InProcessTransport",
    "Operation",
    "SSEMessage",
    "SSEParser",
]
