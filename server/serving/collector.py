"""Tuning Python's cyclic garbage collector for a process holding many live sessions.

A serving process keeps every live session's tasks, streams and folded
state on the heap; with the interpreter's default thresholds (a young
collection every 700 allocations, and full collections as the heap grows)
a burst of a thousand starts spends a third of its CPU in the collector,
and each full collection, which walks the whole heap, stalls every
session's stream for tens of milliseconds. ``serve`` therefore freezes
what it has loaded before serving (imported modules, the app, the agents:
never collected again, never walked) and collects the young generation
every :data:`YOUNG_THRESHOLD` allocations instead. Cycles are still
collected; they only live a little longer.
"""

from __future__ import annotations

import gc

__all__ = ["YOUNG_THRESHOLD", "tune_collector"]

YOUNG_THRESHOLD = 50_000
"""Allocations (net, of objects that can form cycles) between young collections."""


def tune_collector(young: int = YOUNG_THRESHOLD) -> None:
    """Freeze what the process holds now and collect the young generation every ``young``."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(young, middle, old)
