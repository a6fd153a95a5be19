"""Giving freed memory back to the system: a fixed ``mmap`` threshold for glibc's malloc.

glibc serves an allocation of 128 KiB or more with its own ``mmap``, and
returns it to the system when it is freed; but each such free raises the
threshold to the size freed (up to 32 MiB), so after the first large buffer
goes, later ones come from the heap, which keeps them after they are freed.
A server that held a few hundred streams of a 2 MB log for slow readers
stayed at 396 MB once they were gone. Fixing the threshold (which turns its
adjustment off) keeps every large buffer in its own mapping: the memory of
readers that go returns at once. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging

__all__ = ["MMAP_THRESHOLD", "fix_mmap_threshold"]

MMAP_THRESHOLD = 128 * 1024
"""Bytes from which an allocation gets its own mapping (glibc's initial threshold)."""
_M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)

log = logging.getLogger("helix_agents.server")


def fix_mmap_threshold(threshold: int = MMAP_THRESHOLD) -> bool:
    """Fix glibc's ``mmap`` threshold at ``threshold`` bytes; whether it could be set."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl, macOS): nothing to fix
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(_M_MMAP_THRESHOLD, threshold))
    if not done:
        log.debug("mallopt(M_MMAP_THRESHOLD, %d) refused", threshold)
    return done
