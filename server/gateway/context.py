"""What the gateway's handlers serve from: :class:`Gateway`, on ``app.state.gateway``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from starlette.requests import Request

from helix_agents import RemoteAgentTransport
from helix_agents.auth import Gate
from helix_agents.ids import SessionId
from helix_agents.log.session_list import SessionCatalog
from helix_agents.log.store import EventStore
from helix_agents.protocol import TransportEvent
from helix_agents.schedules import Schedules
from helix_agents.server.edge import StreamOpener
from helix_agents.server.streams.closing import OpenStreams
from helix_agents.server.ui import store_of

if TYPE_CHECKING:
    from helix_agents.server.agent_server import AgentServer

__all__ = ["Gateway", "gateway_of"]


class Gateway:
    """One gateway's target and settings, as ``create_http_app`` was given them.

    Args:
        target: the ``AgentServer`` or ``RemoteAgentTransport`` the gateway fronts.
        server: ``target`` when it is an ``AgentServer`` (its agents, its lifespan).
        heartbeat_interval: seconds between ``:heartbeat`` comments on a stream.
        document: the OpenAPI document ``GET /openapi.json`` answers, encoded.
        gate: who requests are, and what they may touch (``specs/auth.md``).
    """

    def __init__(
        self,
        target: RemoteAgentTransport,
        server: AgentServer | None,
        *,
        heartbeat_interval: float,
        document: bytes,
        gate: Gate,
    ) -> None:
        self.transport = target
        self.gate = gate
        self.server = server
        self.heartbeat_interval = heartbeat_interval
        self.document = document
        # Decided once: a protocol's isinstance walks its members (tens of microseconds).
        self.opener = target if isinstance(target, StreamOpener) else None
        store = store_of(target)
        self.catalog = None if store is None else SessionCatalog(store)
        """``GET /sessions``'s list (``None``: the target has no store of its own)."""
        self.schedules = _schedules_of(target, server, store)
        """``/crons``'s schedules (``None``: the target has no store of its own)."""
        self.streams = OpenStreams()
        """The open ``GET /sse`` streams (``serve``'s shutdown ends the idle ones at once)."""

    async def open_stream(
        self, session_id: SessionId, from_sequence: int
    ) -> AsyncIterator[TransportEvent]:
        """The stream, its session known to exist: a 404 comes before any byte of it."""
        if self.opener is not None:  # an AgentServer, a NATS fleet: one read of the log
            return await self.opener.open_stream(session_id, from_sequence)
        await self.transport.get_status(session_id)  # another gateway: ask it first
        return self.transport.stream(session_id, from_sequence)


def _schedules_of(
    target: RemoteAgentTransport, server: AgentServer | None, store: EventStore | None
) -> Schedules | None:
    """The server's schedules; a fleet's gateway's, on the fleet's store, for its agent types."""
    if server is not None:
        return server.schedules
    if store is None:
        return None
    directory = getattr(target, "list_agent_types", None)
    return Schedules(store, directory)


def gateway_of(request: Request) -> Gateway:
    """The :class:`Gateway` of the app serving ``request``."""
    gateway: Gateway = request.app.state.gateway
    return gateway
