"""``DurableSteps``: a session's run cut into durable steps, each landing once in the log.

The engine-neutral half of a durable runtime (``specs/temporal.md``). A
workflow (Temporal's, a DBOS one) drives a session with these steps and
decides only from what they return (:mod:`helix_agents.durable.plan`):

- ``begin``: a run begins (its ``on_agent_start`` hook) and says what is due;
- ``model_step``: one model call (``step_started``, streamed text, the turn);
- ``round_open``: a turn's calls routed; the inline ones recorded (``__finish__``,
  unknown tools, approval gates, client tools), the rest returned as jobs;
- ``tool_call``, ``child_open`` + ``child_follow`` (a local child, whose run
  the workflow launches in between), ``remote_child``: one job each;
- ``round_close``: completion, suspension for people, or the next step;
- ``stopped``: an interrupt or abort recorded once the children acknowledged.

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

Every step runs the building blocks of the built-in runtime (``SessionRun.step``,
``run_tool_call``, ``ChildCall``, the HITL gates), so the log a durable engine
writes is the log the built-in runtime writes.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

import anyio

from helix_agents.agents.config import AgentConfig, RemoteSubAgentTool, SubAgentTool
from helix_agents.agents.define import AgentRegistry
from helix_agents.agents.tools import COMPANION_TOOL_PREFIX, Tool
from helix_agents.children.call import ChildCall
from helix_agents.children.open_calls import OpenCalls
from helix_agents.companions.parent import Companions
from helix_agents.durable.launches import collect_launches
from helix_agents.durable.plan import (
    CallJob,
    ChildOpened,
    JobDone,
    Plan,
    Round,
    RoundEnd,
    StepInput,
    StopInput,
    ToolPolicy,
)
from helix_agents.errors import HelixError, StoreClosedError, StoreError, UsageError
from helix_agents.events import (
    Aborted,
    AbortRequested,
    Completed,
    ErrorChunk,
    Event,
    Failed,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    OutputChunk,
    ToolEnd,
    ToolStart,
)
from helix_agents.hitl.gates import Waiting, approval_gate, client_call, suspension
from helix_agents.log.projections import interrupted_step
from helix_agents.log.state import SessionState
from helix_agents.messages import AssistantMessage, ToolCall, UserMessage
from helix_agents.models.base import FINISH_TOOL_NAME, LLMError
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.run_loop import SessionRun
from helix_agents.runtime.tool_runner import (
    ToolOutcome,
    result_events,
    run_tool_call,
    tool_end,
    tool_start,
    validate_finish,
)
from helix_agents.runtime.turns import FINISH_REMINDER, unanswered_calls
from helix_agents.runtime.writer import SessionWriter, StopRequest

__all__ = ["Beat", "DurableSteps", "StepFailed", "plan_of", "refuse_unsupported"]

log = logging.getLogger("helix_agents.durable")

T = TypeVar("T")
Beat = Callable[[Any], None]
"""``beat(progress)``: tell the engine a step is alive (Temporal: an activity heartbeat)."""
_STOP_KINDS: tuple[type[Event], ...] = (InterruptRequested, AbortRequested)


class StepFailed(HelixError):
    """A step that can never succeed (no such session, an agent this worker lacks): no retry."""


def refuse_unsupported(registry: AgentRegistry) -> set[str]:
    """Refuse what the durable steps do not run yet; the names of the agents' tools.

    Raises:
        UsageError: an agent with workspaces (the seed's guard for durable runtimes),
            or with a tool whose pending input expires (``expires_in``: no timer
            answers it).
    """
    known: set[str] = set()
    for name in registry.names():
        agent = registry.get(name)
        assert agent is not None
        if agent.workspaces:
            raise UsageError(
                f"agent {name!r} declares workspaces: the durable runtimes cannot host "
                "a workspace's lifecycle (run it on the built-in runtime)"
            )
        for tool in agent.tools:
            if getattr(tool, "expires_in", None) is not None:
                raise UsageError(
                    f"tool {tool.name!r} of agent {name!r} sets expires_in: the durable "
                    "runtimes do not expire pending inputs yet (leave it unset)"
                )
            known.add(tool.name)
    return known


def plan_of(state: SessionState) -> Plan:
    """Where ``state`` stands: what its workflow does next."""
    stop = "abort" if state.abort_requested else "interrupt" if state.interrupt_requested else None
    running = state.status == "running"
    return Plan(
        session_id=state.session_id,
        seq=state.last_seq,
        status=state.status,
        stop=stop if running else None,
        stop_reason=state.stop_reason if running else None,
        calls=running and bool(unanswered_calls(state)),
    )


def _no_beat(progress: Any) -> None:
    return None


class _Stop:
    """Cancels a step's scope when its session's log asks the run to stop."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None

    def __call__(self, request: StopRequest) -> None:
        if self.scope is not None:
            self.scope.cancel()


class DurableSteps:
    """The steps of the sessions of ``executor``'s agents, on its store (see the module doc).

    Args:
        executor: where the agents, the store, the models and the local
            transport come from (its task group must be open while steps run).
        tool_policies: a :class:`ToolPolicy` by tool name (retries, timeout).
        default_policy: the policy of the other tools.
        beat_every: seconds between a long step's heartbeats.

    Raises:
        UsageError: an agent uses what the durable steps do not run yet
            (workspaces, expiring inputs), or a policy names no tool.
    """

    def __init__(
        self,
        executor: AgentExecutor,
        *,
        tool_policies: Mapping[str, ToolPolicy] | None = None,
        default_policy: ToolPolicy | None = None,
        beat_every: float = 1.0,
    ) -> None:
        self.executor = executor
        self._policies = dict(tool_policies or {})
        self._default = default_policy or ToolPolicy()
        self._beat_every = beat_every
        known = refuse_unsupported(executor.registry)
        unknown = sorted(set(self._policies) - known)
        if unknown:
            raise UsageError(f"tool_policies name tools no agent has: {', '.join(unknown)}")

    # --- plumbing -----------------------------------------------------------------------

    async def _open(
        self, session_id: str, stop: _Stop | None = None
    ) -> tuple[AgentConfig, SessionWriter, list[Event]]:
        store = self.executor.store
        log_ = await store.read(session_id)
        if not log_:
            raise StepFailed(f"session {session_id!r} not found")
        writer = SessionWriter(store, log_, host_id=self.executor.env.host_id, on_stop=stop)
        agent = self.executor.registry.get(writer.state.agent_type)
        if agent is None:
            raise StepFailed(f"agent type {writer.state.agent_type!r} is not on this worker")
        return agent, writer, log_

    def _run(self, agent: AgentConfig, writer: SessionWriter) -> SessionRun:
        return SessionRun(self.executor.env, agent, writer, writer.state.run_id)

    def _companions(self, agent: AgentConfig, writer: SessionWriter) -> Companions | None:
        if not agent.persistent_agents:
            return None
        fire = self._run(agent, writer).fire
        return Companions(writer, agent, self.executor.env, fire, OpenCalls())

    async def _guarded(
        self,
        writer: SessionWriter,
        stop: _Stop,
        body: Callable[[], Awaitable[T]],
        beat: Beat,
        progress: Callable[[], Any] = lambda: None,
    ) -> T | None:
        """Run ``body`` with the writer's flusher, a stop watcher and heartbeats.

        Returns None when a stop request in the log cut it short.
        """
        result: list[T] = []
        try:
            async with anyio.create_task_group() as tg:
                stop.scope = tg.cancel_scope
                tg.start_soon(writer.flush_forever)
                tg.start_soon(self._watch, writer, stop)
                tg.start_soon(self._beat, beat, progress)
                result.append(await body())
                tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            raise _first(group) from None
        return result[0] if result else None

    async def _watch(self, writer: SessionWriter, stop: _Stop) -> None:
        store = self.executor.store
        seen = writer.last_seq
        failures = 0
        while True:
            try:
                async for event in store.tail(writer.session_id, seen, kinds=_STOP_KINDS):
                    seen = event.seq
                    stop(StopRequest("interrupt", None))
            except StoreClosedError:
                raise
            except StoreError as error:
                log.warning("watching %s: %s; watching again", writer.session_id, error)
                await anyio.sleep(min(0.05 * 2**failures, 2.0))
                failures += 1

    async def _beat(self, beat: Beat, progress: Callable[[], Any]) -> None:
        while True:
            beat(progress())
            await anyio.sleep(self._beat_every)

    def policy(self, tool_name: str) -> ToolPolicy:
        """The retry policy of tool ``tool_name``'s steps."""
        return self._policies.get(tool_name, self._default)

    # --- the run ----------------------------------------------------------------------

    async def begin(self, step: StepInput) -> Plan:
        """A run begins: fire ``on_agent_start`` (at least once) and say what is due."""
        agent, writer, _log = await self._open(step.session_id)
        if writer.state.status == "running":
            await self._run(agent, writer).fire("on_agent_start")
        return plan_of(writer.state)

    async def model_step(self, step: StepInput, beat: Beat = _no_beat) -> Plan:
        """One model call, recorded once (a retry after it was recorded calls nothing)."""
        stop = _Stop()
        agent, writer, log_ = await self._open(step.session_id, stop)
        state = writer.state
        if state.status != "running" or plan_of(state).stop or unanswered_calls(state):
            return plan_of(state)
        if _stepped_since(log_, step.seq):
            return plan_of(state)
        if state.run_step_count >= agent.max_steps:
            await self._fail(agent, writer, f"max steps ({agent.max_steps}) reached")
            return plan_of(writer.state)
        run = self._run(agent, writer)
        restart = interrupted_step(log_)
        if restart is not None:
            writer.emit(restart)  # the cut step runs again: its partial text is void
        companions = self._companions(agent, writer)

        async def body() -> None:
            if companions is not None:
                # Children's outcomes not yet seen reach the model first (push).
                await companions.deliver()
            try:
                response = await run.step()
            except LLMError as error:
                await self._fail(agent, writer, str(error), recoverable=error.retryable)
                return
            if response is not None and not response.tool_calls and agent.output_schema:
                await writer.append(MessageAppended(message=UserMessage(content=FINISH_REMINDER)))

        await self._guarded(writer, stop, body, beat)
        return plan_of(writer.state)

    async def round_open(self, step: StepInput) -> Round:
        """Route the last turn's unanswered calls: record the inline ones, return the jobs."""
        agent, writer, _log = await self._open(step.session_id)
        opened = Round(seq=writer.last_seq)
        if writer.state.status != "running":
            return opened
        sid = writer.session_id
        for call in unanswered_calls(writer.state):
            tool = agent.tool(call.name)
            if call.name == FINISH_TOOL_NAME and agent.output_schema is not None:
                outcome = validate_finish(agent, call.arguments)
                shown = (
                    outcome if outcome.error is not None else ToolOutcome(result="output accepted")
                )
                await writer.append(
                    tool_start(agent, sid, call),
                    *result_events(agent, sid, call, shown, usage=False),
                )
                continue
            if agent.persistent_agents and call.name.startswith(COMPANION_TOOL_PREFIX):
                opened.jobs.append(CallJob(call.id, call.name, "companion"))
                continue
            if tool is None:
                await writer.append(
                    tool_start(agent, sid, call),
                    *result_events(
                        agent,
                        sid,
                        call,
                        ToolOutcome(error=f"unknown tool {call.name!r}"),
                        usage=False,
                    ),
                )
                continue
            gate = await approval_gate(writer, agent, call, tool)
            if gate == "wait":
                opened.approval.append(call.id)
            elif gate == "done":
                continue
            elif isinstance(tool, SubAgentTool):
                opened.jobs.append(CallJob(call.id, call.name, "child"))
            elif isinstance(tool, RemoteSubAgentTool):
                opened.jobs.append(CallJob(call.id, call.name, "remote"))
            elif tool.is_client_tool:
                if await client_call(writer, agent, call, tool):
                    opened.client.append(call.id)
            else:
                opened.jobs.append(CallJob(call.id, call.name, "tool", self.policy(call.name)))
        opened.seq = writer.last_seq
        return opened

    async def tool_call(self, step: StepInput, beat: Beat = _no_beat) -> JobDone:
        """Run one regular tool call, unless its result is already recorded."""
        stop = _Stop()
        agent, writer, _log = await self._open(step.session_id, stop)
        call = _unanswered(writer.state, step.call_id)
        tool = agent.tool(call.name) if call is not None else None
        if call is None or not isinstance(tool, Tool) or not _goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        run = self._run(agent, writer)
        await self._guarded(
            writer, stop, lambda: run_tool_call(agent, writer, call, tool, run.fire), beat
        )
        return JobDone(writer.last_seq, step.call_id)

    async def tool_failed(self, step: StepInput, error: str) -> JobDone:
        """Record a tool call whose every attempt failed (its steps' retries spent) as an error."""
        agent, writer, log_ = await self._open(step.session_id)
        call = _unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return JobDone(writer.last_seq, step.call_id)
        sid = writer.session_id
        started = call.id in _open_tool_starts(log_)
        await writer.append(
            *([] if started else [tool_start(agent, sid, call)]),
            *result_events(agent, sid, call, ToolOutcome(error=error), usage=False),
        )
        return JobDone(writer.last_seq, step.call_id)

    async def round_close(self, end: RoundEnd) -> Plan:
        """End a round: complete on a valid ``__finish__``, suspend for people, or go on."""
        agent, writer, _log = await self._open(end.session_id)
        state = writer.state
        if state.status != "running":
            return plan_of(state)
        output = _finished(agent, state)
        if output is not None:
            completion = self._completion(agent, writer, output[0])
            state = await writer.append_with(
                lambda latest: [] if latest.queued_messages else completion
            )
            if state.status == "completed":
                await self._run(agent, writer).fire("on_agent_complete", output[0])
            return plan_of(state)
        waiting = Waiting(client=end.client, approval=end.approval, children=end.children)
        if waiting:
            await writer.append_with(suspension(agent, waiting))
        return plan_of(writer.state)

    # --- children -----------------------------------------------------------------------

    def _child(self, agent: AgentConfig, writer: SessionWriter, call: ToolCall) -> ChildCall:
        tool = agent.tool(call.name)
        if not isinstance(tool, SubAgentTool | RemoteSubAgentTool):
            raise StepFailed(f"call {call.id!r} ({call.name}) is not a sub-agent call")
        return ChildCall(
            writer, agent, call, tool, self.executor.env, self._run(agent, writer).fire
        )

    async def child_open(self, step: StepInput) -> ChildOpened:
        """Open a local child call; the child's run it needs is returned, not launched here."""
        agent, writer, _log = await self._open(step.session_id)
        call = _unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return ChildOpened(writer.last_seq, "", open=False)
        child = self._child(agent, writer, call)
        with collect_launches() as launches:
            opened = await child.open()
            await self.executor.runs.wait_idle(child.session_id)  # its launch is handed over
        await writer.append()  # the call's records, written behind by the open
        seqs = [launch.seq for launch in launches if launch.session_id == child.session_id]
        return ChildOpened(
            writer.last_seq, child.session_id, open=opened, launch_seq=max(seqs) if seqs else None
        )

    async def child_follow(self, step: StepInput, beat: Beat = _no_beat) -> JobDone:
        """Follow an opened local child to its end (or suspension) and record the call's result."""
        stop = _Stop()
        agent, writer, _log = await self._open(step.session_id, stop)
        call = _unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return JobDone(writer.last_seq, step.call_id)
        if not _goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        child = self._child(agent, writer, call)
        child.opened = True
        suspended = await self._guarded(
            writer, stop, child.conclude, beat, lambda: writer.held_child_seq(child.session_id)
        )
        return JobDone(writer.last_seq, step.call_id, child.session_id if suspended else None)

    async def remote_child(self, step: StepInput, beat: Beat = _no_beat) -> JobDone:
        """A remote sub-agent call: deterministic id, status first, resumed from the seq held.

        The call's child id is ``{parent}-remote-{call id}``; a retried step re-opens
        it from what the parent's log holds (the status decides: completed -> its
        output, no re-run; running -> follow from the last seq held; failed -> its
        error). A stream that drops more often in a row than the tool's
        ``stream_retries`` raises :class:`~helix_agents.errors.StreamDropError`:
        the engine retries the step. ``progress`` given to ``beat`` is the last
        child seq the parent's log holds.
        """
        stop = _Stop()
        agent, writer, _log = await self._open(step.session_id, stop)
        call = _unanswered(writer.state, step.call_id)
        if call is None or writer.state.status != "running":
            return JobDone(writer.last_seq, step.call_id)
        if not _goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        child = self._child(agent, writer, call)

        async def body() -> bool:
            return await child.open() and await child.conclude(raise_drops=True)

        def held() -> int:
            ref = writer.state.sub_sessions.get(child.session_id)
            return ref.last_child_seq if ref is not None else 0

        suspended = await self._guarded(writer, stop, body, beat, held)
        return JobDone(writer.last_seq, step.call_id, child.session_id if suspended else None)

    async def companion_call(self, step: StepInput, beat: Beat = _no_beat) -> JobDone:
        """One companion tool call (a blocking spawn follows its child here, heartbeating)."""
        stop = _Stop()
        agent, writer, _log = await self._open(step.session_id, stop)
        call = _unanswered(writer.state, step.call_id)
        companions = self._companions(agent, writer)
        if call is None or companions is None or not _goes_on(writer.state):
            return JobDone(writer.last_seq, step.call_id)
        waiting = Waiting()
        await self._guarded(writer, stop, lambda: companions.call(call, waiting), beat)
        return JobDone(
            writer.last_seq,
            step.call_id,
            client=list(waiting.client),
            approval=list(waiting.approval),
            children=dict(waiting.children),
        )

    # --- endings ------------------------------------------------------------------------

    async def stopped(self, request: StopInput) -> Plan:
        """Record a stop: children halted (acknowledged), open tool calls closed, the ending."""
        agent, writer, log_ = await self._open(request.session_id)
        state = writer.state
        if state.status != "running":
            return plan_of(state)  # a paused session was stopped at once by the service
        stop = StopRequest(request.kind, request.reason)
        with anyio.move_on_after(self.executor.env.stop_grace):
            async with anyio.create_task_group() as tg:
                for call in unanswered_calls(state):
                    tool = agent.tool(call.name)
                    if not isinstance(tool, SubAgentTool | RemoteSubAgentTool):
                        continue
                    child = self._child(agent, writer, call)
                    ref = state.sub_sessions.get(child.session_id)
                    if ref is not None and ref.status == "running":
                        child.opened = True
                        tg.start_soon(child.halt, stop)
        companions = self._companions(agent, writer)
        if stop.kind == "abort" and companions is not None:
            # Stopped for good: so are its companions running on their own.
            with anyio.move_on_after(self.executor.env.stop_grace):
                await companions.terminate_live(stop.reason)
        await writer.append()  # what the halts forwarded
        after = _last_turn_seq(log_)
        started = _open_tool_starts(await self.executor.store.read(writer.session_id, after))
        word = "interrupted" if stop.kind == "interrupt" else "aborted"
        sid = writer.session_id
        reason = f"aborted: {stop.reason}" if stop.reason else "aborted"

        def ending(latest: SessionState) -> list[Event]:
            if latest.status != "running":
                return []
            closing = [
                tool_end(agent, sid, call, ToolOutcome(error=word))
                for call in _last_calls(latest)
                if call.id in started
            ]
            asked: list[Event] = []
            if stop.kind == "interrupt":
                if not latest.interrupt_requested:
                    asked.append(InterruptRequested(reason=stop.reason))
                return [*asked, *closing, Interrupted(reason=stop.reason)]
            if not latest.abort_requested:
                asked.append(AbortRequested(reason=stop.reason))
            return [
                *asked,
                *closing,
                ErrorChunk(agent_id=sid, agent_type=agent.name, error=reason),
                Aborted(reason=stop.reason),
            ]

        before = writer.last_seq
        await writer.append_with(ending)
        if stop.kind == "abort" and writer.last_seq > before:
            await self._run(agent, writer).fire("on_agent_fail", reason)
        return plan_of(writer.state)

    async def run_failed(self, step: StepInput, error: str) -> Plan:
        """Fail a run whose step can never succeed (its engine's retries are spent)."""
        agent, writer, _log = await self._open(step.session_id)
        if writer.state.status == "running":
            await self._fail(agent, writer, f"internal error: {error}")
        return plan_of(writer.state)

    def _completion(self, agent: AgentConfig, writer: SessionWriter, output: Any) -> list[Event]:
        sid = writer.session_id
        return [
            OutputChunk(agent_id=sid, agent_type=agent.name, output=output),
            Completed(output=output),
        ]

    async def _fail(
        self, agent: AgentConfig, writer: SessionWriter, error: str, *, recoverable: bool = False
    ) -> None:
        sid = writer.session_id
        await writer.append(
            ErrorChunk(agent_id=sid, agent_type=agent.name, error=error, recoverable=recoverable),
            Failed(error=error, recoverable=recoverable),
        )
        await self._run(agent, writer).fire("on_agent_fail", error)


# --- reading the log ----------------------------------------------------------------------


def _first(group: BaseExceptionGroup[Any]) -> BaseException:
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def _goes_on(state: SessionState) -> bool:
    """Whether a call's step may run: the session runs and no stop request waits."""
    return state.status == "running" and plan_of(state).stop is None


def _unanswered(state: SessionState, call_id: str) -> ToolCall | None:
    for call in unanswered_calls(state):
        if call.id == call_id:
            return call
    return None


def _last_calls(state: SessionState) -> list[ToolCall]:
    return unanswered_calls(state)


def _stepped_since(log_: list[Event], seq: int) -> bool:
    """Whether the log holds a model turn (or an ending) after ``seq``: the step was done."""
    for event in reversed(log_):
        if event.seq <= seq:
            return False
        if isinstance(event, Completed | Failed) or (
            isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage)
        ):
            return True
    return False


def _last_turn_seq(log_: list[Event]) -> int:
    for event in reversed(log_):
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage):
            return event.seq
    return 0


def _open_tool_starts(events: list[Event]) -> set[str]:
    """Ids of calls with a ``tool_start`` and no ``tool_end`` after the last model turn."""
    started: set[str] = set()
    for event in events[_last_turn_index(events) :]:
        if isinstance(event, ToolStart):
            started.add(event.tool_call_id)
        elif isinstance(event, ToolEnd):
            started.discard(event.tool_call_id)
    return started


def _last_turn_index(events: list[Event]) -> int:
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage):
            return index
    return 0


def _finished(agent: AgentConfig, state: SessionState) -> tuple[Any] | None:
    """The output of the last turn's valid ``__finish__`` call, if it has one."""
    if agent.output_schema is None:
        return None
    for message in reversed(state.messages):
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                if call.name == FINISH_TOOL_NAME:
                    outcome = validate_finish(agent, call.arguments)
                    if outcome.error is None:
                        return (outcome.result,)
            return None
    return None
