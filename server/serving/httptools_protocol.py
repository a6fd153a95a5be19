"""The bounded protocol on uvicorn's httptools parser (C): its hooks into the bounds."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from helix_agents.server.serving.bounded import BoundedProtocol

__all__ = ["BoundedHttpToolsProtocol"]


class BoundedHttpToolsProtocol(BoundedProtocol, HttpToolsProtocol):
    """uvicorn's httptools protocol with a connection cap and a header timeout."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(self._bounded_connection_made(transport))
        self._admit()

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self._headers_received()

    def data_received(self, data: bytes) -> None:
        if self._head_refused(data):
            return
        super().data_received(data)
        # A request whose body came with its headers (most) sets no timer.
        cycle = self.cycle
        self._watch_body(cycle is not None and cycle.more_body and not cycle.response_started)

    def on_response_complete(self) -> None:
        queued = bool(self.pipeline)  # the next request's headers are in already
        super().on_response_complete()
        if not self.transport.is_closing() and not queued:
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
