"""The server side: the ``helix-agents`` command line (replay, export, demo).

``AgentServer``, the Starlette gateway and the NATS host join this package in
later issues.
"""

from __future__ import annotations

__all__: list[str] = []
