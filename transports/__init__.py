"""Transports: ``RemoteAgentTransport`` implementations.

- :class:`InProcessTransport`: sessions in this process (local sub-agents).
  It is defined in core, because the executor uses it by default and core
  imports nothing from this folder; it is re-exported here beside the others.
- :class:`HttpRemoteAgentTransport`: sessions behind an HTTP gateway
  (``specs/http.md``), streamed over server-sent events parsed by
  :class:`SSEParser`.
- :class:`NatsRemoteAgentTransport`: sessions hosted by a NATS fleet
  (``specs/nats.md``): control by request/reply, streams read from JetStream.
- :class:`FaultyTransport`: wraps any transport and injects planned faults
  (:class:`Fault`), for tests.
"""

from __future__ import annotations

from helix_agents.children.inprocess import InProcessTransport as InProcessTransport

from .faults import Fault as Fault, FaultyTransport as FaultyTransport, Operation as Operation
from .http import (
    HeadersSource as HeadersSource,
    HttpRemoteAgentTransport as HttpRemoteAgentTransport,
)
from .nats import NatsRemoteAgentTransport as NatsRemoteAgentTransport
from .sse import SSEMessage as SSEMessage, SSEParser as SSEParser

__all__ = [
    "Fault",
    "FaultyTransport",
    "HeadersSource",
    "HttpRemoteAgentTransport",
    "InProcessTransport",
    "NatsRemoteAgentTransport",
    "Operation",
    "SSEMessage",
    "SSEParser",
]
