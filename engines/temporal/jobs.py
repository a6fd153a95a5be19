"""A round's jobs in :class:`~helix_agents.engines.temporal.workflow.AgentWorkflow`.

A tool call, a companion call and a remote child's call are activities; a
local child is a child workflow (id: its session id) that the parent starts,
or wakes with ``resume`` when a run of it is open, and follows with an
activity. A stop reaches every child workflow running (``cascade``).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from temporalio import workflow
from temporalio.exceptions import ActivityError, CancelledError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from helix_agents.engines.temporal.stepping import (
    REMOTE,
    TOOL_ROUNDS,
    WORKFLOW_NAME,
    WorkflowInput,
    call_step,
    cause_of,
    task_timeout,
    tool_round_step,
    tool_step,
)

with workflow.unsafe.imports_passed_through():
    from helix_agents.engines.durable.plan import (
        CallJob,
        ChildOpened,
        JobDone,
        Plan,
        Round,
        StepInput,
        ToolPolicy,
        ToolRound,
        round_end,
        shared_policy,
    )

__all__ = ["RoundJobs", "Stopping", "cut"]

Stopping = Callable[[], tuple[str, str | None] | None]
"""The stop the workflow is carrying out (kind, reason), if any."""


def cut(exc: ActivityError, stopping: Stopping) -> bool:
    """Whether ``exc`` is a step cancelled by a stop (not a step that failed)."""
    return stopping() is not None or isinstance(exc.cause, CancelledError)


class RoundJobs:
    """Runs a round's jobs; knows the child workflows running, to pass a stop on."""

    def __init__(self, stopping: Stopping) -> None:
        self.children: dict[str, str] = {}
        """Child workflow id -> the parent's call id, while the child is followed."""
        self._stopping = stopping

    async def cascade(self, kind: str, reason: str | None) -> None:
        """Pass a stop on to every child workflow running, at once."""
        children = list(self.children)
        if children:
            # Temporal's deterministic loop: its asyncio is the workflow's task group.
            await asyncio.gather(*(self._signal_stop(child, kind, reason) for child in children))  # noqa: TID251

    async def _signal_stop(self, child: str, kind: str, reason: str | None) -> None:
        try:
            await workflow.get_external_workflow_handle(child).signal("stop", args=[kind, reason])
        except Exception as exc:  # it has ended meanwhile: nothing to stop
            workflow.logger.info("stop of child workflow %s not delivered: %s", child, exc)

    async def run(self, run: WorkflowInput, job: CallJob, step: StepInput) -> JobDone:
        """Run ``job`` (its step's input: ``step``); a stop cancels it."""
        if job.kind == "tool":
            try:
                result: JobDone = await tool_step(run, step, job.policy, JobDone)
            except ActivityError as exc:
                if cut(exc, self._stopping):
                    raise asyncio.CancelledError from exc
                error = f"tool failed: {cause_of(exc)}"
                failed: JobDone = await call_step(run, "helix_tool_failed", [step, error], JobDone)
                return failed
            return result
        if job.kind == "companion":
            done: JobDone = await call_step(run, "helix_companion_call", step, JobDone, long=True)
            return done
        if job.kind == "remote":
            remote: JobDone = await call_step(
                run, "helix_remote_child", step, JobDone, long=True, retry=REMOTE
            )
            return remote
        return await self._child(run, job, step)

    async def opened(
        self, run: WorkflowInput, plan: Plan, trace: dict[str, str]
    ) -> tuple[Round, ToolPolicy | None]:
        """``plan``'s round (opened by the step that made it, or now), and the one policy its
        calls share when they are all tool calls (then one step runs and closes it)."""
        fused = workflow.patched(TOOL_ROUNDS)  # an older history replays its four steps
        if fused and plan.round is not None:
            opened = plan.round
        else:
            step = StepInput(plan.session_id, plan.seq, trace=trace)
            opened = await call_step(run, "helix_round_open", step, Round)
        return opened, shared_policy(opened) if fused else None

    async def tool_round(self, run: WorkflowInput, work: ToolRound, policy: ToolPolicy) -> Plan:
        """A round of tool calls sharing ``policy``, run and closed in one step; its attempts
        spent, each call left without a result gets the error, and the round is closed."""
        opened = work.opened
        try:
            return await tool_round_step(run, work, policy)
        except ActivityError as exc:
            if cut(exc, self._stopping):
                raise asyncio.CancelledError from exc
            error = f"tool failed: {cause_of(exc)}"
        done: list[JobDone] = []
        for job in opened.jobs:
            step = StepInput(work.session_id, opened.seq, job.call_id)
            done.append(await call_step(run, "helix_tool_failed", [step, error], JobDone))
        end = round_end(work.session_id, opened, done)
        closed: Plan = await call_step(run, "helix_round_close", end, Plan)
        return closed

    async def _child(self, run: WorkflowInput, job: CallJob, step: StepInput) -> JobDone:
        opened: ChildOpened = await call_step(run, "helix_child_open", step, ChildOpened)
        if not opened.open:
            return JobDone(opened.seq, job.call_id)
        child = opened.child_session_id
        self.children[child] = job.call_id
        try:
            if opened.launch_seq is not None:
                await self._launch(run, child, opened.launch_seq)
            stop = self._stopping()
            if stop is not None:  # it started after the stop went round
                await self._signal_stop(child, *stop)
            follow = StepInput(run.session_id, opened.seq, job.call_id)
            followed: JobDone = await call_step(
                run, "helix_child_follow", follow, JobDone, long=True
            )
            return followed
        finally:
            self.children.pop(child, None)

    async def _launch(self, run: WorkflowInput, child: str, seq: int) -> None:
        try:
            await workflow.start_child_workflow(
                WORKFLOW_NAME,
                # The parent's timing knobs: the child's run is the same engine's.
                dataclasses.replace(run, session_id=child, seq=seq),
                id=child,
                task_queue=workflow.info().task_queue,
                task_timeout=task_timeout(run.heartbeat_timeout),
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError:
            # A run of it is open (paused, waiting for its resume): wake it.
            await workflow.get_external_workflow_handle(child).signal("resume", seq)
