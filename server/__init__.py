"""The server side: ``AgentServer``, the HTTP+SSE gateway, the NATS host, the CLI."""

from __future__ import annotations

from .agent_server import AgentServer as AgentServer
from .http_app import (
    DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES,
    Auth as Auth,
    SessionRequest as SessionRequest,
    create_http_app as create_http_app,
)
from .limits import DEFAULT_MAX_STREAMS as DEFAULT_MAX_STREAMS, StreamLimit as StreamLimit
from .nats_host import NatsAgentHost as NatsAgentHost
from .sse import SSEResponse as SSEResponse, encode_sse as encode_sse

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_STREAMS",
    "AgentServer",
    "NatsAgentHost",
    "Auth",
    "SSEResponse",
    "SessionRequest",
    "StreamLimit",
    "create_http_app",
    "encode_sse",
]
