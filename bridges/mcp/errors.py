"""The errors of the MCP bridge, in the project's tree (``helix_agents.errors``).

::

    HelixError
    ├── ToolsetError          (helix_agents.errors)
    │   └── MCPServerError    an MCP server could not be reached, lost the connection, or refused
    └── MCPToolError          an MCP tool answered with an error result (``isError``)

Both reach the model as a tool's error result (``"MCPToolError: ..."``); the
SDK's own exceptions never leave this package.
"""

from __future__ import annotations

from helix_agents.errors import HelixError, ToolsetError

__all__ = ["MCPServerError", "MCPToolError"]


class MCPServerError(ToolsetError):
    """Raised when MCP server ``toolset`` cannot be used: unreachable, gone, or refusing.

    From opening the toolset (the executor then refuses to start), and from a
    tool call, whose error result it becomes: the server could not be
    (re)connected within ``connect_timeout``, the connection closed during the
    call (the server crashed: the next call connects again), or the server
    answered with a protocol error (``code``, the JSON-RPC error code).
    """

    def __init__(self, toolset: str, reason: str, *, code: int | None = None) -> None:
        super().__init__(toolset, reason)
        self.code = code


class MCPToolError(HelixError):
    """Raised by an MCP tool's call when the server answered ``isError``: the tool failed.

    ``tool`` is the MCP tool's name on its server, ``message`` the text of the
    error result (what the model reads).
    """

    def __init__(self, tool: str, message: str) -> None:
        self.tool = tool
        self.message = message
        super().__init__(tool, message)

    def __str__(self) -> str:
        return self.message
