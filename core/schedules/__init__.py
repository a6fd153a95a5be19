"""Schedules: runs started by the clock (cron expressions in a time zone, or intervals).

:class:`Schedules` keeps a store's schedules (create, list, pause, resume,
delete); a :class:`Scheduler` fires them, exactly one run per tick across
restarts and a fleet (specs/server.md, "Schedules"). ``AgentServer`` runs one
while it is open; the durable runtimes give the ticks to their engines' own
schedulers instead.
"""

from __future__ import annotations

from .book import (
    Schedule,
    ScheduleBook,
    ScheduleEngine,
    ScheduleEntry,
    ScheduleRequest,
    Schedules,
    tick_session_id,
)
from .scheduler import DEFAULT_POLL, Scheduler, ScheduleTarget, fire_request
from .timing import Timing, checked_timing

__all__ = [
    "DEFAULT_POLL",
    "Schedule",
    "ScheduleBook",
    "ScheduleEngine",
    "ScheduleEntry",
    "ScheduleRequest",
    "ScheduleTarget",
    "Scheduler",
    "Schedules",
    "Timing",
    "checked_timing",
    "fire_request",
    "tick_session_id",
]
