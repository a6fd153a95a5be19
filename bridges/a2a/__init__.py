"""The A2A bridge's insides; the public home is :mod:`helix_agents.a2a`."""
