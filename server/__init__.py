"""The server side: ``AgentServer``, the HTTP+SSE gateway, the NATS host, the CLI."""

from __future__ import annotations

from .agent_server import AgentServer as AgentServer
from .http_app import (
    DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES,
    Auth as Auth,
    SessionRequest as SessionRequest,
    create_http_app as create_http_app,
)
from .nats_host import NatsAgentHost as NatsAgentHost
from .sse import SSEResponse as SSEResponse, encode_sse as encode_sse

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "AgentServer",
    "NatsAgentHost",
    "Auth",
    "SSEResponse",
    "SessionRequest",
    "create_http_app",
    "encode_sse",
]
