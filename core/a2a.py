"""The A2A bridge (``pip install 'helix-agents[a2a]'``; specs/a2a.md).

Both sides of A2A, on the official a2a-sdk:

- **agents out**: the gateway (``create_http_app``) serves every agent over
  A2A with no flag (:func:`a2a_routes`): an A2A context is a session, a task a
  turn of it, its stream read from the session's log;
- **A2A agents in**: :class:`A2ARemoteAgentTransport` reaches any A2A agent as
  a remote child, and :func:`create_a2a_sub_agent_tool` makes it a tool.

Core never imports this package. Its names are imported on first use, so
mounting the routes loads no a2a-sdk (which loads OpenTelemetry when it is
installed) until an A2A request or card read comes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.bridges.a2a.mount import a2a_routes as a2a_routes
    from helix_agents.bridges.a2a.tool import create_a2a_sub_agent_tool as create_a2a_sub_agent_tool
    from helix_agents.bridges.a2a.transport import (
        A2ARemoteAgentTransport as A2ARemoteAgentTransport,
    )
    from helix_agents.bridges.a2a.wire import (
        EXTENSION_URI as EXTENSION_URI,
        FROM_SEQUENCE_HEADER as FROM_SEQUENCE_HEADER,
    )

_HOMES = {
    "A2ARemoteAgentTransport": "helix_agents.bridges.a2a.transport",
    "create_a2a_sub_agent_tool": "helix_agents.bridges.a2a.tool",
    "a2a_routes": "helix_agents.bridges.a2a.mount",
    "EXTENSION_URI": "helix_agents.bridges.a2a.wire",
    "FROM_SEQUENCE_HEADER": "helix_agents.bridges.a2a.wire",
}
__all__ = [
    "A2ARemoteAgentTransport",
    "create_a2a_sub_agent_tool",
    "a2a_routes",
    "EXTENSION_URI",
    "FROM_SEQUENCE_HEADER",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
