"""``agent_run``: one run of a session as a DBOS workflow (``specs/dbos.md``).

A driver: what the run does next is each step's plan (``plan.next``, which
``next_action`` decides); the workflow carries it out. Deterministic: it
acts only on its input, its messages and its steps' recorded results. Its workflow id is
``{session id}#{seq}`` (the seq of the run's ``run_started``), so a launch
is idempotent; a local sub-agent's run is a child workflow with its child
session's id of the same form.

An agent step is one DBOS step, ``helix_turn`` (``DurableSteps.turn``): the
model step, and the round of tool calls it opened when they share one local
policy, run and closed (its first attempt; the run's first ``helix_turn``
also begins the run). Such a round whose first attempt failed has the rest
of its attempts in a step of its own (``helix_tool_round``). Any other
round's calls run at once, in two gathers whose steps each take their DBOS
step id when they start (so a recovered workflow replays them in the same
order): the local children are opened and launched first, then every call's
long step (a tool, a child followed, a remote call, a companion) runs
together.

A paused run waits for a ``resume`` message (``DBOS.recv``: durable, no
worker slot held while it waits; bounded by an open entry's ``expires_at``,
then the ``helix_expire`` step); which workflow a run goes to is read from
the log (``routes.py``). How steps are called: ``stepping.py``; the jobs
and the companion waits: ``jobs.py``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from functools import partial

from dbos import DBOS, SetWorkflowID

from helix_agents.engines.dbos.jobs import child_open, run_job, tool_round, wake_waiters
from helix_agents.engines.dbos.routes import (
    RESUME_TOPIC,
    WORKFLOW_NAME,
    child_route,
    workflow_id,
)
from helix_agents.engines.dbos.stephost import current_host
from helix_agents.engines.dbos.stepping import call_step, spent
from helix_agents.engines.durable.plan import (
    ChildOpened,
    JobDone,
    Plan,
    Round,
    RunInput,
    StepInput,
    StopInput,
    ToolRound,
    round_end,
    shared_policy,
)

__all__ = ["agent_run"]


@DBOS.workflow(name=WORKFLOW_NAME)
async def agent_run(run: RunInput) -> str:
    """Run session ``run.session_id`` from seq ``run.seq`` until it ends or pauses too long."""
    host = current_host()
    seq = run.seq
    while True:
        plan = await _drive(run.session_id, seq)
        if plan.next == "stop":
            stop = StopInput(run.session_id, plan.stop or "interrupt", plan.stop_reason)
            plan = await call_step("helix_stopped", partial(host.steps.stopped, stop))
        await wake_waiters(run.session_id)
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
        expired: Plan = await call_step("helix_expire", partial(steps.expire, step))
        expires_at = expired.expires_at


async def _drive(sid: str, seq: int) -> Plan:
    steps = current_host().steps
    plan = Plan(sid, seq, "running", next="step")
    trace: dict[str, str] = {}
    begin = True  # the run's first step begins it (``on_agent_start``, its span)
    while plan.next in ("step", "round"):
        at = plan.seq
        try:
            if plan.next == "round":
                plan = await _round(plan, trace)
            else:
                step = StepInput(sid, at, trace=trace)
                turn = partial(steps.turn, step, begin=begin)
                plan = await call_step("helix_turn", turn)
                trace, begin = plan.trace, False
        except Exception as exc:
            if not spent(exc):
                raise
            # A step whose retries are spent: the run fails, recorded in the log.
            failed, error = StepInput(sid, at), str(exc)
            plan = await call_step("helix_run_failed", partial(steps.run_failed, failed, error))
    return plan


async def _round(plan: Plan, trace: dict[str, str]) -> Plan:
    host = current_host()
    steps = host.steps
    sid = plan.session_id
    opened: Round | None = plan.round
    if opened is None:
        opened = await call_step(
            "helix_round_open", lambda: steps.round_open(StepInput(sid, plan.seq, trace=trace))
        )
    policy = shared_policy(opened)
    if policy is not None:  # tool calls only: one step runs and closes the round
        return await tool_round(ToolRound(sid, opened, trace), policy, plan.tried)
    children = [job for job in opened.jobs if job.kind == "child"]
    # Each coroutine below takes its step id as it starts: gathered, in a fixed order.
    child_opens: list[ChildOpened] = list(
        await asyncio.gather(  # noqa: TID251 (DBOS's workflow loop: its own concurrency)
            *(child_open(StepInput(sid, opened.seq, job.call_id, trace)) for job in children)
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
            *(run_job(StepInput(sid, seq, job.call_id, trace), job) for job in long_jobs)
        )
    )
    end = round_end(sid, dataclasses.replace(opened, seq=seq), done)
    closed: Plan = await call_step("helix_round_close", lambda: steps.round_close(end))
    return closed


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
