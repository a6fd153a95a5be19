"""The bridges to other agent protocols: A2A (``a2a/``) and MCP (``mcp/``).

Their public homes are :mod:`helix_agents.a2a` and :mod:`helix_agents.mcp`
(``specs/a2a.md``, ``specs/mcp.md``); the modules here are their insides.
"""
