"""A round's jobs in :func:`~helix_agents.engines.dbos.workflow.agent_run`, and companion waits.

A tool call, a local child followed, a remote child's call and a companion
call are a step each. A ``companion__waitForResult`` call waits between two
looks (``helix_wait_begin``, ``helix_wait_look``): a ``DBOS.recv`` on its
child's topic, whose timeout is the call's deadline (checkpointed by the
first look; DBOS's recorded sleep keeps it across a crash). A companion's
run wakes the calls waiting on it when it ends or pauses
(``helix_wait_waiters``, then a message each).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from functools import partial

from dbos import DBOS

from helix_agents.companions.tools import WAIT_FOR_RESULT
from helix_agents.engines.dbos.routes import wait_topic, waiters
from helix_agents.engines.dbos.stephost import current_host
from helix_agents.engines.dbos.stepping import call_step, spent, tool_options
from helix_agents.engines.durable.plan import (
    CallJob,
    ChildOpened,
    JobDone,
    Plan,
    StepInput,
    ToolPolicy,
    ToolRound,
    round_end,
)
from helix_agents.engines.durable.waits import WaitLook

__all__ = ["child_open", "run_job", "tool_round", "wake_waiters"]


async def child_open(step: StepInput) -> ChildOpened:
    """Open a local child's call: its session, and the run of it to launch (if due)."""
    steps = current_host().steps
    opened: ChildOpened = await call_step("helix_child_open", lambda: steps.calls.child_open(step))
    return opened


async def tool_round(work: ToolRound, policy: ToolPolicy, tried: str | None = None) -> Plan:
    """A round of tool calls sharing ``policy``: run and closed in one step (its options).

    ``tried``: the error of the round's first attempt, made in the model step that
    opened it (``DurableSteps.turn``); this step then has the policy's other attempts.
    Its attempts spent, each call left without a result gets the error as its
    result (the model reads it), and the round is closed.
    """
    steps = current_host().steps
    options = tool_options(policy)
    error = f"tool failed: {tried}"
    if tried is not None:
        options["max_attempts"] = policy.max_attempts - 1
        options["retries_allowed"] = policy.max_attempts > 2  # one attempt made already
    if tried is None or policy.max_attempts > 1:
        try:
            ran: Plan = await call_step(
                "helix_tool_round", partial(steps.tool_round, work), options
            )
            return ran
        except Exception as exc:
            if not spent(exc):
                raise
            error = f"tool failed: {exc}"
    opened = work.opened
    done: list[JobDone] = []
    for job in opened.jobs:
        step = StepInput(work.session_id, opened.seq, job.call_id)
        failed = partial(steps.calls.tool_failed, step, error)
        done.append(await call_step("helix_tool_failed", failed))
    end = round_end(work.session_id, opened, done)
    closed: Plan = await call_step("helix_round_close", partial(steps.round_close, end))
    return closed


async def run_job(step: StepInput, job: CallJob) -> JobDone:
    """Run one job of a round (a local child: followed, once launched)."""
    calls = current_host().steps.calls
    if job.kind == "tool":
        policy = job.policy
        options = tool_options(policy)
        try:
            return await call_step("helix_tool_call", lambda: calls.tool_call(step), options)
        except Exception as exc:
            if not spent(exc):
                raise
            # Its attempts are spent: an error result the model reads.
            error = f"tool failed: {exc}"
            return await call_step("helix_tool_failed", lambda: calls.tool_failed(step, error))
    if job.kind == "companion" and job.name == WAIT_FOR_RESULT:
        return await _wait_for_result(step)
    # The step names as the system database (and specs/dbos.md) show them.
    work: dict[str, tuple[str, Callable[[], Awaitable[JobDone]]]] = {
        "child": ("helix_child", lambda: calls.child_follow(step)),
        "remote": ("helix_remote", lambda: calls.remote_child(step)),
        "companion": ("helix_companion", lambda: calls.companion_call(step)),
    }
    name, run = work[job.kind]
    return await call_step(name, run)


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
    look: WaitLook = await call_step("helix_wait_begin", lambda: waits.begin(step))
    while look.waiting:
        deadline = look.deadline
        if not look.remote:
            left = host.options.paused_wait if deadline is None else deadline - time.time()
            await DBOS.recv_async(wait_topic(look.child), timeout_seconds=max(0.0, left))
        look = await call_step("helix_wait_look", partial(waits.look, step, deadline))
    return look.done


_COMPANION_MARK = "-agent-"
"""In every companion's session id (``{parent}-agent-{name}``): only those runs look for waiters."""


async def wake_waiters(session_id: str) -> None:
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
