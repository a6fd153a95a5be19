"""``python -m helix_agents.server``: the ``helix-agents`` command line."""

from __future__ import annotations

from helix_agents.server.cli.main import main

raise SystemExit(main())
