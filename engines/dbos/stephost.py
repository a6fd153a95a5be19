"""``StepHost``: the durable steps, run on the worker's event loop for DBOS's workflows.

DBOS runs a dequeued or recovered workflow on its own event loop (a thread):
its steps' work is handed to the worker's event loop, where its executor,
store and models live, through an anyio blocking portal. A workflow started
on the worker's loop (a run started at once) runs its steps' work there. One
worker (one DBOS) per process: :func:`current_host` is it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Awaitable, Callable
from typing import TypeVar

from anyio.from_thread import BlockingPortal

from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.durable.steps import DurableSteps
from helix_agents.errors import UsageError

__all__ = ["StepHost", "current_host", "hosting", "unhost"]

T = TypeVar("T")


class StepHost:
    """What the workflows' steps run on: the durable steps, on the worker's loop."""

    def __init__(self, steps: DurableSteps, options: DbosOptions, portal: BlockingPortal) -> None:
        self.steps = steps
        self.options = options
        self._portal = portal
        self._loop = asyncio.get_running_loop()

    async def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` on the worker's loop; cancelling the caller cancels it.

        A workflow started here runs on the worker's loop (a run started at once:
        ``launch_run``'s ``direct``), so its steps' work runs there too, as a task
        of its own; a dequeued or recovered one runs on DBOS's own loop, and its
        steps' work crosses to the worker's. Either way the work runs in a fresh
        context: the workflow's DBOS context must not leak into it (a run it
        launches is a workflow of its own, not a step of this one).
        """

        async def run() -> T:
            return await work()

        if asyncio.get_running_loop() is self._loop:
            # Awaited, the task is cancelled with its awaiter.
            return await self._loop.create_task(run(), context=contextvars.Context())
        future: concurrent.futures.Future[T] = contextvars.Context().run(
            self._portal.start_task_soon, run
        )
        return await asyncio.wrap_future(future)


_HOST: list[StepHost] = []


def current_host() -> StepHost:
    """The host of this process's running worker (``UsageError`` if none runs)."""
    if not _HOST:
        raise UsageError("no DbosWorker runs in this process")
    return _HOST[0]


def hosting(host: StepHost) -> None:
    """Make ``host`` this process's (``UsageError`` if one is already)."""
    if _HOST:
        raise UsageError("a DbosWorker already runs in this process (DBOS is one per process)")
    _HOST.append(host)


def unhost() -> None:
    """This process has no host any more."""
    _HOST.clear()
