"""``AgentWorkflow``: one run of a session as a Temporal workflow (``specs/temporal.md``).

A driver: what the run does next is each step's plan (``plan.next``, which
``next_action`` decides); it carries that out, and its own choices are an
engine's (signals, timers, child workflows: ``jobs.py``). Deterministic: it
acts only on its input, its signals and its activities' results. The
workflow id is the session id; a local sub-agent's run is a child workflow
whose id is the child's session id. Signals: ``stop(kind, reason)`` (an
interrupt or abort, passed on at once to every running child workflow) and
``resume(seq)`` (a paused run goes on: its answers came in; also how the
launcher reaches a run still open when the next one is due). A paused root
with an entry that expires (``expires_in``) waits on a Temporal timer until
its ``expires_at``, then runs the ``helix_expire`` step.

Workflow code runs on Temporal's deterministic loop: its primitives
(``asyncio.gather``, tasks) are the structured concurrency here.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError

from helix_agents.engines.temporal.jobs import RoundJobs, cut
from helix_agents.engines.temporal.stepping import (
    WORKFLOW_NAME,
    WorkflowInput,
    call_step,
    cause_of,
)

with workflow.unsafe.imports_passed_through():
    from helix_agents.engines.durable.plan import (
        Plan,
        StepInput,
        StopInput,
        ToolRound,
        round_end,
    )

__all__ = ["WORKFLOW_NAME", "AgentWorkflow", "WorkflowInput"]


@workflow.defn(name=WORKFLOW_NAME)
class AgentWorkflow:
    """Drives one session's run through the durable steps (see the module doc)."""

    def __init__(self) -> None:
        self._stop: tuple[str, str | None] | None = None
        self._resume = 0
        self._jobs = RoundJobs(lambda: self._stop)
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
        await self._jobs.cascade(kind, reason)

    @workflow.signal(name="resume")
    def resume(self, seq: int) -> None:
        """A run of this session whose log ends at ``seq`` is due (answers came in, a turn)."""
        self._resume = max(self._resume, seq)

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
                await self._jobs.cascade(*self._stop)
            if self._stop is None and plan is not None and plan.next == "pause":
                self._paused_at = plan.seq
                if not await self._paused(plan):
                    return "paused"  # a later answer starts a new run of the session
            if self._stop is not None:
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
            step = StepInput(run.session_id, plan.seq)
            expired: Plan = await call_step(run, "helix_expire", step, Plan)
            expires_at = expired.expires_at
            ends = workflow.now().timestamp() + run.paused_wait

    def _woken(self) -> bool:
        return self._resume > self._paused_at or self._stop is not None

    async def _stopped(self) -> Plan:
        """Record the stop once the children acknowledged (a paused run: already recorded)."""
        assert self._stop is not None
        run = self._run_input
        stop = StopInput(run.session_id, *self._stop, run_seq=self._driving)
        ended: Plan = await call_step(run, "helix_stopped", stop, Plan, seconds=run.stop_grace + 60)
        return ended

    async def _drive(self, seq: int) -> Plan:
        run = self._run_input
        sid = run.session_id
        plan: Plan = await call_step(run, "helix_begin", StepInput(sid, seq), Plan)
        self._trace = plan.trace
        while plan.next in ("step", "round"):
            try:
                if plan.next == "round":
                    plan = await self._round(plan)
                else:
                    step = StepInput(sid, plan.seq, trace=self._trace)
                    plan = await call_step(run, "helix_model_step", step, Plan, long=True)
            except ActivityError as exc:
                if cut(exc, lambda: self._stop):
                    raise asyncio.CancelledError from exc
                # A step whose retries are spent: the run fails, recorded in the log.
                failed = [StepInput(sid, plan.seq), cause_of(exc)]
                plan = await call_step(run, "helix_run_failed", failed, Plan)
        return plan

    async def _round(self, plan: Plan) -> Plan:
        run, sid, trace = self._run_input, plan.session_id, self._trace
        opened, policy = await self._jobs.opened(run, plan, trace)
        if policy is not None:  # tool calls only: one activity runs and closes the round
            return await self._jobs.tool_round(run, ToolRound(sid, opened, trace), policy)
        # The round's jobs run at once, as a built-in round's do (Temporal's loop, see above).
        steps = [StepInput(sid, opened.seq, job.call_id, trace) for job in opened.jobs]
        jobs = [self._jobs.run(run, job, at) for job, at in zip(opened.jobs, steps, strict=True)]
        done = await asyncio.gather(*jobs)  # noqa: TID251
        end = round_end(sid, opened, done)
        closed: Plan = await call_step(run, "helix_round_close", end, Plan)
        return closed

    @property
    def _run_input(self) -> WorkflowInput:
        assert self._input is not None
        return self._input
