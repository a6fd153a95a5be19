"""``agent_run``: one run of a session as a DBOS workflow (``specs/dbos.md``).

A driver: what the run does next is each step's plan (``plan.next``, which
``next_action`` decides); the workflow carries it out. Deterministic: it
acts only on its input, its messages and its steps' recorded results. Its workflow id is
``{session id}#{seq}`` (the seq of the run's ``run_started``), so a launch
is idempotent; a local sub-agent's run is a child workflow with its child
session's id of the same form. Every step is :func:`DBOS.run_step_async`
over a :class:`~helix_agents.engines.durable.DurableSteps` step, whose work runs on
the worker's own event loop (:class:`~helix_agents.engines.dbos.host.StepHost`).

A round's calls run at once, in two gathers whose steps each take their
DBOS step id when they start (so a recovered workflow replays them in the
same order): the local children are opened and launched first, then every
call's long step (a tool, a child followed, a remote call, a companion) runs
together.

A paused run waits for a ``resume`` message (``DBOS.recv``: durable, no
worker slot held while it waits; bounded by an open entry's ``expires_at``,
then the ``helix_expire`` step); which workflow a run goes to is read from
the log (``launches.py``). A ``companion__waitForResult`` call waits the same
way, between two looks (``helix_wait_begin``, ``helix_wait_look``): a
``DBOS.recv`` on its child's topic, whose timeout is the call's deadline
(checkpointed by the first look; DBOS's recorded sleep keeps it across a
crash). A companion's run wakes the calls waiting on it when it ends or
pauses (step ``helix_wait_waiters``, then a message each).
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import TypeVar

from dbos import DBOS, SetWorkflowID, StepOptions
from dbos._error import DBOSException, DBOSMaxStepRetriesExceeded, DBOSStepTimeoutError

from helix_agents.companions.tools import WAIT_FOR_RESULT
from helix_agents.engines.dbos.routes import (
    RESUME_TOPIC,
    WORKFLOW_NAME,
    child_route,
    wait_topic,
    waiters,
    workflow_id,
)
from helix_agents.engines.dbos.stephost import current_host
from helix_agents.engines.durable.plan import (
    CallJob,
    ChildOpened,
    JobDone,
    Plan,
    Round,
    RunInput,
    StepInput,
    StopInput,
    round_end,
)
from helix_agents.engines.durable.reading import StepFailed
from helix_agents.engines.durable.waits import WaitLook
from helix_agents.errors import OwnershipLost, RemoteAgentFailedError

__all__ = ["agent_run"]

T = TypeVar("T")


def _spent(error: Exception) -> bool:
    """Whether ``error`` is a step that failed for good (not DBOS's own trouble, which propagates).

    A step's own error (non-retryable), its retries spent, or its timeout.
    """
    if isinstance(error, DBOSMaxStepRetriesExceeded | DBOSStepTimeoutError):
        return True
    return not isinstance(error, DBOSException)


def _retryable(error: BaseException) -> bool:
    return not isinstance(error, StepFailed | OwnershipLost | RemoteAgentFailedError)


_STEP: StepOptions = {
    "retries_allowed": True,
    "max_attempts": 20,
    "interval_seconds": 0.2,
    "backoff_rate": 2.0,
    "should_retry": _retryable,
}


async def _step(name: str, work: Callable[[], Awaitable[T]], options: StepOptions = _STEP) -> T:
    host = current_host()

    async def run() -> T:
        return await host.call(work)

    result: T = await DBOS.run_step_async({**options, "name": name}, run)
    return result


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_run(run: RunInput) -> str:
    """Run session ``run.session_id`` from seq ``run.seq`` until it ends or pauses too long."""
    host = current_host()
    seq = run.seq
    while True:
        plan = await _drive(run.session_id, seq)
        if plan.next == "stop":
            stop = StopInput(run.session_id, plan.stop or "interrupt", plan.stop_reason)
            plan = await _step("helix_stopped", partial(host.steps.stopped, stop))
        await _wake_waiters(run.session_id)
        if plan.next != "pause":
            return plan.status
        woken = await _paused(plan, host.options.paused_wait)
        if woken is None:
            return "paused"  # a later answer starts a new run of the session
        seq = max(int(woken), plan.seq)


async def _paused(plan: Plan, paused_wait: float) -> int | None:
    """The seq a ``resume`` message brought; None when ``paused_wait`` passed first.

    An open entry with ``expires_in`` bounds the wait at its ``expires_at``
    (recv's timeout is durable: its end time is recorded, so a recovered
    workflow waits for the same instant; the run waits for it even past
    ``paused_wait``): the ``expire`` step answers it, and its resume message
    wakes the run.
    """
    steps = current_host().steps
    expires_at = plan.expires_at
    while True:
        wait = paused_wait if expires_at is None else max(0.0, expires_at - time.time())
        woken = await DBOS.recv_async(RESUME_TOPIC, timeout_seconds=wait)
        if woken is not None or expires_at is None:
            return None if woken is None else int(woken)
        step = StepInput(plan.session_id, plan.seq)
        expired: Plan = await _step("helix_expire", partial(steps.expire, step))
        expires_at = expired.expires_at


async def _drive(sid: str, seq: int) -> Plan:
    steps = current_host().steps
    plan: Plan = await _step("helix_begin", lambda: steps.begin(StepInput(sid, seq)))
    trace = plan.trace  # the run's span: its steps' spans are its children
    while plan.next in ("step", "round"):
        at = plan.seq
        try:
            if plan.next == "round":
                plan = await _round(plan, trace)
            else:
                step = StepInput(sid, at, trace=trace)
                plan = await _step("helix_model_step", partial(steps.model_step, step))
        except Exception as exc:
            if not _spent(exc):
                raise
            # A step whose retries are spent: the run fails, recorded in the log.
            failed, error = StepInput(sid, at), str(exc)
            plan = await _step("helix_run_failed", partial(steps.run_failed, failed, error))
    return plan


async def _round(plan: Plan, trace: dict[str, str]) -> Plan:
    host = current_host()
    steps = host.steps
    sid = plan.session_id
    opened: Round = await _step(
        "helix_round_open", lambda: steps.round_open(StepInput(sid, plan.seq, trace=trace))
    )
    children = [job for job in opened.jobs if job.kind == "child"]
    # Each coroutine below takes its step id as it starts: gathered, in a fixed order.
    child_opens: list[ChildOpened] = list(
        await asyncio.gather(  # noqa: TID251 (DBOS's workflow loop: its own concurrency)
            *(_child_open(StepInput(sid, opened.seq, job.call_id, trace)) for job in children)
        )
    )
    for child in child_opens:
        if child.open and child.launch_seq is not None:
            await _launch_child(child.child_session_id, child.launch_seq)
    seq = max([opened.seq, *(child.seq for child in child_opens)])
    followed = {job.call_id for job, child in zip(children, child_opens, strict=True) if child.open}
    long_jobs = [job for job in opened.jobs if job.kind != "child" or job.call_id in followed]
    done: list[JobDone] = list(
        await asyncio.gather(  # noqa: TID251
            *(_job(StepInput(sid, seq, job.call_id, trace), job) for job in long_jobs)
        )
    )
    end = round_end(sid, dataclasses.replace(opened, seq=seq), done)
    closed: Plan = await _step("helix_round_close", lambda: steps.round_close(end))
    return closed


async def _child_open(step: StepInput) -> ChildOpened:
    steps = current_host().steps
    opened: ChildOpened = await _step("helix_child_open", lambda: steps.calls.child_open(step))
    return opened


async def _launch_child(child: str, seq: int) -> None:
    """Start the child's run as a child workflow, or send it to its paused workflow."""
    host = current_host()

    async def route() -> str | None:
        return await host.call(lambda: child_route(child, seq))

    waiting = await DBOS.run_step_async({"name": "helix_child_route"}, route)
    if waiting is not None:
        await DBOS.send_async(waiting, seq, RESUME_TOPIC)
        return
    with SetWorkflowID(workflow_id(child, seq)):
        # Started here (a child workflow on this worker, no queue round trip): a
        # dead worker's children are taken over with it.
        await DBOS.start_workflow_async(agent_run, RunInput(child, seq))


async def _job(step: StepInput, job: CallJob) -> JobDone:
    calls = current_host().steps.calls
    if job.kind == "tool":
        policy = job.policy
        options: StepOptions = {
            "retries_allowed": policy.max_attempts > 1,
            "max_attempts": max(1, policy.max_attempts),
            "interval_seconds": policy.initial_interval,
            "backoff_rate": policy.backoff,
            "should_retry": _retryable,
            "timeout_seconds": policy.timeout or 600.0,
        }
        try:
            return await _step("helix_tool_call", lambda: calls.tool_call(step), options)
        except Exception as exc:
            if not _spent(exc):
                raise
            # Its attempts are spent: an error result the model reads.
            error = f"tool failed: {exc}"
            return await _step("helix_tool_failed", lambda: calls.tool_failed(step, error))
    if job.kind == "companion" and job.name == WAIT_FOR_RESULT:
        return await _wait_for_result(step)
    # The step names as the system database (and specs/dbos.md) show them.
    work: dict[str, tuple[str, Callable[[], Awaitable[JobDone]]]] = {
        "child": ("helix_child", lambda: calls.child_follow(step)),
        "remote": ("helix_remote", lambda: calls.remote_child(step)),
        "companion": ("helix_companion", lambda: calls.companion_call(step)),
    }
    name, run = work[job.kind]
    return await _step(name, run)


async def _wait_for_result(step: StepInput) -> JobDone:
    """``companion__waitForResult``: looks, and between them a durable sleep until a notice.

    The sleep is ``DBOS.recv`` on the child's topic: it ends when the child's
    run ends or pauses (its workflow sends the notice) or at the call's
    deadline, which DBOS keeps across a crash (the recorded sleep, and the
    deadline the first look checkpointed). A remote child sends no notice: its
    look follows its stream (``helix_agents.engines.durable.waits``).
    """
    host = current_host()
    waits = host.steps.waits
    look: WaitLook = await _step("helix_wait_begin", lambda: waits.begin(step))
    while look.waiting:
        deadline = look.deadline
        if not look.remote:
            left = host.options.paused_wait if deadline is None else deadline - time.time()
            await DBOS.recv_async(wait_topic(look.child), timeout_seconds=max(0.0, left))
        look = await _step("helix_wait_look", partial(waits.look, step, deadline))
    return look.done


_COMPANION_MARK = "-agent-"
"""In every companion's session id (``{parent}-agent-{name}``): only those runs look for waiters."""


async def _wake_waiters(session_id: str) -> None:
    """A run ended or paused: wake its parent's ``waitForResult`` calls waiting on it."""
    if _COMPANION_MARK not in session_id:
        return
    host = current_host()

    async def look() -> tuple[str, int] | None:
        return await host.call(lambda: waiters(session_id))

    found = await DBOS.run_step_async({"name": "helix_wait_waiters"}, look)
    if found is None:
        return
    parent_workflow, count = found
    for _ in range(count):
        await DBOS.send_async(parent_workflow, session_id, wait_topic(session_id))
