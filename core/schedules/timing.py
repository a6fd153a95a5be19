"""When a schedule's ticks fall: cron expressions in a time zone, and intervals.

A cron expression has the five classic fields (minute, hour, day of month,
month, day of week; ``*``, lists, ranges, steps and names), read in an IANA
time zone (``zoneinfo``); it is evaluated by ``cronsim``, which also applies
cron's rules at daylight-saving changes. An interval's ticks are the Unix
times that are whole multiples of it (as Temporal's interval schedules and a
seconds-field cron count them), so every scheduler agrees on them. A tick is a
Unix time in seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from helix_agents.errors import AgentServerError

__all__ = ["MAX_COUNTED", "Timing", "checked_timing"]

MAX_COUNTED = 10_000
"""The most due ticks counted at once (a missed-tick count saturates there)."""

_MAX_INTERVAL = 366 * 24 * 3600
_MAX_EXPRESSION = 200


def _invalid(message: str) -> AgentServerError:
    return AgentServerError("INVALID_REQUEST", message)


@dataclass(frozen=True)
class Timing:
    """A schedule's clock: a cron expression in ``zone``, or an ``interval`` in seconds."""

    cron: str | None
    zone: str
    interval: int | None

    @property
    def period(self) -> float:
        """About how far apart ticks fall: the interval, or a minute for an expression."""
        return float(self.interval) if self.interval is not None else 60.0

    def next_after(self, after: float) -> float:
        """The first tick strictly after ``after``."""
        if self.interval is not None:
            return float((math.floor(after / self.interval) + 1) * self.interval)
        assert self.cron is not None
        start = datetime.fromtimestamp(after, ZoneInfo(self.zone))
        return next(CronSim(self.cron, start)).timestamp()

    def due(self, after: float, until: float) -> tuple[float | None, int]:
        """The latest tick in ``(after, until]`` and how many fall there (at most MAX_COUNTED)."""
        if until <= after:
            return None, 0
        if self.interval is not None:
            first = math.floor(after / self.interval) + 1
            last = math.floor(until / self.interval)
            if last < first:
                return None, 0
            return float(last * self.interval), min(last - first + 1, MAX_COUNTED)
        assert self.cron is not None
        start = datetime.fromtimestamp(after, ZoneInfo(self.zone))
        latest: float | None = None
        count = 0
        for when in CronSim(self.cron, start):
            tick = when.timestamp()
            if tick > until:
                break
            latest, count = tick, count + 1
            if count >= MAX_COUNTED:  # a long outage of a frequent schedule: start near the end
                start = datetime.fromtimestamp(until - 2 * 86400, ZoneInfo(self.zone))
                for late in CronSim(self.cron, start):
                    if late.timestamp() > until:
                        break
                    latest = late.timestamp()
                break
        return latest, count


def checked_timing(cron: str | None, zone: str | None, interval: float | None) -> Timing:
    """The schedule's :class:`Timing`, checked; ``INVALID_REQUEST`` saying what is wrong.

    Exactly one of ``cron`` and ``interval``; ``zone`` (default UTC) only with
    ``cron``; an interval is a whole number of seconds from 1 to a year.
    """
    if (cron is None) == (interval is None):
        raise _invalid("a schedule has exactly one of cron and intervalSeconds")
    if interval is not None:
        if zone is not None:
            raise _invalid("timezone is for a cron expression, not an interval")
        if isinstance(interval, float) and interval.is_integer():
            interval = int(interval)  # JSON's 60.0 is the integer 60
        if isinstance(interval, bool) or not isinstance(interval, int):
            raise _invalid("intervalSeconds must be a whole number of seconds")
        if not 1 <= interval <= _MAX_INTERVAL:
            raise _invalid(f"intervalSeconds must be from 1 to {_MAX_INTERVAL}, not {interval}")
        return Timing(None, "UTC", interval)
    assert cron is not None
    zone = "UTC" if zone is None else zone
    try:
        if not zone or len(zone) > 100:
            raise ValueError(zone)
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise _invalid(
            f"unknown time zone {zone[:100]!r} (an IANA name, e.g. Europe/Paris)"
        ) from exc
    fields = cron.split()
    if len(cron) > _MAX_EXPRESSION or len(fields) != 5:
        raise _invalid(
            f"cron must have 5 fields (minute hour day-of-month month day-of-week), "
            f"not {cron[:_MAX_EXPRESSION]!r}"
        )
    expression = " ".join(fields)
    try:
        next(CronSim(expression, datetime.now(UTC)))
    except (CronSimError, StopIteration, ValueError) as exc:
        raise _invalid(f"bad cron expression {expression!r}: {exc}") from exc
    return Timing(expression, zone, None)
