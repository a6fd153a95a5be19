"""Giving freed memory back: glibc's ``mmap`` threshold, and a reclaim after slow readers.

glibc serves an allocation of 128 KiB or more with its own ``mmap``, and
returns it to the system when it is freed; but each such free raises the
threshold to the size freed (up to 32 MiB), so after the first large buffer
goes, later ones come from the heap, which keeps them after they are freed.
A server that held a few hundred streams of a 2 MB log for slow readers
stayed at 396 MB once they were gone. Fixing the threshold (which turns its
adjustment off) keeps every large buffer in its own mapping: the memory of
readers that go returns at once. Elsewhere than glibc this does nothing.

What a reader's window leaves is small objects (pages of events, frames,
the tasks of a stream), some in reference cycles (a cancelled task group's
exceptions hold its frames), which the tuned collector (``collector.py``)
collects late, and whose freed heap glibc keeps. So when a connection that
held a window (its client stopped reading) closes, :class:`Reclaimer`
collects cycles and trims the heap (``malloc_trim``) once the closes have
been quiet for :data:`RECLAIM_DELAY`: 200 such readers gone, RSS returned
from 119 to 70 MB (the collector alone: 114; the trim alone: 82).
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import gc
import logging
from typing import Any

__all__ = ["MMAP_THRESHOLD", "RECLAIM_DELAY", "Reclaimer", "fix_mmap_threshold"]

RECLAIM_DELAY = 1.0
"""Seconds after the last close of a connection that held a window before memory is reclaimed."""

MMAP_THRESHOLD = 128 * 1024
"""Bytes from which an allocation gets its own mapping (glibc's initial threshold)."""
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)

log = logging.getLogger("helix_agents.server")


def _libc_function(name: str) -> Any:
    """glibc's function ``name``, or None (another C library: musl, macOS)."""
    library = ctypes.util.find_library("c")
    if library is None:
        return None
    try:
        function = getattr(ctypes.CDLL(library), name)
    except (OSError, AttributeError):
        return None
    return function


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's ``mmap`` threshold at ``threshold`` bytes; whether it could be set."""
    mallopt = _libc_function("mallopt")
    if mallopt is None:
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold)
    return done


class Reclaimer:
    """Collects cycles and trims the heap once connections that held a window have closed.

    :meth:`soon` (a connection closed) schedules one reclaim
    :data:`RECLAIM_DELAY` seconds later, unless one is scheduled already: a
    burst of closes costs one, and a steady churn one a second at most. A
    reclaim is one full collection (tens of milliseconds on a large heap)
    and ``malloc_trim(0)`` (glibc only; a few milliseconds).
    """

    __slots__ = ("_delay", "_handle", "_trim", "reclaims")

    def __init__(self, delay: float = RECLAIM_DELAY) -> None:
        self._delay = delay
        self._handle: asyncio.TimerHandle | None = None
        trim = _libc_function("malloc_trim")
        if trim is not None:
            trim.argtypes = [ctypes.c_size_t]
            trim.restype = ctypes.c_int
        self._trim = trim
        self.reclaims = 0
        """Reclaims done so far."""

    def soon(self, loop: asyncio.AbstractEventLoop) -> None:
        """A connection that held a window closed: reclaim once the closes are quiet."""
        if self._handle is None:
            self._handle = loop.call_later(self._delay, self.reclaim)

    def reclaim(self) -> None:
        """Collect cycles now, then give the heap's free memory back to the system."""
        self._handle = None
        self.reclaims += 1
        gc.collect()
        if self._trim is not None:
            self._trim(0)
