"""What both bounded uvicorn protocols add: the connection cap, the header and body timers.

:class:`Bounds` holds one server's settings and its connections still waiting
for a request's headers; :class:`BoundedProtocol` is the mixin that enforces
them, put before uvicorn's own protocol class by
:func:`~helix_agents.server.serving.protocols.bounded_http_protocol`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import msgspec

from helix_agents.server.serving.allocator import Reclaimer
from helix_agents.server.serving.limits import (
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_WRITE_TIMEOUT,
    MAX_HEADER_LINE,
    error_body,
)
from helix_agents.server.serving.writes import CoalescedWrites

__all__ = ["SEND_BUFFER", "Bounds", "BoundedProtocol"]

log = logging.getLogger("helix_agents.server")

_encode = msgspec.json.Encoder().encode

SEND_BUFFER = 128 * 1024
"""``SO_SNDBUF`` of each connection (the kernel doubles it for its bookkeeping; no autotuning)."""


@dataclass
class Bounds:
    """One server's connection bounds, shared by all its connections."""

    max_connections: int
    header_timeout: float
    body_timeout: float
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    """Bytes a request's head may take in all; each of its lines at most
    :data:`MAX_HEADER_LINE` (or this, if less)."""
    write_timeout: float = DEFAULT_WRITE_TIMEOUT
    """Seconds the connection's writes may stay paused (its client taking nothing)."""
    waiting: dict[Any, None] = field(default_factory=dict)
    """Connections still waiting for a request's headers, oldest first."""
    reclaimer: Reclaimer = field(default_factory=Reclaimer)
    """What gives back the memory of connections that held a window, once they close."""


class BoundedProtocol:
    """The mixin of both bounded protocols: the cap, the header timer, coalesced writes.

    A connection's kernel send buffer is :data:`SEND_BUFFER` and its
    transport pauses past ``writes.WRITE_HIGH_WATER``: a client that stops
    reading holds that much, whatever its response's size, and a connection
    that held it (its writes were paused) has its memory reclaimed once it
    closes (:class:`~helix_agents.server.serving.allocator.Reclaimer`).
    """

    bounds: ClassVar[Bounds]
    _header_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _write_timer: asyncio.TimerHandle | None = None
    _head_bytes = 0  # of the request head coming in, so far
    _head_line = 0  # bytes of its line not yet ended
    _head_tail = b""  # its last 3 bytes: an end of head split between two reads
    _held_window = False  # its writes were paused once: its client stopped reading
    connections: set[Any]
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport

    def _bounded_connection_made(self, transport: asyncio.BaseTransport) -> asyncio.Transport:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
        return cast(
            asyncio.Transport, CoalescedWrites(cast(asyncio.Transport, transport), self.loop)
        )

    def _admit(self) -> None:
        if len(self.connections) > self.bounds.max_connections:
            oldest = next(iter(self.bounds.waiting), None)
            if oldest is None:
                self._refuse()
                return
            oldest._give_up()
        self._await_headers()

    def _await_headers(self) -> None:
        self.bounds.waiting[self] = None
        self._head_bytes = self._head_line = 0
        self._head_tail = b""
        if self._header_timer is not None:
            self._header_timer.cancel()
        self._header_timer = self.loop.call_later(self.bounds.header_timeout, self._give_up)

    def _headers_received(self) -> None:
        self.bounds.waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _head_refused(self, data: bytes) -> bool:
        """Count the bytes of a request's head as they come, before the parser reads them.

        A head over ``max_header_bytes`` in all, or with a line (the request
        line or a header) over :data:`MAX_HEADER_LINE`, is answered ``431``
        and the connection closed: True, and the parser is not given ``data``.
        Only bytes up to the end of the head are counted (a body that came
        with it is not); no more than the bound plus one read is ever held.
        """
        if self not in self.bounds.waiting:
            return False
        limit = self.bounds.max_header_bytes
        joined = self._head_tail + data
        ends = [
            found + len(mark)
            for mark in (b"\r\n\r\n", b"\n\n")
            if (found := joined.find(mark)) >= 0
        ]
        upto = max(min(ends) - len(self._head_tail), 0) if ends else len(data)
        head = data[: min(upto, limit - self._head_bytes + 1)]  # past the bound: refused anyway
        self._head_bytes += len(head)
        self._head_tail = joined[-3:]
        line = self._head_line
        longest = 0
        *ended, rest = head.split(b"\n")
        for segment in ended:
            longest = max(longest, line + len(segment))
            line = 0
        line += len(rest)
        self._head_line = line
        if self._head_bytes <= limit and max(longest, line) <= min(MAX_HEADER_LINE, limit):
            return False
        self._headers_received()
        body = _encode(
            {
                "error": f"request head too large (over {limit} bytes, or a line over "
                f"{min(MAX_HEADER_LINE, limit)})",
                "code": "INVALID_REQUEST",
            }
        )
        head_431 = (
            "HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        if not self.transport.is_closing():
            self.transport.write(head_431.encode() + body)
            self.transport.close()
        return True

    def _writes_paused(self) -> None:
        """The transport's buffer went over its high-water mark: time how long it stays so."""
        self._held_window = True
        if self._write_timer is None:
            self._write_timer = self.loop.call_later(
                self.bounds.write_timeout, self._client_takes_nothing
            )

    def _writes_resumed(self) -> None:
        """The client took bytes (the buffer drained below its low-water mark)."""
        if self._write_timer is not None:
            self._write_timer.cancel()
            self._write_timer = None

    def _client_takes_nothing(self) -> None:
        """The client took nothing for ``write_timeout``: cut the connection, dropping its bytes.

        A close would wait to flush what is buffered, for as long as the
        client keeps not reading; an abort frees it now.
        """
        self._write_timer = None
        log.info("a client took nothing for %ss: its connection is cut", self.bounds.write_timeout)
        sock = self.transport.get_extra_info("socket")
        if sock is not None:
            # A reset, not a close: the kernel drops the bytes queued for the client too
            # (a close would leave them queued for as long as it keeps not reading).
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.transport.abort()

    def _bounded_connection_lost(self) -> None:
        """The connection closed: stop its timers (before uvicorn's own ``connection_lost``)."""
        self._headers_received()
        self._watch_body(False)
        self._writes_resumed()

    def _reclaim_if_held(self) -> None:
        """After uvicorn's ``connection_lost``: a connection that held a window is reclaimed."""
        if self._held_window:
            self.bounds.reclaimer.soon(self.loop)

    def _give_up(self) -> None:
        """No request came in time (or room was needed): close without answering."""
        self._headers_received()
        if not self.transport.is_closing():
            self.transport.close()

    def _watch_body(self, pending: bool) -> None:
        """After the bytes that came in: time the request's body while some is still due."""
        if pending:
            if self._body_timer is None:
                self._body_timer = self.loop.call_later(
                    self.bounds.body_timeout, self._body_too_slow
                )
        elif self._body_timer is not None:
            self._body_timer.cancel()
            self._body_timer = None

    def _body_too_slow(self) -> None:
        """The body did not arrive in time: close unanswered, unless a response is under way."""
        self._body_timer = None
        cycle = getattr(self, "cycle", None)
        if cycle is not None and cycle.response_started:
            return  # answered without its body (it never read it): not stalled
        if not self.transport.is_closing():
            self.transport.close()

    def send_400_response(self, msg: str) -> None:
        """A request that is not HTTP uvicorn can parse: ``400`` in the protocol's shape.

        uvicorn's own answer is ``text/plain``; a client of the protocol
        reads every refusal as ``{"error", "code"}``. The connection closes
        (at once, when a response is under way: no answer fits in it).
        """
        cycle = getattr(self, "cycle", None)  # the last request's, on a keep-alive one
        if cycle is not None and cycle.response_started and not cycle.response_complete:
            self.transport.close()
            return
        body = _encode({"error": "malformed HTTP request", "code": "INVALID_REQUEST"})
        head = (
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()

    def _refuse(self) -> None:
        limit = self.bounds.max_connections
        body = error_body(f"too many open connections ({limit}); retry later")
        head = (
            "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
        )
        self.transport.write(head.encode() + body)
        self.transport.close()
