"""The MCP bridge's insides; the public home is :mod:`helix_agents.mcp`."""
