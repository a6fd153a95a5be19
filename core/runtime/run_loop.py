"""``SessionRun``: one run of a session's loop in this process, the built-in driver.

It asks :func:`~helix_agents.runtime.decide.next_action` what comes next and
carries it out (:class:`~helix_agents.runtime.actions.RunActions`): a model
step, a round whose jobs (tools, sub-agents through a transport, companion
calls) run concurrently in one task group, a suspension, a completion or a
failure. The run ends completed, failed, suspended (waiting for people),
interrupted or aborted.

Interrupts and aborts are events in the log. A watcher tails the log and
cancels the run's scope when one arrives; the shielded cleanup then
propagates the stop to every running child through its transport, waits for
each child's acknowledgement, records it on the parent's ``SubSessionRef``,
and appends ``interrupted`` / ``aborted``. Calls cut short keep no result, so
``resume`` picks them up again (children are resumed, not restarted).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from helix_agents._aio import closing_iter, unwrap_group
from helix_agents.agents.config import AgentConfig, RemoteSubAgentTool, SubAgentTool
from helix_agents.agents.tools import Tool
from helix_agents.children.call import ChildCall
from helix_agents.children.open_calls import OpenCalls
from helix_agents.children.target import SubAgentToolLike
from helix_agents.companions.parent import Companions
from helix_agents.errors import (
    HelixError,
    OwnershipLost,
    StoreClosedError,
    StoreError,
    ToolsetError,
)
from helix_agents.events import (
    AbortRequested,
    Event,
    InterruptRequested,
    StepRestarted,
)
from helix_agents.hitl.gates import Waiting, suspension
from helix_agents.messages import ToolCall
from helix_agents.models.base import LLMError
from helix_agents.runtime.actions import RunActions
from helix_agents.runtime.decide import (
    Complete,
    Fail,
    ModelStep,
    RunRound,
    Stop,
    Suspend,
    internal_error,
    next_action,
    stop_ending,
    stop_reason_text,
)
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.tool_runner import ToolOutcome, run_tool_call, tool_end
from helix_agents.runtime.writer import SessionWriter, StopRequest
from helix_agents.tracing import call_error, end_tool_span, tool_span

__all__ = ["SessionRun"]

log = logging.getLogger("helix_agents")

_STOP_REQUESTS: tuple[type[Event], ...] = (InterruptRequested, AbortRequested)


class SessionRun(RunActions):
    """Runs one session until its current run ends, driving :func:`next_action`. Use once."""

    def __init__(
        self,
        env: RunEnv,
        agent: AgentConfig,
        writer: SessionWriter,
        run_id: str,
        *,
        restart: StepRestarted | None = None,
    ) -> None:
        super().__init__(env, agent, writer, run_id)
        self.stop: StopRequest | None = None
        self._scope: anyio.CancelScope | None = None
        self._open = OpenCalls()
        self._companions = (
            Companions(writer, agent, env, self.fire, self._open)
            if agent.persistent_agents
            else None
        )
        self._restart = restart

    # --- control ----------------------------------------------------------------

    def request_stop(self, request: StopRequest) -> None:
        """Stop the run (an abort overrides an interrupt). Safe to call repeatedly."""
        if self.stop is None or request.kind == "abort":
            self.stop = request
        if self._scope is not None:
            self._scope.cancel()

    async def run(self) -> None:
        """Run until the run ends; never raises except for cancellation of the executor."""
        if self._restart is not None:
            # The cut step runs again: first tell readers its partial text is void.
            self.writer.emit(self._restart)
        await self.fire("on_agent_start")
        state = self.writer.state
        if state.abort_requested:
            self.request_stop(StopRequest("abort", state.stop_reason))
        elif state.interrupt_requested:
            self.request_stop(StopRequest("interrupt", state.stop_reason))
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                if self.stop is not None:
                    scope.cancel()
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._watch)
                    tg.start_soon(self.writer.flush_forever)
                    await self._loop()
                    tg.cancel_scope.cancel()
        except BaseExceptionGroup as group:
            error = unwrap_group(group)
            if not isinstance(error, Exception):
                raise
            await self._crashed(error)
            return
        except Exception as error:
            await self._crashed(error)
            return
        if self.stop is not None:
            try:
                await self._stopped(self.stop)
            except HelixError as error:  # the store failed: this run ends, the others go on
                log.error("could not record the end of run %s: %s", self.run_id, error)

    async def _crashed(self, error: Exception) -> None:
        if isinstance(error, OwnershipLost):
            log.warning("stopping run %s: %s", self.run_id, error)
            return
        log.exception("run %s of %s crashed", self.run_id, self.writer.session_id, exc_info=error)
        try:
            with anyio.CancelScope(shield=True):
                await self.fail(internal_error(type(error).__name__, str(error)))
        except HelixError as failure:
            # Recording the failure failed too (the store is closed or broken):
            # this run ends here; the executor and its other runs go on.
            log.error("could not record the failure of run %s: %s", self.run_id, failure)

    async def _watch(self) -> None:
        """Stop the run on an interrupt or abort request appended to its log.

        A tail that fails (the store lost its server for a moment: a NATS node
        died) is opened again from the last event it gave, with backoff: a
        watcher's hiccup never ends a healthy run.
        """
        # Nobody can append to a session before its start is in the store; from
        # then on the tail begins where the writer's commit left the log, which
        # the store knows without a read.
        await self.writer.start_settled()
        store = self.env.store
        seen = self.writer.last_seq
        failures = 0
        while True:
            try:
                # Only stop requests: the run's own appends do not wake the watcher.
                tail = store.tail(self.writer.session_id, seen, kinds=_STOP_REQUESTS)
                async with closing_iter(tail) as events:
                    async for event in events:
                        seen, failures = event.seq, 0
                        if isinstance(event, InterruptRequested):
                            self.request_stop(StopRequest("interrupt", event.reason))
                        elif isinstance(event, AbortRequested):
                            self.request_stop(StopRequest("abort", event.reason))
                return  # pragma: no cover - a tail ends only when closed
            except StoreClosedError:
                raise
            except StoreError as error:
                log.warning("watching run %s: %s; watching again", self.run_id, error)
                await anyio.sleep(min(0.05 * 2**failures, 2.0))
                failures += 1

    # --- the loop -----------------------------------------------------------------

    async def _loop(self) -> None:
        if self.agent.toolsets and self.env.toolsets is not None:
            # The toolsets' tools as they are now serve the whole run.
            try:
                self.agent = await self.env.toolsets.expand(self.agent)
            except ToolsetError as error:
                await self.fail(str(error), recoverable=True)
                return
        waiting: Waiting | None = None
        while True:
            action = next_action(self.agent, self.writer.state, waiting)
            waiting = None
            if isinstance(action, ModelStep):
                if self._companions is not None:
                    # Children's outcomes not yet seen reach the model first (push).
                    await self._companions.deliver()
                try:
                    await self.step()
                except LLMError as error:
                    await self.fail(str(error), recoverable=error.retryable)
            elif isinstance(action, RunRound):
                waiting = await self._round(action.calls)
            elif isinstance(action, Suspend):
                await self.writer.append_with(suspension(self.agent, action.waiting))
            elif isinstance(action, Complete):
                await self.complete(action.output)
            elif isinstance(action, Fail):
                await self.fail(action.error, recoverable=action.recoverable)
            elif isinstance(action, Stop):
                self.request_stop(StopRequest(action.kind, action.reason))
                return
            else:
                return  # over: paused, completed, failed

    async def _round(self, calls: list[ToolCall]) -> Waiting:
        """Route the calls, then run the jobs concurrently; what waits for people."""
        routed = await self.route(calls)
        waiting = routed.waiting
        async with anyio.create_task_group() as tg:
            for call, kind in routed.jobs:
                tool = self.agent.tool(call.name)
                if kind == "companion":
                    tg.start_soon(self._call_companion, call, waiting)
                elif isinstance(tool, SubAgentTool | RemoteSubAgentTool):
                    tg.start_soon(self._call_sub_agent, call, tool, waiting)
                elif tool is not None:
                    tg.start_soon(self._call_tool, call, tool)
        return waiting

    async def _call_tool(self, call: ToolCall, tool: Tool[Any]) -> None:
        # Not forgotten on cancellation: the stop cleanup closes it with a tool_end.
        self._open.open_tool(call)
        with tool_span(self.env.tracer, self.agent.name, self.writer.session_id, call) as span:
            outcome = await run_tool_call(
                self.agent, self.writer, call, tool, self.fire, self.env.memory
            )
            end_tool_span(span, outcome.error)
        self._open.close_tool(call.id)

    async def _call_sub_agent(
        self, call: ToolCall, tool: SubAgentToolLike, waiting: Waiting
    ) -> None:
        child = ChildCall(self.writer, self.agent, call, tool, self.env, self.fire)
        # Registered before it opens: the stop cleanup halts it if it is open.
        self._open.follow(child)
        with child.span() as span:
            if await child.run():
                waiting.children[child.session_id] = call.id
            end_tool_span(span, call_error(self.writer.state, call.id))
        self._open.drop(child.session_id)

    async def _call_companion(self, call: ToolCall, waiting: Waiting) -> None:
        assert self._companions is not None
        with tool_span(self.env.tracer, self.agent.name, self.writer.session_id, call) as span:
            await self._companions.call(call, waiting)
            end_tool_span(span, call_error(self.writer.state, call.id))

    # --- endings --------------------------------------------------------------------

    async def _stopped(self, stop: StopRequest) -> None:
        """Propagate the stop to children, close open tool calls, record the end. Shielded."""
        word = "interrupted" if stop.kind == "interrupt" else "aborted"
        sid = self.writer.session_id
        with anyio.CancelScope(shield=True):
            with anyio.move_on_after(self.env.stop_grace):
                async with anyio.create_task_group() as tg:
                    for child in self._open.children():
                        tg.start_soon(child.halt, stop)
                    if stop.kind == "abort" and self._companions is not None:
                        # Stopped for good: so are its companions running on their own.
                        tg.start_soon(self._companions.terminate_live, stop.reason)
            closing: list[Event] = [
                tool_end(self.agent, sid, call, ToolOutcome(error=word))
                for call in self._open.take_tools()
            ]
            ending = stop_ending(self.agent, sid, stop.kind, stop.reason, closing)

            before = self.writer.last_seq
            # Nothing when the run had already ended as the stop arrived.
            await self.writer.append_with(lambda state: [] if state.is_terminal else ending)
            error = stop_reason_text(stop.kind, stop.reason)
            if error is not None and self.writer.last_seq > before:
                await self.fire("on_agent_fail", error)
