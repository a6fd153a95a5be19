"""A task's A2A stream, read from its session's log: the task first, then its events.

The first event is the task as of a log position (``snapshot_at``); the
events that follow are those of the log events after ``emit_after`` (equal
to ``snapshot_at`` for a plain A2A client, so nothing is missed and nothing
repeats; lower with our extension's ``Helix-From-Sequence``, to replay from a
position the client holds). The stream closes after the task's final status,
or after it starts waiting for input (A2A's rule); leaving the loop stops
the tail.

The log is never held whole: it is folded a page at a time
(:func:`~helix_agents.log.streaming.read_page`), and a replay reads its
next page only once the client has taken the events of the one before, then
tails from there, as ``/sse`` does. A replay folds light (no text kept: see
``tasks.py``) and its first event is the task without its text (the replay
carries it), so a client that stops reading holds a page and a socket's
window of the server, whatever the session's size. A plain subscription's
first event is the whole task (A2A's rule: it costs what the task holds).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import anyio
from a2a.types import Task
from a2a.utils.errors import TaskNotFoundError

from helix_agents import EventStore
from helix_agents._aio import closing_iter
from helix_agents.log.streaming import read_page

from .tasks import SessionTasks, StreamEvent
from .wire import TERMINAL_STATES

__all__ = ["Opened", "current_snapshot", "fold", "snapshot_of", "task_events", "wait_for_end"]


@dataclass(frozen=True)
class Opened:
    """Where a task's stream begins: the snapshot's position, and the replay's."""

    session_id: str
    task_id: str
    snapshot_at: int
    emit_after: int
    extra: dict[str, Any] | None = None
    """More ``metadata.helix`` entries for the first event (an answer's ``resumed``)."""

    @property
    def replays(self) -> bool:
        """Whether the client holds less than the snapshot shows (our extension's replay)."""
        return self.emit_after < self.snapshot_at


async def fold(
    store: EventStore, session_id: str, upto: int | None = None, *, light: bool = False
) -> SessionTasks:
    """The session's tasks folded from its log up to seq ``upto`` (None: its end), a page
    at a time."""
    tasks = SessionTasks(session_id, light=light)
    seq, more = 0, True
    while more:
        page, more = await read_page(store, session_id, seq)
        for event in page:
            if upto is not None and event.seq > upto:
                return tasks
            tasks.apply(event)
        if not page:
            break
        seq = page[-1].seq
    return tasks


async def snapshot_of(store: EventStore, opened: Opened) -> Task:
    """The stream's first event: the task as of ``opened.snapshot_at`` (without its text
    when the stream replays)."""
    tasks = await fold(store, opened.session_id, opened.snapshot_at, light=opened.replays)
    task = tasks.task(opened.task_id)
    if task is None:
        raise TaskNotFoundError(f"task {opened.task_id!r} not found")
    return tasks.snapshot(task, opened.extra)


async def current_snapshot(
    store: EventStore, session_id: str, task_id: str, extra: dict[str, Any] | None = None
) -> Task:
    """The task as the log has it now (its text too)."""
    tasks = await fold(store, session_id)
    task = tasks.task(task_id)
    if task is None:
        raise TaskNotFoundError(f"task {task_id!r} not found")
    return tasks.snapshot(task, extra)


async def task_events(store: EventStore, opened: Opened) -> AsyncIterator[Task | StreamEvent]:
    """The task's stream (see the module); the first event is the task."""
    tasks = await fold(store, opened.session_id, opened.snapshot_at, light=opened.replays)
    task = tasks.task(opened.task_id)
    if task is None:
        raise TaskNotFoundError(f"task {opened.task_id!r} not found")
    yield tasks.snapshot(task, opened.extra)
    if task.ends and not opened.replays:
        return
    if opened.replays:  # the client holds less than the snapshot shows: fold again to there
        tasks = await fold(store, opened.session_id, opened.emit_after, light=True)
    cursor, more = tasks.last_seq, True
    while more:
        page, more = await read_page(store, opened.session_id, cursor)
        for event in page:
            for _, update in tasks.apply(event):
                yield update
            if _ended(tasks, opened, event.seq):
                return
        if not page:
            break
        cursor = page[-1].seq
        del page  # the next page is read once this one's events were taken
    async with closing_iter(store.tail(opened.session_id, cursor)) as tail:
        async for event in tail:
            for _, update in tasks.apply(event):
                yield update
            if _ended(tasks, opened, event.seq):
                return


def _ended(tasks: SessionTasks, opened: Opened, seq: int) -> bool:
    """True once the task ended (or waits) at or after the snapshot's position."""
    task = tasks.task(opened.task_id)
    return task is not None and seq >= opened.snapshot_at and task.ends


async def wait_for_end(store: EventStore, session_id: str, task_id: str, limit: float) -> None:
    """Wait (at most ``limit`` seconds) until the task reaches a final state."""
    tasks = await fold(store, session_id, light=True)
    task = tasks.task(task_id)
    if task is None or task.state in TERMINAL_STATES:
        return
    with anyio.move_on_after(limit):
        async with closing_iter(store.tail(session_id, tasks.last_seq)) as tail:
            async for event in tail:
                tasks.apply(event)
                if task.state in TERMINAL_STATES:
                    return
