"""The server side: ``AgentServer``, the HTTP+SSE gateway, the NATS host and runtime, the CLI."""

from __future__ import annotations

from helix_agents.server.agent_server import AgentServer as AgentServer
from helix_agents.server.fleet.host import NatsAgentHost as NatsAgentHost
from helix_agents.server.fleet.runtime import NatsRuntime as NatsRuntime
from helix_agents.server.gateway.app import (
    DEFAULT_MAX_BODY_BYTES as DEFAULT_MAX_BODY_BYTES,
    Auth as Auth,
    create_http_app as create_http_app,
)
from helix_agents.server.serving.limits import (
    DEFAULT_MAX_STREAMS as DEFAULT_MAX_STREAMS,
    StreamLimit as StreamLimit,
)
from helix_agents.server.streams.sse import SSEResponse as SSEResponse, encode_sse as encode_sse
from helix_agents.transports.bodies import SessionRequest as SessionRequest

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_STREAMS",
    "AgentServer",
    "NatsAgentHost",
    "NatsRuntime",
    "Auth",
    "SSEResponse",
    "SessionRequest",
    "StreamLimit",
    "create_http_app",
    "encode_sse",
]
