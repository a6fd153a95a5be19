"""``OpenStreams``: the open ``/sse`` streams of one gateway, which a shutdown can end early.

``serve`` drains for its grace on SIGTERM, letting runs and their streams go
on; but a stream of a session with no run executing here (paused on a client
tool or an approval, or run by another process) would only wait out the
grace and be cut with no last event. :meth:`OpenStreams.end` ends such
streams at once: each sends a recoverable ``error`` frame and its response
ends, so the reader reconnects (to another instance, or after the restart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import anyio

__all__ = ["SHUTDOWN_ERROR", "OpenStreams"]

SHUTDOWN_ERROR = "server shutting down; reconnect to resume the stream"
"""The text of the recoverable ``error`` frame that ends a stream on shutdown."""


class OpenStreams:
    """The open streams of one gateway: each one's session and the event that ends it."""

    def __init__(self) -> None:
        self._open: dict[object, tuple[str, anyio.Event]] = {}

    def __len__(self) -> int:
        return len(self._open)

    @contextmanager
    def track(self, session_id: str) -> Iterator[anyio.Event]:
        """Count a stream of ``session_id`` as open; the event that asks it to end."""
        key = object()
        ending = anyio.Event()
        self._open[key] = (session_id, ending)
        try:
            yield ending
        finally:
            del self._open[key]

    def end(self, which: Callable[[str], bool]) -> int:
        """Ask the open streams of each session ``which`` names to end; how many were asked."""
        asked = 0
        for session_id, ending in list(self._open.values()):
            if not ending.is_set() and which(session_id):
                ending.set()
                asked += 1
        return asked
