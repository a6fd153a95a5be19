"""The MCP bridge (the ``mcp`` extra): MCP servers' tools in, served agents out.

- :class:`MCPToolset`: an MCP server (a stdio subprocess or a streamable-HTTP
  endpoint) as tools of an agent, ``define_agent(..., toolsets=[...])``.
- :func:`mount_mcp`: a streamable-HTTP MCP endpoint at ``/mcp`` of the gateway
  (``helix-agents serve ... --mcp``), each served agent an MCP tool.

``specs/mcp.md`` maps each side onto the other: what maps to what, what is
lost, what each side guarantees.
"""

from __future__ import annotations

from mcp import StdioServerParameters as StdioServerParameters

from .endpoint import (
    MCP_PATH as MCP_PATH,
    SESSION_META_KEY as SESSION_META_KEY,
    AgentMessage as AgentMessage,
    mount_mcp as mount_mcp,
)
from .errors import MCPServerError as MCPServerError, MCPToolError as MCPToolError
from .tools import MCPArguments as MCPArguments
from .toolset import (
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
    "mount_mcp",
]
