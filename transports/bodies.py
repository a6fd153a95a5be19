"""The body of ``interrupt`` and ``abort``: one struct for both transports and both edges.

The other request bodies are in ``helix_agents.protocol``; this one is here
until it joins them (it is the same on HTTP and NATS: ``specs/http.md``,
``specs/nats.md``).
"""

from __future__ import annotations

import msgspec

__all__ = ["SessionRequest"]


class SessionRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel", omit_defaults=True):
    """The body of ``/interrupt`` and ``/abort``."""

    session_id: str
    reason: str | None = None
