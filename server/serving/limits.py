"""Bounds that keep a served process answering under hostile or broken clients.

- :class:`StreamLimit`: ASGI middleware capping the open ``/sse`` streams;
  beyond the cap it answers ``503 UNAVAILABLE`` with ``Retry-After``. Wrap
  any ``create_http_app`` app with it (``serve`` does).
- :func:`bounded_http_protocol`: uvicorn's HTTP/1.1 protocol with a cap on
  open connections (the connection that has waited longest for its request's
  headers is closed to make room; if none waits, the newcomer gets a 503) and
  a time limit on receiving a request's headers (slowloris); a request it
  cannot parse is answered ``400 INVALID_REQUEST`` in the protocol's shape.
- :func:`quiet_accept_errors`: asyncio logs "socket.accept() out of system
  resource" once per failed accept, with a traceback; this lets one through
  per 10 seconds.
- :func:`fit_descriptor_limit`: makes room in ``RLIMIT_NOFILE`` for the
  connections, or lowers the cap to what fits.
"""

from __future__ import annotations

import asyncio
import logging
import math
import resource
import time
from typing import Any, cast

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

from helix_agents.errors import UsageError

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_STREAMS",
    "LISTEN_BACKLOG",
    "MAX_LISTEN_BACKLOG",
    "StreamLimit",
    "HTTP_PARSERS",
    "bounded_http_protocol",
    "fit_descriptor_limit",
    "fit_listen_backlog",
    "quiet_accept_errors",
]

log = logging.getLogger("helix_agents.server")

DEFAULT_GRACE = 30.0
"""Seconds ``serve`` lets runs go on after SIGTERM before interrupting them."""
DEFAULT_MAX_CONNECTIONS = 1000
"""Open connections ``serve`` keeps at most (lowered to fit the descriptor limit)."""
DEFAULT_HEADER_TIMEOUT = 10.0
"""Seconds a connection may take to send a request's headers before it is closed."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds a request's body may take to arrive, once its headers have, before it is closed."""
DEFAULT_KEEP_ALIVE = 5
"""Seconds an idle keep-alive connection stays open between requests (uvicorn's default)."""
DEFAULT_MAX_STREAMS = 500
"""Open ``/sse`` streams at most; beyond, ``503`` with ``Retry-After``."""
LISTEN_BACKLOG = 256
"""The shortest listen backlog ``serve`` asks for (descriptors are always kept for one burst)."""
MAX_LISTEN_BACKLOG = 4096
"""The longest listen backlog ``serve`` asks for (Linux's default cap, ``net.core.somaxconn``)."""
RESERVED_DESCRIPTORS = 64
"""Descriptors kept free of connections: the store, logs, the loop's own."""
STREAM_RETRY_AFTER = 5
"""Seconds a client refused a stream is told to wait (``Retry-After``)."""

_encode = msgspec.json.Encoder().encode


def _error_body(message: str) -> bytes:
    return _encode({"error": message, "code": "UNAVAILABLE"})


class StreamLimit:
    """ASGI middleware: at most ``max_streams`` requests to ``/sse`` at once.

    Beyond the cap a request is answered ``503`` with the protocol's error
    shape (``{"error", "code": "UNAVAILABLE"}``) and ``Retry-After``, before
    it reaches the app. ``path`` is matched below the app's mount point.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        max_streams: int = DEFAULT_MAX_STREAMS,
        retry_after: int = STREAM_RETRY_AFTER,
        path: str = "/sse",
    ) -> None:
        if isinstance(max_streams, bool) or not isinstance(max_streams, int) or max_streams < 1:
            raise UsageError(f"max_streams must be an int >= 1, not {max_streams!r}")
        if isinstance(retry_after, bool) or not isinstance(retry_after, int) or retry_after < 0:
            raise UsageError(f"retry_after must be an int >= 0, not {retry_after!r}")
        self.app = app
        self.max_streams = max_streams
        self.retry_after = retry_after
        self.path = path
        self.open = 0
        """Streams open now."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass the request on, or refuse it when the streams are all taken."""
        if scope["type"] != "http" or _route_path(scope) != self.path:
            await self.app(scope, receive, send)
            return
        if self.open >= self.max_streams:
            body = _error_body(f"too many open streams ({self.max_streams}); retry later")
            await send(
                {
                    "type": "http.response.start",
                    "status": 503,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        (b"retry-after", str(self.retry_after).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        self.open += 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.open -= 1


def _route_path(scope: Scope) -> str:
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class _CoalescedWrites:
    """A transport whose writes made in one turn of the event loop leave in one syscall.

    uvicorn writes a response's head, each body message and the chunked
    terminator separately, and each ``write`` on an idle socket is a
    ``send`` at once. This collects the writes of one turn of the loop (a
    response's head and body, a stream's last frames and its end) and hands
    them to the socket together, at the end of that turn. Everything else is
    the transport's own; ``close`` and ``abort`` settle the writes first.
    """

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Queue ``data`` for the end of this turn of the loop."""
        if not data:
            return
        if self._pending is None:
            self._pending = []
            self._loop.call_soon(self.flush)
        self._pending.append(bytes(data))

    def writelines(self, chunks: Any) -> None:
        """Queue each of ``chunks``."""
        for chunk in chunks:
            self.write(chunk)

    def flush(self) -> None:
        """Hand what is queued to the socket now."""
        pending, self._pending = self._pending, None
        if pending and not self._transport.is_closing():
            self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def close(self) -> None:
        """Send what is queued, then close."""
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        """Drop what is queued and close at once."""
        self._pending = None
        self._transport.abort()

    def get_write_buffer_size(self) -> int:
        """Bytes not yet sent, queued here or in the transport."""
        queued = sum(len(chunk) for chunk in self._pending or ())
        return queued + self._transport.get_write_buffer_size()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _Waiting:
    """A server's connections still waiting for a request's headers, oldest first."""

    __slots__ = ("connections",)

    def __init__(self) -> None:
        self.connections: dict[Any, None] = {}


HTTP_PARSERS = ("h11", "httptools")
"""The HTTP/1.1 implementations of uvicorn that :func:`bounded_http_protocol` can bound."""


def bounded_http_protocol(
    max_connections: int,
    header_timeout: float,
    *,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    parser: str = "h11",
) -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol, bounded: pass it as ``uvicorn.Config(http=...)``.

    - At most ``max_connections`` open connections: a new one beyond closes
      the connection that has waited longest for its request's headers (a
      slowloris before a client mid-request), or, when every connection is
      busy with a request, is answered ``503 UNAVAILABLE`` and closed.
    - A request's headers must arrive within ``header_timeout`` seconds of
      the connection opening (or of the previous response on a keep-alive
      connection), else the connection is closed.
    - Its body must then arrive whole within ``body_timeout`` seconds, else
      the connection is closed unanswered (a request whose response has
      begun is left alone: the application took it without its body).
    - The writes of one turn of the event loop leave in one syscall.

    ``parser`` is uvicorn's ``"h11"`` (pure Python) or ``"httptools"`` (C).
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int):
        raise UsageError(f"max_connections must be an int, not {max_connections!r}")
    if max_connections < 1:
        raise UsageError(f"max_connections must be at least 1, not {max_connections}")
    for name, value in (("header_timeout", header_timeout), ("body_timeout", body_timeout)):
        if isinstance(value, bool) or not (isinstance(value, int | float) and 0 < value < math.inf):
            raise UsageError(f"{name} must be a positive number, not {value!r}")
    if parser not in HTTP_PARSERS:
        raise UsageError(f"parser must be one of {', '.join(HTTP_PARSERS)}, not {parser!r}")

    waiting = _Waiting()

    class Bounded:
        """What both bounded protocols add: the cap, the header timer, coalesced writes."""

        _header_timer: asyncio.TimerHandle | None = None
        _body_timer: asyncio.TimerHandle | None = None
        connections: set[Any]
        loop: asyncio.AbstractEventLoop
        transport: asyncio.Transport

        def _bounded_connection_made(self, transport: asyncio.BaseTransport) -> asyncio.Transport:
            return cast(
                asyncio.Transport, _CoalescedWrites(cast(asyncio.Transport, transport), self.loop)
            )

        def _admit(self) -> None:
            if len(self.connections) > max_connections:
                oldest = next(iter(waiting.connections), None)
                if oldest is None:
                    self._refuse()
                    return
                oldest._give_up()
            self._await_headers()

        def _await_headers(self) -> None:
            waiting.connections[self] = None
            if self._header_timer is not None:
                self._header_timer.cancel()
            self._header_timer = self.loop.call_later(header_timeout, self._give_up)

        def _headers_received(self) -> None:
            waiting.connections.pop(self, None)
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _give_up(self) -> None:
            """No request came in time (or room was needed): close without answering."""
            self._headers_received()
            if not self.transport.is_closing():
                self.transport.close()

        def _watch_body(self, pending: bool) -> None:
            """After the bytes that came in: time the request's body while some is still due."""
            if pending:
                if self._body_timer is None:
                    self._body_timer = self.loop.call_later(body_timeout, self._body_too_slow)
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
            body = _error_body(f"too many open connections ({max_connections}); retry later")
            head = (
                "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                f"content-length: {len(body)}\r\nretry-after: 1\r\nconnection: close\r\n\r\n"
            )
            self.transport.write(head.encode() + body)
            self.transport.close()

    if parser == "httptools":
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

        class BoundedHttpToolsProtocol(Bounded, HttpToolsProtocol):
            """uvicorn's httptools protocol with a connection cap and a header timeout."""

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(self._bounded_connection_made(transport))
                self._admit()

            def on_headers_complete(self) -> None:
                super().on_headers_complete()
                self._headers_received()

            def data_received(self, data: bytes) -> None:
                super().data_received(data)
                # A request whose body came with its headers (most) sets no timer.
                cycle = self.cycle
                self._watch_body(
                    cycle is not None and cycle.more_body and not cycle.response_started
                )

            def on_response_complete(self) -> None:
                queued = bool(self.pipeline)  # the next request's headers are in already
                super().on_response_complete()
                if not self.transport.is_closing() and not queued:
                    self._await_headers()  # keep-alive: the next request's headers are timed too

            def connection_lost(self, exc: Exception | None) -> None:
                self._headers_received()
                self._watch_body(False)
                super().connection_lost(exc)

        return BoundedHttpToolsProtocol

    import h11  # uvicorn's, imported only to serve
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class BoundedH11Protocol(Bounded, H11Protocol):
        """uvicorn's h11 protocol with a connection cap and a header timeout."""

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(self._bounded_connection_made(transport))
            self._admit()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            state = self.conn.their_state
            if self in waiting.connections and state is not h11.IDLE:
                self._headers_received()
            self._watch_body(state is h11.SEND_BODY)

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and self.conn.their_state is h11.IDLE:
                self._await_headers()  # keep-alive: the next request's headers are timed too

        def connection_lost(self, exc: Exception | None) -> None:
            self._headers_received()
            self._watch_body(False)
            super().connection_lost(exc)

    return BoundedH11Protocol


_ACCEPT_ERROR = "socket.accept() out of system resource"


class _OneAcceptErrorPer(logging.Filter):
    """Lets one accept-error record through per ``interval`` seconds, with a count of the rest."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self.last = -math.inf
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not message.startswith(_ACCEPT_ERROR):
            return True
        now = time.monotonic()
        if now - self.last < self.interval:
            self.dropped += 1
            return False
        self.last = now
        first_line = message.split("\n", 1)[0]
        if self.dropped:
            first_line += f" ({self.dropped} more since the last report)"
        self.dropped = 0
        record.msg, record.args = first_line, ()
        record.exc_info, record.exc_text = None, None  # one line, not a traceback each time
        return True


_accept_filter: _OneAcceptErrorPer | None = None


def quiet_accept_errors(interval: float = 10.0) -> logging.Filter:
    """Rate-limit asyncio's "socket.accept() out of system resource" records (idempotent).

    Each failed accept is logged with a traceback; with the descriptors
    exhausted that is hundreds of thousands of records a minute. This lets
    one through per ``interval`` seconds, as one line counting the others.
    """
    global _accept_filter
    if _accept_filter is None:
        _accept_filter = _OneAcceptErrorPer(interval)
        logging.getLogger("asyncio").addFilter(_accept_filter)
    return _accept_filter


def _raise_soft_limit(needed: int, *, quiet: bool = False) -> float:
    """Raise ``RLIMIT_NOFILE``'s soft limit towards ``needed`` (as far as the hard one allows).

    Returns the soft limit then in force (``inf`` for none).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return math.inf
    if soft < needed:
        raised = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError) as exc:
            if not quiet:
                log.warning("cannot raise the open-file limit to %d: %s", raised, exc)
    return soft


def fit_descriptor_limit(max_connections: int) -> int:
    """Make room for ``max_connections`` in ``RLIMIT_NOFILE``; the number that fits.

    Raises the soft limit as far as the hard limit allows. What must fit:
    the connections, one accept burst (:data:`LISTEN_BACKLOG` sockets taken
    before any is closed) and :data:`RESERVED_DESCRIPTORS`.
    """
    needed = max_connections + LISTEN_BACKLOG + RESERVED_DESCRIPTORS
    soft = _raise_soft_limit(needed)
    if soft >= needed:
        return max_connections
    fitting = max(int(soft) - LISTEN_BACKLOG - RESERVED_DESCRIPTORS, 1)
    log.warning(
        "the open-file limit (%d) leaves room for %d connections, not %d: serving %d",
        soft,
        fitting,
        max_connections,
        fitting,
    )
    return fitting


def fit_listen_backlog(connections: int) -> int:
    """The listen backlog for ``connections`` (as :func:`fit_descriptor_limit` left them).

    Room for all of them to connect at once: a burst of clients connecting
    together waits in the kernel's queue instead of overflowing it (an
    overflowed handshake is retried by TCP a second or more later, or fails).
    At least :data:`LISTEN_BACKLOG`, at most :data:`MAX_LISTEN_BACKLOG`, and
    no longer than the open-file limit allows beside the connections (one
    accept burst may take the whole queue before any is closed); the soft
    limit is raised for it when the hard limit allows.
    """
    wanted = max(LISTEN_BACKLOG, min(connections, MAX_LISTEN_BACKLOG))
    soft = _raise_soft_limit(connections + wanted + RESERVED_DESCRIPTORS, quiet=True)
    room = soft - connections - RESERVED_DESCRIPTORS
    return int(max(LISTEN_BACKLOG, min(wanted, room)))
