"""Runs a durable step asks for, handed to its workflow instead of launched by the step.

A local child call's ``open`` starts (or resumes) the child through the
protocol service, which launches the child's run. In a durable engine the
parent's *workflow* launches it (Temporal: as a child workflow), so while a
step opens a child, the engine's launcher only notes the launch here
(:func:`deferred_launch`) and the step returns it to the workflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

__all__ = ["Launch", "collect_launches", "deferred_launch"]


@dataclass(frozen=True)
class Launch:
    """A run of ``session_id`` whose log ends at ``seq`` (its ``run_started``)."""

    session_id: str
    seq: int
    run_id: str


_COLLECTING: ContextVar[list[Launch] | None] = ContextVar("helix_durable_launches", default=None)


@contextmanager
def collect_launches() -> Iterator[list[Launch]]:
    """Within the block (and the tasks it starts), launches are noted in the list, not made."""
    launches: list[Launch] = []
    token = _COLLECTING.set(launches)
    try:
        yield launches
    finally:
        _COLLECTING.reset(token)


def deferred_launch(session_id: str, seq: int, run_id: str) -> bool:
    """Note a launch if a step is collecting them (True); else False: launch it now."""
    collecting = _COLLECTING.get()
    if collecting is None:
        return False
    collecting.append(Launch(session_id, seq, run_id))
    return True
