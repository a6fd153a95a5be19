"""Launching a session's run on DBOS, and the protocol's service over it.

Which workflow a run goes to is read from the log (``routes.py``).
:class:`DbosLauncher` is the executor's launcher; inside a durable step that
opens a local child, the launch is handed to the parent's workflow instead (a
child workflow). :class:`DbosService` is the executor's service with
``is_executing`` from DBOS, joins a run in progress as Temporal's does
(:class:`~helix_agents.engines.durable.DurableService`), and wakes a paused
workflow that was stopped so it ends.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import Sequence

from dbos import DBOS, SetWorkflowID

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.dbos.routes import (
    RESUME_TOPIC,
    is_open,
    open_runs,
    run_route,
    wait_notices,
    workflow_id,
)
from helix_agents.engines.dbos.workflow import agent_run
from helix_agents.engines.durable.launches import deferred_launch
from helix_agents.engines.durable.plan import RunInput
from helix_agents.engines.durable.service import DurableService
from helix_agents.events import Event
from helix_agents.log import project_state

__all__ = ["DbosLauncher", "DbosService", "launch_run"]

log = logging.getLogger("helix_agents.dbos")


async def launch_run(log_: Sequence[Event], queue: str, *, direct: bool = False) -> None:
    """Launch the run whose ``run_started`` ends ``log_`` (outside any workflow).

    Enqueued on ``queue`` for any worker to take; ``direct``: started at once on
    this process's DBOS, on the caller's loop (the worker's), with no wait for
    the queue's next poll: for a SQLite system database, whose one process is
    the only worker there is.
    """
    session_id, seq = log_[0].session_id, log_[-1].seq
    wf_id, follows = run_route(log_)
    if follows and await is_open(wf_id):
        await DBOS.send_async(wf_id, seq, RESUME_TOPIC)
        if await is_open(wf_id):
            return
        log.info("workflow %s ended as its resume came: run %d is a new one", wf_id, seq)
    run = RunInput(session_id, seq)
    if direct:

        async def start() -> None:
            with SetWorkflowID(workflow_id(session_id, seq)):
                await DBOS.start_workflow_async(agent_run, run)

        # On this loop (the worker's: no hand-off between loops for its steps), in a
        # fresh context: nothing of the caller's (a step's, a span) goes with it.
        await asyncio.get_running_loop().create_task(start(), context=contextvars.Context())
        return
    with SetWorkflowID(workflow_id(session_id, seq)):
        await DBOS.enqueue_workflow_async(queue, agent_run, run)


class DbosLauncher:
    """Launches a run as a DBOS workflow on ``queue``, or at once (``direct``: SQLite)."""

    def __init__(self, queue: str, *, direct: bool = False) -> None:
        self.queue = queue
        self.direct = direct

    async def __call__(self, agent: AgentConfig, log_: Sequence[Event], run_id: str) -> None:
        """Launch the run whose ``run_started`` ends ``log_``."""
        session_id, seq = log_[0].session_id, log_[-1].seq
        if deferred_launch(session_id, seq, run_id):
            return
        await launch_run(log_, self.queue, direct=self.direct)


class DbosService(DurableService):
    """The protocol's service with runs on DBOS (see the module doc)."""

    async def run_open(self, session_id: str) -> bool:
        """Whether a workflow of the session is open (running, queued or paused)."""
        return bool(await open_runs(session_id))

    async def signal_stop(self, session_id: str, kind: str, reason: str | None) -> None:
        """A running workflow hears the stop in its log; a paused one is woken to end.

        A ``waitForResult`` sleeping in the workflow hears no log: it is woken too.
        """
        log_ = await self._runs.store.read(session_id)
        if not log_:
            return
        wf_id, _ = run_route(log_)
        if wf_id and await is_open(wf_id):
            for topic, waiting in wait_notices(project_state(log_), log_):
                await DBOS.send_async(waiting, "stop", topic)
            await DBOS.send_async(wf_id, log_[-1].seq, RESUME_TOPIC)
