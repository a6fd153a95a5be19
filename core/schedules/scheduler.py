"""``Scheduler``: fires the store's schedules, once per tick, wherever it runs.

Each pass folds what is new in the schedules log and, for each live schedule
whose tick is due, claims the tick by appending ``schedule_fired`` at the
head it read. The store takes one such append at a given head, so of the
schedulers of every process on the store (restarts, a fleet's hosts) one
claims a tick; only that one starts the run, through the target's own start
(``start``: a new session ``cron.ID.TICK``; ``turn``: a message with id
``cron.ID.TICK`` to the schedule's session). Both are idempotent by that id,
so the start is repaired after a crash between claim and start: a scheduler
that finds a schedule's last fired tick without its session (a claim of its
own from before a restart, or another's older than ``settle`` seconds) starts
it again. Missed ticks follow the schedule's ``catchup`` (specs/server.md).
"""

from __future__ import annotations

import logging
import math
import time
from types import TracebackType
from typing import Protocol

import anyio
import msgspec
from anyio.abc import TaskGroup

from helix_agents.errors import HelixError
from helix_agents.events import Event, ScheduleFired
from helix_agents.log.streaming import read_page
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteStartRequest,
    RemoteStartResponse,
)

from .book import ScheduleBook, ScheduleEntry, Schedules, tick_session_id

__all__ = ["DEFAULT_POLL", "SKIP_GRACE", "ScheduleTarget", "Scheduler", "fire_request"]

log = logging.getLogger("helix_agents.schedules")

DEFAULT_POLL = 1.0
"""Seconds between two reads of the schedules log when no tick is nearer."""

SKIP_GRACE = 5.0
"""With catch-up ``skip``, how late (seconds, at most one period) a tick may still fire."""


class ScheduleTarget(Protocol):
    """Where a tick's run is started: an ``AgentServer``, a fleet's transport."""

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start (idempotently) a session."""
        ...

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Send a follow-up message (idempotent by its id)."""
        ...


def fire_request(
    entry: ScheduleEntry, fired: ScheduleFired
) -> RemoteStartRequest | RemoteMessageRequest:
    """What tick ``fired`` of ``entry`` starts: the schedule's start body, with its ids and owner.

    A start is the ``POST /start`` body the schedule was made with, its
    ``sessionId`` the tick's and its metadata with ``cronId`` and ``cronTick``
    (Unix seconds); its owner is the schedule's.
    """
    created = entry.created
    if created.start is not None:
        metadata = dict(created.start.get("metadata") or {})
        metadata.update(cronId=created.schedule_id, cronTick=str(int(fired.tick)))
        body = {**created.start, "sessionId": fired.run_session_id, "metadata": metadata}
        request = msgspec.json.decode(msgspec.json.encode(body), type=RemoteStartRequest)
        return msgspec.structs.replace(request, owner=created.owner)
    assert created.turn is not None
    body = {**created.turn, "messageId": fired.message_id}
    return msgspec.json.decode(msgspec.json.encode(body), type=RemoteMessageRequest)


class Scheduler:
    """Fires ``schedules`` through ``target`` while open (``async with``).

    Args:
        schedules: the store's schedules.
        target: where each tick's run starts.
        poll: the longest wait between two reads of the log (seconds).
        settle: how old another scheduler's claim must be before this one
            repairs it (starts its run if it is missing).
    """

    def __init__(
        self,
        schedules: Schedules,
        target: ScheduleTarget,
        *,
        poll: float = DEFAULT_POLL,
        settle: float = 5.0,
    ) -> None:
        self.schedules = schedules
        self.target = target
        self.poll = poll
        self.settle = settle
        self._mine: set[tuple[str, float]] = set()
        self._checked: set[tuple[str, float]] = set()
        self._group: TaskGroup | None = None

    async def __aenter__(self) -> Scheduler:
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        group.start_soon(self.run)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    async def run(self) -> None:
        """Fire due ticks until cancelled (a failed pass is logged and tried again)."""
        while True:
            try:
                wait = await self.run_once()
            except HelixError as exc:
                log.warning("scheduler: a pass failed, trying again: %s", exc)
                wait = self.poll
            except Exception:  # never the server's end: the next pass tries again
                log.exception("scheduler: a pass failed, trying again")
                wait = self.poll
            await anyio.sleep(max(0.01, min(wait, self.poll)))

    async def run_once(self, now: float | None = None) -> float:
        """One pass: claim and start every due tick, repair missing starts; seconds to the next."""
        now = time.time() if now is None else now
        book = await self.schedules.refresh()
        nearest = math.inf
        for schedule_id in list(book.live):
            entry = book.live.get(schedule_id)
            if entry is None:
                continue
            await self._repair(entry, now)
            if entry.paused:
                continue
            fired = await self._claim(entry, now)
            if fired is not None:
                await self._start(entry, fired)
            entry = self.schedules.book.live.get(schedule_id)
            if entry is not None and not entry.paused:
                nearest = min(nearest, entry.timing.next_after(max(entry.since, now)) - now)
        return nearest

    async def fire_one(self, schedule_id: str, now: float | None = None) -> ScheduleFired | None:
        """Fire schedule ``schedule_id``'s due tick, if any (an engine's tick calls this).

        Its last fired tick is checked first (its run started if missing), then
        the due tick claimed and its run started; the tick fired, or None.
        """
        now = time.time() if now is None else now
        entry = (await self.schedules.refresh()).live.get(schedule_id)
        if entry is None or entry.paused:
            return None
        await self._repair(entry, now)
        fired = await self._claim(entry, now)
        if fired is not None:
            await self._start(entry, fired)
        return fired

    async def _claim(self, entry: ScheduleEntry, now: float) -> ScheduleFired | None:
        schedule_id = entry.schedule_id
        if entry.timing.due(entry.since, now)[0] is None:
            return None  # nothing due as of the log just read: no append to try

        def decide(book: ScheduleBook) -> Event | None:
            current = book.live.get(schedule_id)
            if current is None or current.paused:
                return None
            latest, count = current.timing.due(current.since, now)
            if latest is None:
                return None
            missed = count - 1
            if current.created.catchup == "skip":
                grace = min(current.timing.period, SKIP_GRACE)
                if now - latest > grace:
                    return None  # late: skipped (the next tick on time fires)
                missed = 0
            key = tick_session_id(schedule_id, latest)
            turn = current.created.turn
            return ScheduleFired(
                schedule_id=schedule_id,
                tick=latest,
                run_session_id=key if turn is None else str(turn["sessionId"]),
                message_id=None if turn is None else key,
                missed=missed,
                fired_at=now,
            )

        event = await self.schedules.append(decide)
        if not isinstance(event, ScheduleFired):
            return None
        self._mine.add((schedule_id, event.tick))
        self._checked.add((schedule_id, event.tick))
        return event

    async def _repair(self, entry: ScheduleEntry, now: float) -> None:
        fired = entry.last
        if fired is None:
            return
        key = (entry.schedule_id, fired.tick)
        if key in self._checked:
            return
        if key not in self._mine and now - fired.fired_at < self.settle:
            return  # another scheduler's fresh claim: it is starting the run
        self._checked.add(key)
        if fired.message_id is None:
            found, _ = await read_page(self.schedules.store, fired.run_session_id, 0, 1)
            if found:
                return
        log.warning(
            "scheduler: tick %s of schedule %s was claimed but its run not seen: starting it",
            int(fired.tick),
            entry.schedule_id,
        )
        await self._start(entry, fired)

    async def _start(self, entry: ScheduleEntry, fired: ScheduleFired) -> None:
        try:
            request = fire_request(entry, fired)
            if isinstance(request, RemoteStartRequest):
                await self.target.start(request)
            else:
                await self.target.send_message(request)
        except (HelixError, msgspec.ValidationError) as exc:
            log.warning(
                "scheduler: tick %s of schedule %s did not start: %s",
                int(fired.tick),
                entry.schedule_id,
                exc,
            )
