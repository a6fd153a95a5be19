"""``Schedules``: the store's schedules, kept as one append-only log.

Every fact about a schedule (created, paused, resumed, deleted, each tick
fired) is an event of the store's one schedules log
(:data:`~helix_agents.ids.SCHEDULES_LOG`); the schedules are that log folded
(:class:`ScheduleBook`). A change is appended at the head the writer read
(``expected_seq``): of two writers that read the same head, one wins and the
other reads again, on every store. That is how a tick is claimed exactly once
across restarts and a fleet (``scheduler.py``; specs/server.md, "Schedules").
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec

from helix_agents.errors import AgentServerError, ConcurrencyConflict
from helix_agents.events import (
    Event,
    Principal,
    ScheduleCatchup,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleResumed,
)
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.log.store import EventStore
from helix_agents.log.streaming import read_page
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteStartRequest,
    checked_messages,
    checked_session_id,
)
from helix_agents.runtime.writer import stamp

from .timing import Timing, checked_timing

__all__ = [
    "AgentTypes",
    "Schedule",
    "ScheduleBook",
    "ScheduleEngine",
    "ScheduleEntry",
    "ScheduleRequest",
    "Schedules",
    "tick_session_id",
]

log = logging.getLogger("helix_agents.schedules")

_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_TRIES = 50

AgentTypes = Callable[[], Awaitable[Iterable[str]]]
"""The agent types a schedule may start (a fleet's: what its hosts announce now)."""


def _invalid(message: str) -> AgentServerError:
    return AgentServerError("INVALID_REQUEST", message)


def tick_session_id(schedule_id: str, tick: float) -> str:
    """The id of what tick ``tick`` starts: its session, or its turn's message id."""
    return f"cron.{schedule_id}.{int(tick)}"


class ScheduleRequest(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A new schedule (``POST /crons``): when it fires, and what each tick starts.

    Exactly one of ``cron`` (5 fields, read in ``timezone``, default UTC) and
    ``interval_seconds``; exactly one of ``start`` (a ``POST /start`` body
    without ``sessionId``) and ``turn`` (``{"sessionId", "message"}``: a new
    turn of that session). ``id``: the schedule's id (generated when absent;
    an identical repeat is answered with the schedule it made).
    """

    id: str | None = None
    cron: str | None = None
    timezone: str | None = None
    interval_seconds: float | None = None
    """Whole seconds (``60.0`` is 60); a fraction is refused."""
    catchup: ScheduleCatchup = "once"
    start: dict[str, Any] | None = None
    turn: dict[str, Any] | None = None


class Schedule(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """A schedule as ``GET /crons`` shows it (times in Unix seconds)."""

    id: str
    cron: str | None
    timezone: str
    interval_seconds: int | None
    catchup: ScheduleCatchup
    start: dict[str, Any] | None
    turn: dict[str, Any] | None
    owner: Principal | None
    created_at: float
    paused: bool
    next_tick_at: float | None
    """The next tick it will fire (None while paused)."""
    fired: int
    """How many ticks it has fired."""
    last_tick: float | None
    last_session_id: str | None


@dataclass
class ScheduleEntry:
    """One live schedule, folded from the log."""

    created: ScheduleCreated
    timing: Timing
    paused: bool = False
    since: float = 0.0
    """Ticks after this may fire: its creation, its last resume or its last fired tick."""
    fired: int = 0
    last: ScheduleFired | None = None

    @property
    def schedule_id(self) -> str:
        """The schedule's id."""
        return self.created.schedule_id

    def view(self) -> Schedule:
        """The schedule as the API shows it."""
        c = self.created
        return Schedule(
            id=c.schedule_id,
            cron=c.cron,
            timezone=c.timezone,
            interval_seconds=c.interval_seconds,
            catchup=c.catchup,
            start=c.start,
            turn=c.turn,
            owner=c.owner,
            created_at=c.created_at,
            paused=self.paused,
            next_tick_at=None
            if self.paused
            else self.timing.next_after(max(self.since, time.time())),
            fired=self.fired,
            last_tick=None if self.last is None else self.last.tick,
            last_session_id=None if self.last is None else self.last.run_session_id,
        )


@dataclass
class ScheduleBook:
    """The schedules log folded: the live schedules by id, and the log's head."""

    head: int = 0
    live: dict[str, ScheduleEntry] = field(default_factory=dict)
    gone: set[str] = field(default_factory=set)

    def apply(self, event: Event) -> None:
        """Fold one event of the log (in order)."""
        self.head = event.seq
        if isinstance(event, ScheduleCreated):
            try:
                timing = checked_timing(
                    event.cron,
                    None if event.cron is None else event.timezone,
                    event.interval_seconds,
                )
            except AgentServerError as exc:  # e.g. a zone this machine's tz data lacks
                log.error("schedule %s cannot fire here: %s", event.schedule_id, exc)
                self.gone.add(event.schedule_id)
                return
            self.live[event.schedule_id] = ScheduleEntry(event, timing, since=event.created_at)
            return
        entry = self.live.get(getattr(event, "schedule_id", ""))
        if entry is None:
            return
        if isinstance(event, SchedulePaused):
            entry.paused = True
        elif isinstance(event, ScheduleResumed):
            entry.paused, entry.since = False, max(entry.since, event.at)
        elif isinstance(event, ScheduleDeleted):
            del self.live[entry.schedule_id]
            self.gone.add(entry.schedule_id)
        elif isinstance(event, ScheduleFired):
            entry.fired += 1
            entry.last = event
            entry.since = max(entry.since, event.tick)

    def taken(self, schedule_id: str) -> bool:
        """Whether ``schedule_id`` names a schedule, live or deleted."""
        return schedule_id in self.live or schedule_id in self.gone


class ScheduleEngine(Protocol):
    """A durable engine's own scheduler, which fires the ticks instead of a ``Scheduler``.

    The schedules log stays the record (what exists, what each tick fired); the
    engine's schedule of each only says when to fire it, and its tick calls
    ``Scheduler.fire_one``. Each method is idempotent (``sync`` repeats them).
    """

    def check(self, timing: Timing) -> None:
        """Raise ``INVALID_REQUEST`` if the engine cannot fire on this clock."""
        ...

    async def ensure(self, entry: ScheduleEntry) -> None:
        """The engine's schedule of ``entry`` exists, paused as it is."""
        ...

    async def pause(self, schedule_id: str) -> None:
        """Pause the engine's schedule."""
        ...

    async def resume(self, schedule_id: str) -> None:
        """Resume the engine's schedule."""
        ...

    async def delete(self, schedule_id: str) -> None:
        """Delete the engine's schedule (nothing if it is gone)."""
        ...


def _checked_start(body: dict[str, Any]) -> dict[str, Any]:
    if "sessionId" in body:
        raise _invalid("a schedule's start has no sessionId: each tick's session is cron.ID.TICK")
    probe = {**body, "sessionId": "cron.probe.0"}
    try:
        request = msgspec.json.decode(msgspec.json.encode(probe), type=RemoteStartRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(f"start: {exc}") from exc
    if not request.agent_type:
        raise _invalid("start: agentType is required")
    return {key: value for key, value in body.items() if key != "owner"}


def _checked_turn(body: dict[str, Any]) -> RemoteMessageRequest:
    if "messageId" in body:
        raise _invalid("a schedule's turn has no messageId: each tick's is cron.ID.TICK")
    try:
        request = msgspec.json.decode(msgspec.json.encode(body), type=RemoteMessageRequest)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise _invalid(f"turn: {exc}") from exc
    checked_session_id(request.session_id)
    checked_messages(request.message)  # not blank, as POST /message checks it
    return request


class Schedules:
    """The schedules of one store: create, list, pause, resume, delete (the Python API).

    Args:
        store: where the schedules log lives (the sessions' store).
        agent_types: the agent types a schedule may start (a list, or an async
            callable for a fleet); None: any (the start is checked when it fires).
        engine: a durable engine's scheduler that fires the ticks (Temporal's,
            DBOS's); None: a :class:`~helix_agents.schedules.Scheduler` does.

    Every method raises :class:`~helix_agents.errors.AgentServerError`:
    ``INVALID_REQUEST`` (a bad definition; nothing stored), ``NOT_FOUND``
    (no such schedule), ``ALREADY_RUNNING`` (an id taken by another schedule).
    """

    def __init__(
        self,
        store: EventStore,
        agent_types: Iterable[str] | AgentTypes | None = None,
        engine: ScheduleEngine | None = None,
    ) -> None:
        self.store = store
        self._agent_types = agent_types
        self.engine = engine
        self.book = ScheduleBook()

    async def refresh(self) -> ScheduleBook:
        """The book, caught up with the log (one read of what is new)."""
        for event in await self.store.read(SCHEDULES_LOG, self.book.head):
            self.book.apply(event)
        return self.book

    async def append(self, decide: Callable[[ScheduleBook], Event | None]) -> Event | None:
        """Append what ``decide`` makes of the book at its head; again on a conflict.

        ``decide`` returns the event to append (unstamped) or None for nothing;
        it is called on the book as it stands before each try.
        """
        for _ in range(_MAX_TRIES):
            book = await self.refresh()
            event = decide(book)
            if event is None:
                return None
            [stamped] = stamp(SCHEDULES_LOG, book.head, [event])
            try:
                await self.store.append(SCHEDULES_LOG, [stamped], book.head)
            except ConcurrencyConflict:
                continue
            book.apply(stamped)
            return stamped
        raise AgentServerError("UNAVAILABLE", "the schedules log is too busy: try again")

    async def _check_agent_type(self, agent_type: str) -> None:
        known = self._agent_types
        if known is None:
            return
        names = set(await known()) if callable(known) else set(known)
        if agent_type not in names:
            raise _invalid(f"unknown agent type {agent_type!r} (known: {', '.join(sorted(names))})")

    async def create(self, request: ScheduleRequest, *, owner: Principal | None = None) -> Schedule:
        """Make a schedule (checked whole first: a bad one stores nothing)."""
        now = time.time()
        schedule_id = request.id if request.id is not None else f"c{uuid.uuid4().hex[:16]}"
        if _ID.fullmatch(schedule_id) is None:
            raise _invalid("a schedule id is 1-64 characters from A-Z a-z 0-9 _ -")
        timing = checked_timing(request.cron, request.timezone, request.interval_seconds)
        if self.engine is not None:
            self.engine.check(timing)
        if (request.start is None) == (request.turn is None):
            raise _invalid("a schedule has exactly one of start (a new session) and turn")
        start = turn = None
        if request.start is not None:
            start = _checked_start(request.start)
            await self._check_agent_type(str(start["agentType"]))
        else:
            assert request.turn is not None
            message = _checked_turn(request.turn)
            found, _ = await read_page(self.store, message.session_id, 0, 1)
            if not found:
                raise AgentServerError("NOT_FOUND", f"session not found: {message.session_id}")
            turn = dict(request.turn)
        created = ScheduleCreated(
            schedule_id=schedule_id,
            cron=None if request.cron is None else " ".join(request.cron.split()),
            timezone=request.timezone or "UTC",
            interval_seconds=timing.interval,
            catchup=request.catchup,
            start=start,
            turn=turn,
            created_at=float(int(now)),
            owner=owner,
        )

        def decide(book: ScheduleBook) -> Event | None:
            if not book.taken(schedule_id):
                return created
            same = book.live.get(schedule_id)
            if same is not None and _same_definition(same.created, created):
                return None  # an identical repeat: the schedule it made
            raise AgentServerError("ALREADY_RUNNING", f"schedule id {schedule_id!r} is taken")

        await self.append(decide)
        entry = self.book.live[schedule_id]
        if self.engine is not None:
            await self.engine.ensure(entry)
        return entry.view()

    async def list(
        self, owner_tenant: str | msgspec.UnsetType | None = msgspec.UNSET
    ) -> list[Schedule]:
        """The live schedules, by id; with ``owner_tenant``, only that tenant's."""
        book = await self.refresh()
        return [
            entry.view()
            for _, entry in sorted(book.live.items())
            if owner_tenant is msgspec.UNSET
            or (entry.created.owner is not None and entry.created.owner.tenant == owner_tenant)
        ]

    async def entry(self, schedule_id: str) -> ScheduleEntry:
        """The live schedule ``schedule_id``; ``NOT_FOUND`` if there is none."""
        entry = (await self.refresh()).live.get(schedule_id)
        if entry is None:
            raise AgentServerError("NOT_FOUND", f"schedule not found: {schedule_id[:80]}")
        return entry

    async def get(self, schedule_id: str) -> Schedule:
        """Schedule ``schedule_id``."""
        return (await self.entry(schedule_id)).view()

    async def _change(
        self, schedule_id: str, make: Callable[[ScheduleEntry], Event | None]
    ) -> None:
        def decide(book: ScheduleBook) -> Event | None:
            entry = book.live.get(schedule_id)
            if entry is None:
                raise AgentServerError("NOT_FOUND", f"schedule not found: {schedule_id[:80]}")
            return make(entry)

        await self.append(decide)

    async def pause(self, schedule_id: str) -> Schedule:
        """Stop firing until resumed (pausing a paused schedule changes nothing)."""
        now = time.time()
        await self._change(
            schedule_id,
            lambda e: None if e.paused else SchedulePaused(schedule_id=schedule_id, at=now),
        )
        if self.engine is not None:
            await self.engine.pause(schedule_id)
        return await self.get(schedule_id)

    async def resume(self, schedule_id: str) -> Schedule:
        """Fire again from now: the ticks that fell while paused are not run."""
        now = time.time()
        await self._change(
            schedule_id,
            lambda e: ScheduleResumed(schedule_id=schedule_id, at=now) if e.paused else None,
        )
        if self.engine is not None:
            await self.engine.resume(schedule_id)
        return await self.get(schedule_id)

    async def delete(self, schedule_id: str) -> None:
        """Delete the schedule: it fires no more (the runs it started stay)."""
        now = time.time()
        await self._change(schedule_id, lambda e: ScheduleDeleted(schedule_id=schedule_id, at=now))
        if self.engine is not None:
            await self.engine.delete(schedule_id)

    async def sync_engine(self) -> None:
        """Make the engine's schedules what the log says (after a change the engine missed)."""
        if self.engine is None:
            return
        book = await self.refresh()
        for entry in list(book.live.values()):
            await self.engine.ensure(entry)
        for schedule_id in sorted(book.gone):
            await self.engine.delete(schedule_id)


def _same_definition(a: ScheduleCreated, b: ScheduleCreated) -> bool:
    keep = ("cron", "timezone", "interval_seconds", "catchup", "start", "turn", "owner")
    return all(getattr(a, name) == getattr(b, name) for name in keep)
