"""``DurableSteps``: a session's run cut into durable steps, each landing once in the log.

The engine-neutral half of a durable runtime (``specs/temporal.md``). A
workflow (Temporal's, a DBOS one) drives a session with these steps and
decides only from what they return (:mod:`helix_agents.engines.durable.plan`):

- ``begin``: a run begins (its ``on_agent_start`` hook) and says what is due;
- ``model_step``: the run's next action when it is not a round: one model call
  (``step_started``, streamed text, the turn), or the completion, or the step
  limit's failure;
- ``round_open``: a turn's calls routed (``RunActions.route``); the inline ones
  recorded (``__finish__``, unknown tools, approval gates, client tools), the
  rest returned as jobs. The step whose plan is a round (``model_step``,
  ``begin``) opens it itself and hands it over in :attr:`Plan.round`, so a
  round costs no step of its own to open;
- in :attr:`DurableSteps.calls` (``calls.py``): ``tool_call``, ``child_open`` +
  ``child_follow`` (a local child, whose run the workflow launches in
  between), ``remote_child``, ``companion_call``: one job each;
- ``round_close``: completion, suspension for people, or the next step, as
  ``next_action`` decides;
- ``tool_round``: a round whose jobs are all tool calls sharing one policy
  (:func:`~helix_agents.engines.durable.plan.shared_policy`), its calls run
  at once and the round closed, in one step;
- ``stopped``: an interrupt or abort recorded once the children acknowledged;
- ``expire``: a paused root's entries past their ``expires_in`` answered as
  expired (the workflow's durable timer calls it at the plan's ``expires_at``).

**One log, exactly once.** Every step reads the session's log, folds it and
appends through a :class:`~helix_agents.runtime.writer.SessionWriter`, whose
compare-and-append at the log's end (the seq the workflow passed is where the
step's work starts) folds any other writer's events (a stop request, an
answer, a queued message) and retries. A step is a no-op when its work is
already in the log: a retried step (its worker died after appending, before
the engine recorded its result) finds its events there and succeeds without
repeating them: a model step finds its turn, a tool step its result, a round
its records. A step cut mid-stream leaves a partial step that the retry
declares void (``step_restarted``), as a resumed run does.

What a run does next is never decided here nor in a workflow:
:func:`~helix_agents.runtime.decide.next_action` decides (each :class:`Plan`
says which step is due), and every step carries its action out with the
built-in runtime's own code (:class:`~helix_agents.runtime.actions.RunActions`,
``run_tool_call``, ``ChildCall``), so the log a durable engine writes is the
log the built-in runtime writes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial

import anyio

from helix_agents.agents.config import AgentConfig, RemoteSubAgentTool, SubAgentTool
from helix_agents.engines.durable.calls import CallSteps
from helix_agents.engines.durable.kit import Beat, StepKit, StopWatch, no_beat
from helix_agents.engines.durable.plan import (
    TOOL_TIMEOUT,
    CallJob,
    JobDone,
    Plan,
    Round,
    RoundEnd,
    StepInput,
    StopInput,
    ToolPolicy,
    ToolRound,
    round_end,
    shared_policy,
)
from helix_agents.engines.durable.reading import (
    first_error,
    last_run_seq,
    last_turn_seq,
    open_tool_starts,
    plan_of,
    refuse_unsupported,
    retryable,
    stepped_since,
)
from helix_agents.engines.durable.waits import WaitSteps
from helix_agents.errors import UsageError
from helix_agents.events import (
    AbortRequested,
    Event,
    InterruptRequested,
)
from helix_agents.hitl.gates import Waiting, suspension
from helix_agents.hitl.routing import expiring, watch_expiry
from helix_agents.ids import SessionId
from helix_agents.log.projections import interrupted_step
from helix_agents.log.state import SessionState
from helix_agents.models.base import LLMError
from helix_agents.runtime.decide import (
    Complete,
    Fail,
    ModelStep,
    RunRound,
    Suspend,
    next_action,
    stop_ending,
    stop_reason_text,
    turn_due,
    unanswered_calls,
)
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.tool_runner import (
    ToolOutcome,
    tool_end,
)
from helix_agents.runtime.writer import SessionWriter, StopRequest

__all__ = ["DurableSteps"]

_CLOCK_SLACK = 1.0
"""Seconds an entry may still have to go when the expiry step runs (clock skew)."""


class DurableSteps:
    """The steps of the sessions of ``executor``'s agents, on its store (see the module doc).

    Args:
        executor: where the agents, the store, the models and the local
            transport come from (its task group must be open while steps run).
        tool_policies: a :class:`ToolPolicy` by tool name (retries, timeout).
        default_policy: the policy of the other tools.
        beat_every: seconds between a long step's heartbeats.

    Raises:
        UsageError: an agent declares a workspace whose provider keeps its
            files in one process, or a policy names no tool.
    """

    def __init__(
        self,
        executor: AgentExecutor,
        *,
        tool_policies: Mapping[str, ToolPolicy] | None = None,
        default_policy: ToolPolicy | None = None,
        beat_every: float = 1.0,
    ) -> None:
        self.kit = StepKit(executor, beat_every)
        self.calls = CallSteps(self.kit)
        """The steps of one call each (a tool, a child, a remote child, a companion)."""
        self.waits = WaitSteps(self.kit)
        """The steps around an engine's durable ``waitForResult`` wait."""
        self._policies = dict(tool_policies or {})
        self._default = default_policy or ToolPolicy()
        known = refuse_unsupported(executor.registry, executor.workspaces.providers)
        unknown = sorted(set(self._policies) - known)
        if unknown:
            raise UsageError(f"tool_policies name tools no agent has: {', '.join(unknown)}")

    def policy(self, tool_name: str) -> ToolPolicy:
        """The retry policy of tool ``tool_name``'s steps."""
        return self._policies.get(tool_name, self._default)

    # --- the run ----------------------------------------------------------------------

    async def begin(self, step: StepInput) -> Plan:
        """A run begins: fire ``on_agent_start`` (at least once) and say what is due."""
        agent, writer, log_ = await self.kit.open(step.session_id)
        trace: dict[str, str] = {}
        if writer.state.status == "running":
            # The run's span: made here (a run's steps may run in several
            # processes); every later step of the run continues it.
            with self.kit.run_span(agent, writer, log_):
                trace = self.kit.executor.env.tracer.trace_context()
                await self.kit.run(agent, writer).fire("on_agent_start")
        plan = await self._planned(agent, writer, StepInput(step.session_id, step.seq, trace=trace))
        plan.trace = trace
        return plan

    async def model_step(self, step: StepInput, beat: Beat = no_beat) -> Plan:
        """The next action that is not a round, recorded once: a model call, a completion,
        or the step limit's failure (a retry after it was recorded does nothing)."""
        stop = StopWatch()
        agent, writer, log_ = await self.kit.open(step.session_id, stop)
        if stepped_since(log_, step.seq):
            return await self._planned(agent, writer, step)
        action = next_action(agent, writer.state)
        if isinstance(action, Complete | Fail):
            run = self.kit.run(agent, writer)
            if isinstance(action, Complete):
                await run.complete(action.output)
                await self._next_turn(writer)
            else:
                await run.fail(action.error, recoverable=action.recoverable)
            return plan_of(agent, writer.state)
        if not isinstance(action, ModelStep):
            return plan_of(agent, writer.state)
        restart = interrupted_step(log_)
        if restart is not None:
            writer.emit(restart)  # the cut step runs again: its partial text is void
        async with self.kit.workspaces(agent, writer) as equipped:
            with self.kit.traced(step):
                await self.kit.guarded(
                    writer, stop, partial(self._model_call, equipped, writer), beat
                )
                await self._next_turn(writer)  # the turn's answer completed the run
                return await self._opened(equipped, writer)

    async def turn(self, step: StepInput, *, begin: bool = False) -> Plan:
        """DBOS's step per agent step: the model step, and the tool round it opened, tried once.

        With ``begin``, the run's beginning (:meth:`begin`) comes first, in the same
        step. A round of tool calls sharing one local policy (:func:`shared_policy`,
        ``ToolPolicy.local``) runs and closes here, its first attempt; if that attempt
        fails, the plan carries the round open and the error (:attr:`Plan.tried`) and
        the round's own step has its policy's other attempts. A retry of this step
        repeats nothing recorded: the turn is in the log, so is each call's result.
        """
        trace = step.trace
        plan: Plan | None = None
        if begin:
            plan = await self.begin(step)
            trace = plan.trace
            step = StepInput(step.session_id, plan.seq, trace=trace)
        if plan is None or plan.next == "step":
            plan = await self.model_step(step)
        opened = plan.round if plan.next == "round" else None
        policy = shared_policy(opened) if opened is not None else None
        if opened is not None and policy is not None and policy.local:
            try:
                with anyio.fail_after(policy.timeout or TOOL_TIMEOUT):
                    plan = await self.tool_round(ToolRound(step.session_id, opened, trace))
            except Exception as exc:
                if not retryable(exc):
                    raise
                plan.tried = str(exc) or type(exc).__name__
        plan.trace = trace
        return plan

    async def _planned(self, agent: AgentConfig, writer: SessionWriter, step: StepInput) -> Plan:
        """``writer``'s plan; a round due is opened here (:attr:`Plan.round`)."""
        plan = plan_of(agent, writer.state)
        if plan.next != "round":
            return plan
        async with self.kit.workspaces(agent, writer) as equipped:
            with self.kit.traced(step):
                return await self._opened(equipped, writer)

    async def _opened(self, equipped: AgentConfig, writer: SessionWriter) -> Plan:
        """The plan after ``writer``'s last event; a round due opened (its agent: ``equipped``)."""
        plan = plan_of(equipped, writer.state)
        if plan.next == "round":
            plan.round = await self._route(equipped, writer)
            plan.seq = plan.round.seq
        return plan

    async def _route(self, equipped: AgentConfig, writer: SessionWriter) -> Round:
        action = next_action(equipped, writer.state)
        if not isinstance(action, RunRound):
            return Round(seq=writer.last_seq)
        routed = await self.kit.run(equipped, writer).route(action.calls)
        jobs = [
            CallJob(call.id, call.name, kind, self.policy(call.name)) for call, kind in routed.jobs
        ]
        waiting = routed.waiting
        return Round(writer.last_seq, jobs, list(waiting.client), list(waiting.approval))

    async def _model_call(self, agent: AgentConfig, writer: SessionWriter) -> None:
        companions = self.kit.companions(agent, writer)
        if companions is not None:
            # Children's outcomes not yet seen reach the model first (push).
            await companions.deliver()
        run = self.kit.run(agent, writer)
        try:
            await run.step()
        except LLMError as error:
            await run.fail(str(error), recoverable=error.retryable)

    async def round_open(self, step: StepInput) -> Round:
        """Route the last turn's unanswered calls: record the inline ones, return the jobs."""
        agent, writer, _log = await self.kit.open(step.session_id)
        if not isinstance(next_action(agent, writer.state), RunRound):
            return Round(seq=writer.last_seq)
        async with self.kit.workspaces(agent, writer) as equipped:
            with self.kit.traced(step):
                return await self._route(equipped, writer)

    async def tool_round(self, work: ToolRound, beat: Beat = no_beat) -> Plan:
        """Run a round's tool calls at once (each unless its result is recorded), then close it.

        A retry runs only the calls with no result yet, as separate call steps would.
        """
        opened, sid = work.opened, work.session_id
        steps = [StepInput(sid, opened.seq, job.call_id, work.trace) for job in opened.jobs]
        done: list[JobDone] = []
        if len(steps) == 1:
            done.append(await self.calls.tool_call(steps[0], beat))
        else:
            try:
                async with anyio.create_task_group() as tg:
                    for step in steps:

                        async def call(step: StepInput = step) -> None:
                            done.append(await self.calls.tool_call(step, beat))

                        tg.start_soon(call)
            except BaseExceptionGroup as group:
                raise first_error(group) from None  # the step fails as its call did
            order = {job.call_id: n for n, job in enumerate(opened.jobs)}
            done.sort(key=lambda job: order[job.call_id])
        return await self.round_close(round_end(sid, opened, done))

    async def round_close(self, end: RoundEnd) -> Plan:
        """End a round as ``next_action`` decides: complete, suspend for people, or go on."""
        agent, writer, _log = await self.kit.open(end.session_id)
        waiting = Waiting(client=end.client, approval=end.approval, children=end.children)
        action = next_action(agent, writer.state, waiting)
        if isinstance(action, Complete):
            await self.kit.run(agent, writer).complete(action.output)
            await self._next_turn(writer)
        elif isinstance(action, Suspend):
            await writer.append_with(suspension(agent, action.waiting))
        return plan_of(agent, writer.state)

    # --- endings ------------------------------------------------------------------------

    async def stopped(self, request: StopInput) -> Plan:
        """Record a stop: children halted (acknowledged), open tool calls closed, the ending."""
        agent, writer, log_ = await self.kit.open(request.session_id)
        state = writer.state
        if state.status != "running":
            await self._next_turn(writer)  # a retry after the stop was recorded
            return plan_of(agent, state)  # a paused session was stopped at once by the service
        if request.run_seq and last_run_seq(log_) > request.run_seq:
            return plan_of(
                agent, state
            )  # stopped while paused, and since resumed: not this run's stop
        stop = StopRequest(request.kind, request.reason)
        companions = self.kit.companions(agent, writer)
        with anyio.move_on_after(self.kit.executor.env.stop_grace):
            async with anyio.create_task_group() as tg:
                for call in unanswered_calls(state):
                    # A blocking companion the call follows is halted like a sub-agent.
                    link = companions.followed(call) if companions is not None else None
                    if link is not None:
                        tg.start_soon(link.halt, stop)
                    tool = agent.tool(call.name)
                    if not isinstance(tool, SubAgentTool | RemoteSubAgentTool):
                        continue
                    child = self.kit.child(agent, writer, call)
                    ref = state.sub_sessions.get(child.session_id)
                    if ref is not None and ref.status == "running":
                        child.opened = True
                        tg.start_soon(child.halt, stop)
        if stop.kind == "abort" and companions is not None:
            # Stopped for good: so are its companions running on their own.
            with anyio.move_on_after(self.kit.executor.env.stop_grace):
                await companions.terminate_live(stop.reason)
        await writer.append()  # what the halts forwarded
        after = last_turn_seq(log_)
        started = open_tool_starts(await self.kit.executor.store.read(writer.session_id, after))
        word = "interrupted" if stop.kind == "interrupt" else "aborted"
        sid = writer.session_id

        def ending(latest: SessionState) -> list[Event]:
            if latest.status != "running":
                return []
            closing: list[Event] = [
                tool_end(agent, sid, call, ToolOutcome(error=word))
                for call in unanswered_calls(latest)
                if call.id in started
            ]
            # A stop signalled only (its request not in the log yet) records its request too.
            asked = (
                latest.interrupt_requested if stop.kind == "interrupt" else latest.abort_requested
            )
            request: list[Event] = []
            if not asked:
                cls = InterruptRequested if stop.kind == "interrupt" else AbortRequested
                request.append(cls(reason=stop.reason))
            return [*request, *stop_ending(agent, sid, stop.kind, stop.reason, closing)]

        before = writer.last_seq
        await writer.append_with(ending)
        error = stop_reason_text(stop.kind, stop.reason)
        if error is not None and writer.last_seq > before:
            await self.kit.run(agent, writer).fire("on_agent_fail", error)
        await self._next_turn(writer)
        return plan_of(agent, writer.state)

    async def _next_turn(self, writer: SessionWriter) -> None:
        """The run ended: begin the session's waiting turn if one is due (its launch
        reaches this workflow as a ``resume``, or starts the next one)."""
        if turn_due(writer.state) is not None:
            await self.kit.executor.runs.begin_next_turn(writer.session_id)

    async def expire(self, step: StepInput) -> Plan:
        """Answer a paused root's entries due by now as expired, as the built-in timer does.

        The workflow's durable timer calls it at the plan's ``expires_at``: each
        entry due (a second's slack for the clocks of engine and worker; a
        step a little early waits the rest) is answered at the root with
        ``expired: true`` through the service, whose resume wakes the run
        like a person's answer would (a person's earlier answer wins).
        """
        agent, writer, _log = await self.kit.open(step.session_id)
        runs, resume = self.kit.executor.runs, self.kit.executor.service.resume_if_paused
        sid = SessionId(writer.session_id)
        due = time.time() + _CLOCK_SLACK
        for entry in expiring(writer.state):
            if entry.expires_at is not None and entry.expires_at <= due:
                await watch_expiry(runs, resume, sid, entry, anyio.sleep)
        return plan_of(agent, await runs.state(sid))

    async def run_failed(self, step: StepInput, error: str) -> Plan:
        """Fail a run whose step can never succeed (its engine's retries are spent)."""
        agent, writer, _log = await self.kit.open(step.session_id)
        if writer.state.status == "running":
            await self.kit.run(agent, writer).fail(f"internal error: {error}")
        return plan_of(agent, writer.state)
