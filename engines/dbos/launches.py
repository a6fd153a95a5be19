"""Launching a session's run on DBOS, and the protocol's service over it.

:class:`DbosLauncher` is the executor's launcher: a run of session ``S``
whose ``run_started`` is at seq ``N`` wakes ``S``'s paused workflow (a
``resume`` message) if one waits, else enqueues workflow ``S#N`` on the
worker queue (idempotent: DBOS runs one workflow per id). Inside a durable
step that opens a local child, the launch is handed to the parent's workflow
instead (a child workflow). :class:`DbosService` is the executor's service
with ``is_executing`` from DBOS, and a stop that also wakes a paused
workflow so it ends (a running one hears the stop request in the log).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from dbos import DBOS, SetWorkflowID

from helix_agents.agents.config import AgentConfig
from helix_agents.durable import RunInput, deferred_launch
from helix_agents.events import Event
from helix_agents.protocol import RemoteStatusResponse
from helix_agents.runtime.service import ExecutorService

__all__ = ["DbosLauncher", "DbosService", "open_runs", "paused_run"]

log = logging.getLogger("helix_agents.dbos")

_OPEN = ["PENDING", "ENQUEUED"]


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


async def paused_run(session_id: str, seq: int) -> str | None:
    """The id of the session's workflow waiting for a resume from before ``seq``, if one waits."""
    from helix_agents.dbos.workflow import PAUSED_EVENT

    for wf_id in await open_runs(session_id):
        paused = await DBOS.get_event_async(wf_id, PAUSED_EVENT, timeout_seconds=0)
        if isinstance(paused, int) and 0 < paused < seq:
            return wf_id
    return None


class DbosLauncher:
    """Launches a run as a DBOS workflow on ``queue`` (see the module doc)."""

    def __init__(self, queue: str) -> None:
        self.queue = queue

    async def __call__(self, agent: AgentConfig, log_: Sequence[Event], run_id: str) -> None:
        """Launch the run whose ``run_started`` ends ``log_``."""
        from helix_agents.dbos.workflow import RESUME_TOPIC, agent_run, workflow_id

        session_id, seq = log_[0].session_id, log_[-1].seq
        if deferred_launch(session_id, seq, run_id):
            return
        waiting = await paused_run(session_id, seq)
        if waiting is not None:
            await DBOS.send_async(waiting, seq, RESUME_TOPIC)
            return
        with SetWorkflowID(workflow_id(session_id, seq)):
            await DBOS.enqueue_workflow_async(self.queue, agent_run, RunInput(session_id, seq))


class DbosService(ExecutorService):
    """The protocol's service with runs on DBOS (see the module doc)."""

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The status from the log; ``is_executing``: a workflow of the session is open."""
        status = await super().get_status(session_id)
        executing = status.status == "running" and bool(await open_runs(session_id))
        return msgspec.structs.replace(status, is_executing=executing)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Record the interrupt in the log; wake the session's paused workflow, if one waits."""
        await super().interrupt(session_id, reason)
        await self._wake(session_id)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Record the abort in the log; wake the session's paused workflow, if one waits."""
        await super().abort(session_id, reason)
        await self._wake(session_id)

    async def _wake(self, session_id: str) -> None:
        from helix_agents.dbos.workflow import RESUME_TOPIC

        state = await self._runs.state(session_id)
        waiting = await paused_run(session_id, state.last_seq + 1)
        if waiting is not None:
            await DBOS.send_async(waiting, state.last_seq, RESUME_TOPIC)
