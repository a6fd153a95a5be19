"""A transport wrapper sending the writes of one turn of the event loop in one syscall."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["CoalescedWrites", "WRITE_HIGH_WATER", "WRITE_LOW_WATER"]

WRITE_HIGH_WATER = 64 * 1024
"""Bytes buffered for a client past which the server stops writing it (the transport pauses)."""
WRITE_LOW_WATER = 16 * 1024
"""Bytes buffered below which writing resumes."""


class CoalescedWrites:
    """A transport whose writes made in one turn of the event loop leave in one syscall.

    uvicorn writes a response's head, each body message and the chunked
    terminator separately, and each ``write`` on an idle socket is a
    ``send`` at once. This collects the writes of one turn of the loop (a
    response's head and body, a stream's last frames and its end) and hands
    them to the socket together, at the end of that turn. Everything else is
    the transport's own; ``close`` and ``abort`` settle the writes first.

    Flow control holds: once :data:`WRITE_HIGH_WATER` bytes are queued in one
    turn they go to the transport at once, so that it pauses the protocol
    (and the next ``send`` waits for the client) in that turn; a response
    sent in a loop that never yields (each ``send`` returns at once while
    the transport is not paused) is never queued here whole.
    """

    __slots__ = ("_loop", "_pending", "_queued", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None
        self._queued = 0
        transport.set_write_buffer_limits(high=WRITE_HIGH_WATER, low=WRITE_LOW_WATER)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for the end of this turn of the loop (past the high-water mark: now)."""
        if not data:
            return
        if self._pending is None:
            self._pending = []
            self._queued = 0
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))
        self._queued += len(data)
        if self._queued >= WRITE_HIGH_WATER:
            self.flush()

    def writelines(self, chunks: Any) -> None:
        """Queue each of ``chunks``."""
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Hand what is queued to the socket now."""
        pending, self._pending = self._pending, None
        self._queued = 0
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        """Send what is queued, then close."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop what is queued and close at once."""
        self._pending = None
        self._queued = 0
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent, queued here or in the transport."""
        return self._queued + self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)
