"""``StepKit``: what every durable step does around its work.

It opens the session (its log, a writer over it, its agent, its workspaces
for the steps that use tools), and runs a long
step's body with the writer's flusher (streamed chunks committed as they
come), a watcher that cuts the body when the log asks the run to stop, and
the engine's heartbeat.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio

from helix_agents.agents.config import AgentConfig, RemoteSubAgentTool, SubAgentTool
from helix_agents.children.call import ChildCall
from helix_agents.children.open_calls import OpenCalls
from helix_agents.companions.parent import Companions
from helix_agents.engines.durable.plan import StepInput
from helix_agents.engines.durable.reading import StepFailed, first_error
from helix_agents.errors import StoreClosedError, StoreError
from helix_agents.events import (
    AbortRequested,
    Event,
    InterruptRequested,
    RunStarted,
    SessionCreated,
)
from helix_agents.messages import ToolCall
from helix_agents.runtime.actions import RunActions
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.writer import SessionWriter, StopRequest
from helix_agents.tracing import Span, run_span

__all__ = ["Beat", "StepKit", "StopWatch", "no_beat"]

log = logging.getLogger("helix_agents.engines.durable")

T = TypeVar("T")
Beat = Callable[[Any], None]
"""``beat(progress)``: tell the engine a step is alive (Temporal: an activity heartbeat)."""
_STOP_KINDS: tuple[type[Event], ...] = (InterruptRequested, AbortRequested)


def no_beat(progress: Any) -> None:
    """A ``Beat`` for an engine without heartbeats."""
    return None


class StopWatch:
    """Cancels a step's scope when its session's log asks the run to stop."""

    def __init__(self) -> None:
        self.scope: anyio.CancelScope | None = None

    def __call__(self, request: StopRequest) -> None:
        if self.scope is not None:
            self.scope.cancel()


class StepKit:
    """The steps' shared plumbing over ``executor`` (heartbeats every ``beat_every`` s)."""

    def __init__(self, executor: AgentExecutor, beat_every: float = 1.0) -> None:
        self.executor = executor
        self._beat_every = beat_every

    async def open(
        self, session_id: str, stop: StopWatch | None = None
    ) -> tuple[AgentConfig, SessionWriter, list[Event]]:
        """The session's agent, a writer over its log (``stop`` hears stop requests), the log.

        The agent comes with its toolsets' tools, as a run's does: the executor
        keeps each toolset open and shared (a toolset that will not open fails
        the step, which the engine retries).
        """
        store = self.executor.store
        log_ = await store.read(session_id)
        if not log_:
            raise StepFailed(f"session {session_id!r} not found")
        writer = SessionWriter(store, log_, host_id=self.executor.env.host_id, on_stop=stop)
        agent = self.executor.registry.get(writer.state.agent_type)
        if agent is None:
            raise StepFailed(f"agent type {writer.state.agent_type!r} is not on this worker")
        toolsets = self.executor.env.toolsets
        if agent.toolsets and toolsets is not None:
            agent = await toolsets.expand(agent)
        return agent, writer, log_

    def traced(self, step: StepInput) -> AbstractContextManager[None]:
        """Inside the block, the step's spans are children of its run's span."""
        return self.executor.env.tracer.attached(step.trace)

    def run_span(
        self, agent: AgentConfig, writer: SessionWriter, log_: Sequence[Event]
    ) -> AbstractContextManager[Span]:
        """The ``invoke_agent`` span of the run ``log_`` ends with, under the session's trace."""
        first = log_[0]
        created = first if isinstance(first, SessionCreated) else None
        started = next((e for e in reversed(log_) if isinstance(e, RunStarted)), None)
        return run_span(
            self.executor.env.tracer,
            agent_name=agent.name,
            session_id=writer.session_id,
            run_id=writer.state.run_id,
            mode=started.mode if started is not None else "resume",
            parent_session_id=created.parent_session_id if created is not None else None,
            root_session_id=created.root_session_id if created is not None else None,
            model=agent.llm_config.model,
            trace_context=created.trace_context if created is not None else {},
        )

    @asynccontextmanager
    async def workspaces(
        self, agent: AgentConfig, writer: SessionWriter
    ) -> AsyncIterator[AgentConfig]:
        """``agent`` with its session's ``workspace_*`` tools; its workspaces open meanwhile.

        A step that lists, routes or runs tools (or opens an inheriting child)
        opens the session's workspaces (its own, or the ones it inherits) on
        this worker for the step, as a built-in run does for its loop, and
        closes them after: their files live in the provider between steps.
        """
        async with self.executor.workspaces.session(agent, writer) as equipped:
            yield equipped

    def run(self, agent: AgentConfig, writer: SessionWriter) -> RunActions:
        """What carries out ``writer``'s run's actions (the built-in runtime's), and its hooks."""
        return RunActions(self.executor.env, agent, writer, writer.state.run_id)

    def companions(self, agent: AgentConfig, writer: SessionWriter) -> Companions | None:
        """The companion dispatcher of ``agent``'s run (None without persistent agents)."""
        if not agent.persistent_agents:
            return None
        fire = self.run(agent, writer).fire
        return Companions(writer, agent, self.executor.env, fire, OpenCalls())

    async def guarded(
        self,
        writer: SessionWriter,
        stop: StopWatch,
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
            raise first_error(group) from None
        return result[0] if result else None

    async def _watch(self, writer: SessionWriter, stop: StopWatch) -> None:
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

    def child(self, agent: AgentConfig, writer: SessionWriter, call: ToolCall) -> ChildCall:
        """The ``ChildCall`` of sub-agent call ``call``."""
        tool = agent.tool(call.name)
        if not isinstance(tool, SubAgentTool | RemoteSubAgentTool):
            raise StepFailed(f"call {call.id!r} ({call.name}) is not a sub-agent call")
        return ChildCall(writer, agent, call, tool, self.executor.env, self.run(agent, writer).fire)
