"""Launching a session's run on DBOS, and the protocol's service over it.

Which workflow runs a run is read from the session's log, not from DBOS's
state, so a launch never races a workflow that is about to wait: the first
run of a session, and every run after an ending (a follow-up turn after
``completed``, a resume after ``interrupted``), is a new workflow
``{session}#{seq}`` (its ``run_started``); a run that follows a pause (an
answer came in) is the paused workflow's next run, sent to it as a
``resume`` message (DBOS messages are durable: one sent before the workflow
waits is there when it does). If that workflow has ended meanwhile (its
``paused_wait`` spent), the run is a new workflow.

:class:`DbosLauncher` is the executor's launcher; inside a durable step that
opens a local child, the launch is handed to the parent's workflow instead (a
child workflow). :class:`DbosService` is the executor's service with
``is_executing`` from DBOS, joins a run in progress as Temporal's does
(:class:`~helix_agents.durable.DurableService`), and wakes a paused
workflow that was stopped so it ends.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from dbos import DBOS, SetWorkflowID

from helix_agents.agents.config import AgentConfig
from helix_agents.durable import DurableService, RunInput, deferred_launch
from helix_agents.events import (
    Aborted,
    Completed,
    Event,
    Failed,
    Interrupted,
    RunStarted,
    Suspended,
)

__all__ = [
    "DbosLauncher",
    "DbosService",
    "child_route",
    "launch_run",
    "open_runs",
    "run_route",
    "workflow_id",
]

log = logging.getLogger("helix_agents.dbos")

_OPEN = ["PENDING", "ENQUEUED"]
_ENDINGS = (Completed, Failed, Interrupted, Aborted)


def workflow_id(session_id: str, seq: int) -> str:
    """The workflow id of the run of ``session_id`` whose ``run_started`` is at ``seq``."""
    return f"{session_id}#{seq}"


def run_route(log_: Sequence[Event]) -> tuple[str, bool]:
    """The workflow of the log's last run, and whether it is a paused workflow's next run.

    Read from the log alone (see the module doc).
    """
    session_id = log_[0].session_id
    current, paused, follows = "", False, False
    for event in log_:
        if isinstance(event, RunStarted):
            follows = bool(current) and paused
            if not follows:
                current = workflow_id(session_id, event.seq)
            paused = False
        elif isinstance(event, Suspended):
            paused = True
        elif isinstance(event, _ENDINGS):
            paused = False
    return current, follows


async def open_runs(session_id: str) -> list[str]:
    """Ids of the session's workflows not ended yet (running, queued or paused)."""
    from helix_agents.dbos.workflow import WORKFLOW_NAME

    found = await DBOS.list_workflows_async(
        workflow_id_prefix=f"{session_id}#",
        status=_OPEN,
        name=WORKFLOW_NAME,
        load_input=False,
        load_output=False,
    )
    return [wf.workflow_id for wf in found if wf.workflow_id.rpartition("#")[0] == session_id]


async def _is_open(wf_id: str) -> bool:
    status = await DBOS.get_workflow_status_async(wf_id)
    return status is not None and status.status in _OPEN


async def child_route(session_id: str, seq: int) -> str | None:
    """The paused workflow a child's run at ``seq`` goes to (None: a new workflow)."""
    from helix_agents.dbos.host import current_host

    log_ = await current_host().steps.kit.executor.store.read(session_id, 0)
    log_ = [event for event in log_ if event.seq <= seq]
    wf_id, follows = run_route(log_)
    return wf_id if follows and await _is_open(wf_id) else None


async def launch_run(log_: Sequence[Event], queue: str) -> None:
    """Launch the run whose ``run_started`` ends ``log_`` (outside any workflow)."""
    from helix_agents.dbos.workflow import RESUME_TOPIC, agent_run

    session_id, seq = log_[0].session_id, log_[-1].seq
    wf_id, follows = run_route(log_)
    if follows and await _is_open(wf_id):
        await DBOS.send_async(wf_id, seq, RESUME_TOPIC)
        if await _is_open(wf_id):
            return
        log.info("workflow %s ended as its resume came: run %d is a new one", wf_id, seq)
    with SetWorkflowID(workflow_id(session_id, seq)):
        await DBOS.enqueue_workflow_async(queue, agent_run, RunInput(session_id, seq))


class DbosLauncher:
    """Launches a run as a DBOS workflow on ``queue`` (see the module doc)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    async def __call__(self, agent: AgentConfig, log_: Sequence[Event], run_id: str) -> None:
        """Launch the run whose ``run_started`` ends ``log_``."""
        session_id, seq = log_[0].session_id, log_[-1].seq
        if deferred_launch(session_id, seq, run_id):
            return
        await launch_run(log_, self.queue)


class DbosService(DurableService):
    """The protocol's service with runs on DBOS (see the module doc)."""

    async def run_open(self, session_id: str) -> bool:
        """Whether a workflow of the session is open (running, queued or paused)."""
        return bool(await open_runs(session_id))

    async def signal_stop(self, session_id: str, kind: str, reason: str | None) -> None:
        """A running workflow hears the stop in its log; a paused one is woken to end."""
        from helix_agents.dbos.workflow import RESUME_TOPIC

        log_ = await self._runs.store.read(session_id)
        if not log_:
            return
        wf_id, _ = run_route(log_)
        if wf_id and await _is_open(wf_id):
            await DBOS.send_async(wf_id, log_[-1].seq, RESUME_TOPIC)
