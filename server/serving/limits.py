"""The serving bounds' defaults, and :class:`StreamLimit` capping the open ``/sse`` streams.

:class:`StreamLimit` is ASGI middleware: beyond its cap it answers ``503
UNAVAILABLE`` with ``Retry-After``. Wrap any ``create_http_app`` app with it
(``serve`` does). The connection, header and body bounds live in
:mod:`~helix_agents.server.serving.protocols`; the descriptor limit in
:mod:`~helix_agents.server.serving.descriptors`.
"""

from __future__ import annotations

import msgspec
from starlette.types import ASGIApp, Receive, Scope, Send

from helix_agents.errors import UsageError

__all__ = [
    "DEFAULT_GRACE",
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_KEEP_ALIVE",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_WRITE_TIMEOUT",
    "MAX_HEADER_LINE",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_STREAMS",
    "LISTEN_BACKLOG",
    "MAX_LISTEN_BACKLOG",
    "RESERVED_DESCRIPTORS",
    "StreamLimit",
    "error_body",
]

DEFAULT_GRACE = 30.0
"""Seconds ``serve`` lets runs go on after SIGTERM before interrupting them."""
DEFAULT_MAX_CONNECTIONS = 1000
"""Open connections ``serve`` keeps at most (lowered to fit the descriptor limit)."""
DEFAULT_HEADER_TIMEOUT = 10.0
"""Seconds a connection may take to send a request's headers before it is closed."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds a request's body may take to arrive, once its headers have, before it is closed."""
DEFAULT_WRITE_TIMEOUT = 30.0
"""Seconds a response may wait for its client to take any bytes before the connection is cut."""
DEFAULT_MAX_HEADER_BYTES = 32 * 1024
"""Bytes a request's head (request line and headers) may take; beyond, ``431`` and a close."""
MAX_HEADER_LINE = 8 * 1024
"""Bytes the request line, or any one header line, may take (at most the whole head's bound)."""
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


def error_body(message: str) -> bytes:
    """The protocol's ``UNAVAILABLE`` error body carrying ``message``."""
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
            body = error_body(f"too many open streams ({self.max_streams}); retry later")
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
