"""``AgentWorkflow``: one run of a session as a Temporal workflow (``specs/temporal.md``).

A driver: what the run does next is each step's plan (``plan.next``, which
``next_action`` decides); the workflow carries it out, and its own choices
are an engine's (signals, timers, child workflows). Deterministic: it acts
only on its input, its signals and its activities' results. The
workflow id is the session id; a local sub-agent's run is a child workflow
whose id is the child's session id. Signals: ``stop(kind, reason)`` (an
interrupt or abort, passed on at once to every running child workflow) and
``resume(seq)`` (a paused run goes on: its answers came in; also how the
launcher reaches a run still open when the next one is due). A paused root
with an entry that expires (``expires_in``) waits on a Temporal timer until
its ``expires_at``, then runs the ``helix_expire`` step.

Workflow code runs on Temporal's deterministic event loop, where its own
primitives (``asyncio.gather``, tasks, ``workflow.wait_condition``) are the
structured concurrency; the project's anyio rule applies to activities.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, CancelledError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

from helix_agents.engines.temporal.stepping import (
    REMOTE,
    STEP,
    WorkflowInput,
    call_step,
    cause_of,
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
        StopInput,
        round_end,
    )

__all__ = ["WORKFLOW_NAME", "AgentWorkflow", "WorkflowInput"]

WORKFLOW_NAME = "helix_agent"


@workflow.defn(name=WORKFLOW_NAME)
class AgentWorkflow:
    """Drives one session's run through the durable steps (see the module doc)."""

    def __init__(self) -> None:
        self._stop: tuple[str, str | None] | None = None
        self._resume = 0
        self._children: dict[str, str] = {}  # child workflow id -> the parent's call id
        self._body: asyncio.Task[Plan] | None = None
        self._input: WorkflowInput | None = None
        self._paused_at = 0
        self._trace: dict[str, str] = {}  # the run's span: its steps' spans are its children
        self._driving = 0  # the seq of the run_started of the run this execution drives

    # --- signals -------------------------------------------------------------------

    @workflow.signal(name="stop")
    async def stop(self, kind: str, reason: str | None = None) -> None:
        """Stop the run (an abort overrides an interrupt) and every child workflow running."""
        if self._stop is None or kind == "abort":
            self._stop = (kind, reason)
        if self._body is not None:
            self._body.cancel()
        await self._cascade(kind, reason)

    @workflow.signal(name="resume")
    def resume(self, seq: int) -> None:
        """A run of this session whose log ends at ``seq`` is due (answers came in, a turn)."""
        self._resume = max(self._resume, seq)

    async def _cascade(self, kind: str, reason: str | None) -> None:
        children = list(self._children)
        if children:
            # Temporal's deterministic loop: its asyncio is the workflow's task group.
            await asyncio.gather(*(self._signal_stop(child, kind, reason) for child in children))  # noqa: TID251

    async def _signal_stop(self, child: str, kind: str, reason: str | None) -> None:
        try:
            await workflow.get_external_workflow_handle(child).signal("stop", args=[kind, reason])
        except Exception as exc:  # it has ended meanwhile: nothing to stop
            workflow.logger.info("stop of child workflow %s not delivered: %s", child, exc)

    # --- the run -------------------------------------------------------------------

    @workflow.run
    async def run(self, run: WorkflowInput) -> str:
        """Run the session until it ends, or pauses longer than ``paused_wait``; its status."""
        status = await self._run(run)
        # A stop still passing itself on to the children finishes first.
        await workflow.wait_condition(workflow.all_handlers_finished)
        return status

    async def _run(self, run: WorkflowInput) -> str:
        self._input = run
        seq = run.seq
        while True:
            self._driving = seq
            self._body = asyncio.get_running_loop().create_task(self._drive(seq))
            plan: Plan | None = None
            try:
                plan = await self._body
            except asyncio.CancelledError:
                if self._stop is None:
                    raise
            finally:
                self._body = None
            if self._stop is None and plan is not None and plan.next == "stop":
                # A stop request reached the log without its signal: act on the log.
                self._stop = (plan.stop or "interrupt", plan.stop_reason)
                await self._cascade(*self._stop)
            if self._stop is None and plan is not None and plan.next == "pause":
                self._paused_at = plan.seq
                if not await self._paused(plan):
                    return "paused"  # a later answer starts a new run of the session
            if self._stopping():
                plan = await self._stopped()
                self._stop = None
            assert plan is not None
            # Due: a run launched after the one driven (not after the plan's seq:
            # a stopped paused run's plan may already read the resumed run's start).
            if self._resume <= seq:
                return plan.status
            # The next run of the session is due (a resume, a follow-up turn) and
            # reached this execution before it closed: run it here.
            seq = self._resume

    async def _paused(self, plan: Plan) -> bool:
        """Wait for the resume signal (or a stop); False when ``paused_wait`` passed first.

        An open entry with ``expires_in`` sets a durable timer at its
        ``expires_at`` (the run waits for it even past ``paused_wait``): the
        ``expire`` step answers it, and its resume signal wakes the run.
        """
        run = self._run_input
        ends = workflow.now().timestamp() + run.paused_wait
        expires_at = plan.expires_at
        while True:
            wait = (ends if expires_at is None else expires_at) - workflow.now().timestamp()
            if wait > 0:
                try:
                    await workflow.wait_condition(self._woken, timeout=timedelta(seconds=wait))
                    return True
                except TimeoutError:
                    pass
            elif self._woken():
                return True
            if expires_at is None:
                return False
            expired: Plan = await self._step(
                "helix_expire", StepInput(run.session_id, plan.seq), Plan
            )
            expires_at = expired.expires_at
            ends = workflow.now().timestamp() + run.paused_wait

    def _cut(self, exc: ActivityError) -> bool:
        """Whether ``exc`` is a step cancelled by a stop (not a step that failed)."""
        return self._stop is not None or isinstance(exc.cause, CancelledError)

    def _woken(self) -> bool:
        return self._resume > self._paused_at or self._stop is not None

    def _stopping(self) -> bool:
        return self._stop is not None

    async def _stopped(self) -> Plan:
        """Record the stop once the children acknowledged (a paused run: already recorded)."""
        assert self._stop is not None
        kind, reason = self._stop
        run = self._run_input
        ended: Plan = await self._step(
            "helix_stopped",
            StopInput(run.session_id, kind, reason, run_seq=self._driving),
            Plan,
            seconds=run.stop_grace + 60,
        )
        return ended

    async def _drive(self, seq: int) -> Plan:
        sid = self._run_input.session_id
        plan: Plan = await self._step("helix_begin", StepInput(sid, seq), Plan)
        self._trace = plan.trace
        while plan.next in ("step", "round"):
            try:
                if plan.next == "round":
                    plan = await self._round(plan)
                else:
                    step = StepInput(sid, plan.seq, trace=self._trace)
                    plan = await self._step("helix_model_step", step, Plan, long=True)
            except ActivityError as exc:
                if self._cut(exc):
                    raise asyncio.CancelledError from exc
                # A step whose retries are spent: the run fails, recorded in the log.
                failed = [StepInput(sid, plan.seq), cause_of(exc)]
                plan = await self._step("helix_run_failed", failed, Plan)
        return plan

    async def _round(self, plan: Plan) -> Plan:
        sid = plan.session_id
        step = StepInput(sid, plan.seq, trace=self._trace)
        opened: Round = await self._step("helix_round_open", step, Round)
        # The round's jobs run at once, as a built-in round's do (Temporal's loop, see above).
        done = await asyncio.gather(*(self._job(job, opened.seq) for job in opened.jobs))  # noqa: TID251
        closed: Plan = await self._step("helix_round_close", round_end(sid, opened, done), Plan)
        return closed

    async def _job(self, job: CallJob, seq: int) -> JobDone:
        run = self._run_input
        step = StepInput(run.session_id, seq, job.call_id, self._trace)
        if job.kind == "tool":
            try:
                result: JobDone = await tool_step(run, step, job.policy, JobDone)
            except ActivityError as exc:
                if self._cut(exc):
                    raise asyncio.CancelledError from exc
                error = f"tool failed: {cause_of(exc)}"
                failed: JobDone = await self._step("helix_tool_failed", [step, error], JobDone)
                return failed
            return result
        if job.kind == "companion":
            companion: JobDone = await self._step("helix_companion_call", step, JobDone, long=True)
            return companion
        if job.kind == "remote":
            remote: JobDone = await self._step(
                "helix_remote_child", step, JobDone, long=True, retry=REMOTE
            )
            return remote
        opened: ChildOpened = await self._step("helix_child_open", step, ChildOpened)
        if not opened.open:
            return JobDone(opened.seq, job.call_id)
        child = opened.child_session_id
        self._children[child] = job.call_id
        try:
            if opened.launch_seq is not None:
                await self._launch_child(child, opened.launch_seq)
            if self._stop is not None:  # it started after the stop went round
                await self._signal_stop(child, *self._stop)
            follow = StepInput(run.session_id, opened.seq, job.call_id)
            followed: JobDone = await self._step("helix_child_follow", follow, JobDone, long=True)
            return followed
        finally:
            self._children.pop(child, None)

    async def _launch_child(self, child: str, seq: int) -> None:
        run = self._run_input
        try:
            await workflow.start_child_workflow(
                WORKFLOW_NAME,
                WorkflowInput(
                    child,
                    seq,
                    heartbeat_timeout=run.heartbeat_timeout,
                    paused_wait=run.paused_wait,
                    stop_grace=run.stop_grace,
                ),
                id=child,
                task_queue=workflow.info().task_queue,
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
        except WorkflowAlreadyStartedError:
            # A run of it is open (paused, waiting for its resume): wake it.
            await workflow.get_external_workflow_handle(child).signal("resume", seq)

    @property
    def _run_input(self) -> WorkflowInput:
        assert self._input is not None
        return self._input

    async def _step(
        self,
        name: str,
        arg: object,
        result_type: type[Any],
        *,
        long: bool = False,
        seconds: float = 60.0,
        retry: RetryPolicy = STEP,
    ) -> Any:
        run = self._run_input
        return await call_step(run, name, arg, result_type, long=long, seconds=seconds, retry=retry)
