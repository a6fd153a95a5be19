"""A task's A2A stream, read from its session's log: the task first, then its events.

The first event is the task as of a log position (``snapshot_at``); the
events that follow are those of the log events after ``emit_after`` (equal
to ``snapshot_at`` for a plain A2A client, so nothing is missed and nothing
repeats; lower with our extension's ``Helix-From-Sequence``, to replay from a
position the client holds). The log is read once and then tailed, so a
reader that was cut and subscribes again resumes without a gap. The stream
closes after the task's final status, or after it starts waiting for input
(A2A's rule); leaving the loop stops the tail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import anyio
from a2a.types import Task
from a2a.utils.errors import TaskNotFoundError

from helix_agents import EventStore
from helix_agents._aio import closing_iter
from helix_agents.events import Event

from .tasks import SessionTasks, StreamEvent
from .wire import TERMINAL_STATES

__all__ = ["Opened", "snapshot_of", "task_events", "wait_for_end"]


@dataclass(frozen=True)
class Opened:
    """Where a task's stream begins: the log read, the snapshot's position, the replay's."""

    session_id: str
    task_id: str
    log: Sequence[Event]
    snapshot_at: int
    emit_after: int
    extra: dict[str, Any] | None = None
    """More ``metadata.helix`` entries for the first event (an answer's ``resumed``)."""


def _fold(session_id: str, log: Sequence[Event], upto: int) -> SessionTasks:
    tasks = SessionTasks(session_id)
    for event in log:
        if event.seq > upto:
            break
        tasks.apply(event)
    return tasks


def snapshot_of(opened: Opened) -> Task:
    """The stream's first event: the task as of ``opened.snapshot_at``."""
    tasks = _fold(opened.session_id, opened.log, opened.snapshot_at)
    task = tasks.task(opened.task_id)
    if task is None:
        raise TaskNotFoundError(f"task {opened.task_id!r} not found")
    return tasks.snapshot(task, opened.extra)


async def task_events(store: EventStore, opened: Opened) -> AsyncIterator[Task | StreamEvent]:
    """The task's stream (see the module); the first event is the task."""
    snapshot = snapshot_of(opened)
    yield snapshot
    tasks = _fold(opened.session_id, opened.log, opened.snapshot_at)
    task = tasks.task(opened.task_id)
    assert task is not None
    if task.ends and opened.emit_after >= opened.snapshot_at:
        return
    replay = opened.emit_after < opened.snapshot_at
    if replay:  # the client holds less than the snapshot shows: fold again from the start
        tasks = _fold(opened.session_id, opened.log, opened.emit_after)
    cursor = tasks.last_seq
    for event in opened.log:
        if event.seq <= cursor:
            continue
        for _, update in tasks.apply(event):
            yield update
        if _ended(tasks, opened, event.seq):
            return
    cursor = tasks.last_seq
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
    log = await store.read(session_id)
    tasks = SessionTasks(session_id).apply_all(list(log))
    task = tasks.task(task_id)
    if task is None or task.state in TERMINAL_STATES:
        return
    with anyio.move_on_after(limit):
        async with closing_iter(store.tail(session_id, tasks.last_seq)) as tail:
            async for event in tail:
                tasks.apply(event)
                if task.state in TERMINAL_STATES:
                    return
