"""The MCP server the ``interop`` benchmark calls: one ``add`` tool (the ``mcp`` SDK).

``python mcp_server.py`` serves it over stdio; ``python mcp_server.py PORT``
over streamable HTTP on 127.0.0.1:PORT at ``/mcp``.
"""

from __future__ import annotations

import sys

from mcp.server import MCPServer
from pydantic import BaseModel


class Sum(BaseModel):
    total: int


server = MCPServer("bench-tools", log_level="ERROR")


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two integers."""
    return Sum(total=a + b)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        import uvicorn

        app = server.streamable_http_app()
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="error")
    else:
        server.run()
