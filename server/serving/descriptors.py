"""Descriptors: room in ``RLIMIT_NOFILE`` for the connections, and quiet accept errors.

- :func:`fit_descriptor_limit`: makes room in ``RLIMIT_NOFILE`` for the
  connections, or lowers the cap to what fits; :func:`fit_listen_backlog`
  sizes the listen queue within it.
- :func:`quiet_accept_errors`: asyncio logs "socket.accept() out of system
  resource" once per failed accept, with a traceback; this lets one through
  per 10 seconds.
"""

from __future__ import annotations

import logging
import math
import resource
import time

from helix_agents.server.serving.limits import (
    LISTEN_BACKLOG,
    MAX_LISTEN_BACKLOG,
    RESERVED_DESCRIPTORS,
)

__all__ = ["fit_descriptor_limit", "fit_listen_backlog", "quiet_accept_errors"]

log = logging.getLogger("helix_agents.server")

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
