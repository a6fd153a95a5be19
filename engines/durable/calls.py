"""``CallSteps``: the durable steps of one call each: a tool, a child, a remote child, a companion.

Each finds its call among the last turn's unanswered ones (a retried step
whose call has its result does nothing), runs it with the built-in runtime's
pieces (``run_tool_call``, ``ChildCall``, ``Companions``) and records it.
"""

from __future__ import annotations

import logging

from helix_agents.agents.tools import Tool
from helix_agents.engines.durable.kit import Beat, StepKit, StopWatch, no_beat
from helix_agents.engines.durable.launches import collect_launches
from helix_agents.engines.durable.plan import ChildOpened, JobDone, StepInput
from helix_agents.engines.durable.reading import goes_on, open_tool_starts, unanswered
from helix_agents.hitl.gates import Waiting
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, run_tool_call, tool_start
from helix_agents.tracing import call_error, end_tool_span, tool_span

__all__ = ["CallSteps"]

log = logging.getLogger("helix_agents.engines.durable")


class CallSteps:
    """The call steps, over ``kit``."""

    def __init__(self, kit: StepKit) -> None:
        self.kit = kit

    async def tool_call(self, step: StepInput, beat: Beat = no_beat) -> JobDone:
        """Run one regular tool call, unless its result is already recorded."""
        stop = StopWatch()
        agent, writer, _log = await self.kit.open(step.session_id, stop)
        call = unanswered(writer.state, step.call_id)
        if call is None or not goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        tracer = self.kit.executor.env.tracer
        async with self.kit.workspaces(agent, writer) as equipped:
            tool = equipped.tool(call.name)
            if not isinstance(tool, Tool):
                return JobDone(writer.last_seq, step.call_id)
            fire = self.kit.run(equipped, writer).fire
            memory = self.kit.executor.env.memory
            sid = writer.session_id
            with self.kit.traced(step), tool_span(tracer, equipped.name, sid, call) as span:
                outcome = await self.kit.guarded(
                    writer,
                    stop,
                    lambda: run_tool_call(equipped, writer, call, tool, fire, memory),
                    beat,
                )
                end_tool_span(span, outcome.error if outcome is not None else None)
        return JobDone(writer.last_seq, step.call_id)

    async def tool_failed(self, step: StepInput, error: str) -> JobDone:
        """Record a tool call whose every attempt failed (its steps' retries spent) as an error."""
        agent, writer, log_ = await self.kit.open(step.session_id)
        call = unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return JobDone(writer.last_seq, step.call_id)
        sid = writer.session_id
        started = call.id in open_tool_starts(log_)
        await writer.append(
            *([] if started else [tool_start(agent, sid, call)]),
            *result_events(agent, sid, call, ToolOutcome(error=error), usage=False),
        )
        return JobDone(writer.last_seq, step.call_id)

    async def child_open(self, step: StepInput) -> ChildOpened:
        """Open a local child call; the child's run it needs is returned, not launched here."""
        agent, writer, _log = await self.kit.open(step.session_id)
        call = unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return ChildOpened(writer.last_seq, "", open=False)
        child = self.kit.child(agent, writer, call)
        # The call's span covers its opening (the child's runs are its children);
        # following the child is a step of its own, with no span. Its parent's workspaces
        # are open meanwhile: an inheriting child's start is accepted only then.
        async with self.kit.workspaces(agent, writer):
            with self.kit.traced(step), child.span(), collect_launches() as launches:
                opened = await child.open()
                await self.kit.executor.runs.wait_idle(child.session_id)  # launch handed over
        await writer.append()  # the call's records, written behind by the open
        seqs = [launch.seq for launch in launches if launch.session_id == child.session_id]
        return ChildOpened(
            writer.last_seq, child.session_id, open=opened, launch_seq=max(seqs) if seqs else None
        )

    async def child_follow(self, step: StepInput, beat: Beat = no_beat) -> JobDone:
        """Follow an opened local child to its end (or suspension) and record the call's result."""
        stop = StopWatch()
        agent, writer, _log = await self.kit.open(step.session_id, stop)
        call = unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return JobDone(writer.last_seq, step.call_id)
        if not goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        child = self.kit.child(agent, writer, call)
        child.opened = True
        suspended = await self.kit.guarded(
            writer, stop, child.conclude, beat, lambda: writer.held_child_seq(child.session_id)
        )
        return JobDone(writer.last_seq, step.call_id, child.session_id if suspended else None)

    async def remote_child(
        self, step: StepInput, beat: Beat = no_beat, resume_from: int = 0
    ) -> JobDone:
        """A remote sub-agent call: deterministic id, status first, resumed from the seq held.

        The call's child id is ``{parent}-remote-{call id}``; a retried step re-opens
        it from what the parent's log holds (the status decides: completed -> its
        output, no re-run; running -> follow from the last seq held; failed -> its
        error). A stream that drops more often in a row than the tool's
        ``stream_retries`` raises :class:`~helix_agents.errors.StreamDropError`:
        the engine retries the step. ``progress`` given to ``beat`` is the last
        child seq the parent's log holds (committed, never ahead of the log); a
        retried step passes the last one its engine kept as ``resume_from`` and
        follows from the larger of it and what the log holds.
        """
        stop = StopWatch()
        agent, writer, _log = await self.kit.open(step.session_id, stop)
        call = unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return JobDone(writer.last_seq, step.call_id)
        if not goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        child = self.kit.child(agent, writer, call)
        if resume_from:
            logged = writer.held_child_seq(child.session_id)
            log.info(
                "remote call %s: child %s resumes after seq %d (heartbeat %d, log %d)",
                step.call_id,
                child.session_id,
                max(resume_from, logged),
                resume_from,
                logged,
            )
            child.resume_from = resume_from

        async def body() -> bool:
            return await child.open() and await child.conclude(raise_drops=True)

        def held() -> int:
            ref = writer.state.sub_sessions.get(child.session_id)
            return ref.last_child_seq if ref is not None else 0

        with self.kit.traced(step), child.span() as span:
            suspended = await self.kit.guarded(writer, stop, body, beat, held)
            end_tool_span(span, call_error(writer.state, call.id))
        return JobDone(writer.last_seq, step.call_id, child.session_id if suspended else None)

    async def companion_call(self, step: StepInput, beat: Beat = no_beat) -> JobDone:
        """One companion tool call (a blocking spawn follows its child here, heartbeating)."""
        stop = StopWatch()
        agent, writer, _log = await self.kit.open(step.session_id, stop)
        call = unanswered(writer.state, step.call_id)
        companions = self.kit.companions(agent, writer)
        if call is None or companions is None or not goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        waiting = Waiting()
        tracer = self.kit.executor.env.tracer
        sid = writer.session_id
        # Open: an inheriting companion's start is accepted only while its parent uses them here.
        async with self.kit.workspaces(agent, writer):
            with self.kit.traced(step), tool_span(tracer, agent.name, sid, call) as span:
                await self.kit.guarded(writer, stop, lambda: companions.call(call, waiting), beat)
                end_tool_span(span, call_error(writer.state, call.id))
        return JobDone(
            writer.last_seq,
            step.call_id,
            client=list(waiting.client),
            approval=list(waiting.approval),
            children=dict(waiting.children),
        )
