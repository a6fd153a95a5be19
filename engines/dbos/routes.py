"""Which workflow a session's run goes to, read from the session's log; DBOS's view of them.

The first run of a session, and every run after an ending (a follow-up turn
after ``completed``, a resume after ``interrupted``), is a new workflow
``{session}#{seq}`` (the seq of its ``run_started``); a run that follows a
pause (an answer came in) is the paused workflow's next run, sent to it as a
``resume`` message. Read from the log, never from DBOS's state, so a launch
does not race a workflow about to wait (DBOS messages are durable: one sent
before the workflow waits is there when it does).
"""

from __future__ import annotations

from collections.abc import Sequence

from dbos import DBOS

from helix_agents.engines.dbos.stephost import current_host
from helix_agents.engines.durable.waits import waits_on
from helix_agents.events import (
    Aborted,
    Completed,
    Event,
    Failed,
    Interrupted,
    RunStarted,
    Suspended,
)
from helix_agents.log import project_state
from helix_agents.log.state import SessionState

__all__ = [
    "RESUME_TOPIC",
    "wait_notices",
    "wait_topic",
    "waiters",
    "WORKFLOW_NAME",
    "child_route",
    "is_open",
    "open_runs",
    "run_route",
    "workflow_id",
]

WORKFLOW_NAME = "helix_agent_run"
RESUME_TOPIC = "resume"
_OPEN = ["PENDING", "ENQUEUED"]
_ENDINGS = (Completed, Failed, Interrupted, Aborted)


def wait_topic(child: str) -> str:
    """The topic a ``waitForResult`` on child session ``child`` sleeps on (its notices)."""
    return f"helix_wait:{child}"


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
    found = await DBOS.list_workflows_async(
        workflow_id_prefix=f"{session_id}#",
        status=_OPEN,
        name=WORKFLOW_NAME,
        load_input=False,
        load_output=False,
    )
    return [wf.workflow_id for wf in found if wf.workflow_id.rpartition("#")[0] == session_id]


async def is_open(wf_id: str) -> bool:
    status = await DBOS.get_workflow_status_async(wf_id)
    return status is not None and status.status in _OPEN


async def child_route(session_id: str, seq: int) -> str | None:
    """The paused workflow a child's run at ``seq`` goes to (None: a new workflow)."""
    log_ = await current_host().steps.kit.executor.store.read(session_id, 0)
    log_ = [event for event in log_ if event.seq <= seq]
    wf_id, follows = run_route(log_)
    return wf_id if follows and await is_open(wf_id) else None


def wait_notices(state: SessionState, log_: Sequence[Event]) -> list[tuple[str, str]]:
    """The notices that wake the ``waitForResult`` calls of ``state`` (a session's log ``log_``).

    ``(topic, workflow id)`` once per waiting call: sent when a stop ends the
    waits (a wait sleeping in the workflow hears no log).
    """
    wf_id, _ = run_route(log_)
    notices: list[tuple[str, str]] = []
    for ref in state.sub_sessions.values():
        notices.extend(
            [(wait_topic(ref.sub_session_id), wf_id)] * waits_on(state, ref.sub_session_id)
        )
    return notices


async def waiters(child: str) -> tuple[str, int] | None:
    """Whom child session ``child``'s end wakes: its parent's workflow, and how many calls wait.

    None when no ``waitForResult`` of its parent waits on it (nothing to send).
    """
    store = current_host().steps.kit.executor.store
    child_log = await store.read(child, 0)
    parent = project_state(child_log).parent_session_id if child_log else None
    if parent is None:
        return None
    parent_log = await store.read(parent, 0)
    if not parent_log:
        return None
    count = waits_on(project_state(parent_log), child)
    if not count:
        return None
    wf_id, _ = run_route(parent_log)
    return wf_id, count
