"""The MCP bridge (the ``mcp`` extra): MCP servers' tools in, served agents out.

- :class:`MCPToolset`: an MCP server (a stdio subprocess or a streamable-HTTP
  endpoint) as tools of an agent, ``define_agent(..., toolsets=[...])``.
- :class:`MCPOptions`: ``create_http_app(server, mcp=MCPOptions())`` (and
  ``helix-agents serve ... --mcp``) serves each agent as an MCP tool at
  ``/mcp`` of the gateway (``endpoint.py``; the gateway mounts it).

``specs/mcp.md`` maps each side onto the other: what maps to what, what is
lost, what each side guarantees.
"""

from __future__ import annotations

from mcp import StdioServerParameters as StdioServerParameters

from helix_agents.bridges.mcp.endpoint import (
    MCP_PATH as MCP_PATH,
    SESSION_META_KEY as SESSION_META_KEY,
    AgentMessage as AgentMessage,
    MCPOptions as MCPOptions,
)
from helix_agents.bridges.mcp.errors import (
    MCPServerError as MCPServerError,
    MCPToolError as MCPToolError,
)
from helix_agents.bridges.mcp.tools import MCPArguments as MCPArguments
from helix_agents.bridges.mcp.toolset import (
    CALL_META_KEYS as CALL_META_KEYS,
    PROGRESS_CHUNK as PROGRESS_CHUNK,
    MCPToolset as MCPToolset,
)

__all__ = [
    # MCP tools in
    "CALL_META_KEYS",
    "PROGRESS_CHUNK",
    "MCPArguments",
    "MCPServerError",
    "MCPToolError",
    "MCPToolset",
    "StdioServerParameters",
    # agents out
    "MCP_PATH",
    "SESSION_META_KEY",
    "AgentMessage",
    "MCPOptions",
]
