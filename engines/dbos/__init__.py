"""The DBOS engine's insides; the public home is :mod:`helix_agents.dbos`."""
