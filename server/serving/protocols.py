"""uvicorn's HTTP/1.1 protocols, bounded: :func:`bounded_http_protocol` for ``serve``.

A cap on open connections (the connection that has waited longest for its
request's headers is closed to make room; if none waits, the newcomer gets
a 503), time limits on receiving a request's headers (slowloris) and body,
and a request it cannot parse answered ``400 INVALID_REQUEST`` in the
protocol's shape. The parser-specific hooks live in ``h11_protocol`` and
``httptools_protocol``, imported only for the parser asked for.
"""

from __future__ import annotations

import asyncio
import math

from helix_agents.errors import UsageError
from helix_agents.server.serving.bounded import Bounds
from helix_agents.server.serving.limits import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_MAX_HEADER_BYTES,
    DEFAULT_WRITE_TIMEOUT,
    MAX_HEADER_LINE,
)

__all__ = ["HTTP_PARSERS", "MAX_HEADER_LINE", "bounded_http_protocol"]

HTTP_PARSERS = ("h11", "httptools")
"""The HTTP/1.1 implementations of uvicorn that :func:`bounded_http_protocol` can bound."""


def bounded_http_protocol(
    max_connections: int,
    header_timeout: float,
    *,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES,
    write_timeout: float = DEFAULT_WRITE_TIMEOUT,
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
    - Its head may take ``max_header_bytes`` in all, and each of its lines
      (the request line, each header) :data:`MAX_HEADER_LINE` bytes, else
      it is answered ``431`` and the connection closed, on both parsers.
      With h11, pass ``h11_max_incomplete_event_size=max_header_bytes`` too
      (``serve`` does), or h11's own 16 KiB bound answers 400 first.
    - A response whose client takes no bytes for ``write_timeout`` seconds
      (the transport's writes stay paused) has its connection cut (aborted:
      what was buffered for it is dropped).
    - The writes of one turn of the event loop leave in one syscall.

    ``parser`` is uvicorn's ``"h11"`` (pure Python) or ``"httptools"`` (C).
    """
    if isinstance(max_connections, bool) or not isinstance(max_connections, int):
        raise UsageError(f"max_connections must be an int, not {max_connections!r}")
    if max_connections < 1:
        raise UsageError(f"max_connections must be at least 1, not {max_connections}")
    timeouts = (
        ("header_timeout", header_timeout),
        ("body_timeout", body_timeout),
        ("write_timeout", write_timeout),
    )
    for name, value in timeouts:
        if isinstance(value, bool) or not (isinstance(value, int | float) and 0 < value < math.inf):
            raise UsageError(f"{name} must be a positive number, not {value!r}")
    if (
        isinstance(max_header_bytes, bool)
        or not isinstance(max_header_bytes, int)
        or max_header_bytes < 256
    ):
        raise UsageError(f"max_header_bytes must be an int >= 256, not {max_header_bytes!r}")
    if parser not in HTTP_PARSERS:
        raise UsageError(f"parser must be one of {', '.join(HTTP_PARSERS)}, not {parser!r}")

    bounds = Bounds(max_connections, header_timeout, body_timeout, max_header_bytes, write_timeout)
    base: type[asyncio.Protocol]
    if parser == "httptools":
        from helix_agents.server.serving.httptools_protocol import BoundedHttpToolsProtocol

        base = BoundedHttpToolsProtocol
    else:
        from helix_agents.server.serving.h11_protocol import BoundedH11Protocol

        base = BoundedH11Protocol
    # A subclass per server: its connections share its bounds and no other's.
    return type(base.__name__, (base,), {"bounds": bounds, "__doc__": base.__doc__})
