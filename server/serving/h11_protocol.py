"""The bounded protocol on uvicorn's h11 parser (pure Python): its hooks into the bounds."""

from __future__ import annotations

import asyncio

import h11  # uvicorn's, imported only to serve
from uvicorn.protocols.http.h11_impl import H11Protocol

from helix_agents.server.serving.bounded import BoundedProtocol

__all__ = ["BoundedH11Protocol"]


class BoundedH11Protocol(BoundedProtocol, H11Protocol):
    """uvicorn's h11 protocol with a connection cap and a header timeout."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(self._bounded_connection_made(transport))
        self._admit()

    def data_received(self, data: bytes) -> None:
        if self._head_refused(data):
            return
        super().data_received(data)
        state = self.conn.their_state
        if self in self.bounds.waiting and state is not h11.IDLE:
            self._headers_received()
        self._watch_body(state is h11.SEND_BODY)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
            self._await_headers()  # keep-alive: the next request's headers are timed too

    def pause_writing(self) -> None:
        super().pause_writing()
        self._writes_paused()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._writes_resumed()

    def connection_lost(self, exc: Exception | None) -> None:
        self._bounded_connection_lost()
        super().connection_lost(exc)
        self._reclaim_if_held()
