"""``python -m helix_agents.server``: the ``helix-agents`` command line."""

from __future__ import annotations

from .cli import main

raise SystemExit(main())
