"""``AgentServer``: hosts agents for remote callers (the seeds' AgentServer API).

A thin layer over :class:`~helix_agents.AgentExecutor`, which holds the
semantics (idempotent start by compare-and-append, interrupts as log events):
it builds the executor from an ``{agent type: agent}`` map, owns its lifetime,
and turns unexpected failures into ``INTERNAL_ERROR``. Front it with
``create_http_app`` (HTTP+SSE) or the NATS host.

Which runtime runs the sessions is said when the server is built
(``runtime=``: the built-in one by default, ``TemporalRuntime``,
``DbosRuntime``, a NATS fleet's ``NatsRuntime``). Every start and resume of a
session here (a request's, an answer's that resumes it, a local child's, an
expiry timer's, ``recover()``'s) runs inside the runtime's run guard when it
has one: a NATS fleet takes the session's lease there, before the run can
begin (``specs/nats.md``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import anyio
import anyio.abc

from helix_agents import AgentConfig, AgentExecutor, EventStore, LLMAdapter
from helix_agents._aio import closing_iter
from helix_agents.errors import AgentServerError, HelixError, UsageError
from helix_agents.ids import SessionId
from helix_agents.log.streaming import open_session_stream
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
    checked_session_id,
)
from helix_agents.runtime import RunGuard, Runtime
from helix_agents.schedules import DEFAULT_POLL, Scheduler, Schedules
from helix_agents.tracing import Tracer
from helix_agents.workspaces import WorkspaceProvider

from .webhooks import WebhookDeliverer, WebhookSettings

__all__ = ["AgentServer", "RunGuard"]

log = logging.getLogger("helix_agents.server")

T = TypeVar("T")


class AgentServer:
    """Runs agents on a store for remote callers.

    Use it as ``async with AgentServer(...) as server:`` (``create_http_app``
    does this in its lifespan when it is the app being served).

    Args:
        agents: ``{agent type: agent}`` (each key must be the agent's name) or
            an iterable of agents.
        store: where session logs live.
        executor: an executor to run them on (its lifetime is then yours);
            by default the server makes and owns one.
        llm: the default model for agents that have none.
        recover: on entering, resume the sessions a previous process left
            running on this store (see ``AgentExecutor.recover``); unset, unless
            the runtime recovers them itself (a durable engine).
        owns_store: close ``store`` on leaving (for a server that opened it).
        workspace_providers: the workspace provider of each kind, for the
            executor the server makes (give them to your executor instead
            when you pass one).
        workspace_provider_kinds: the workspace kinds you declare wired. Given
            (strict), construction raises ``AgentServerError`` code
            ``WORKSPACE_WIRING`` naming every agent (sub-agents included) whose
            workspace kinds it does not cover, or a listed kind the executor
            has no provider for. Unset (soft), a warning is logged when an
            agent declares workspaces (seed 000, "Workspace Wiring").
        tracer: traces the runs of the executor the server makes
            (``helix_agents.otel.OtelTracer()``; specs/otel.md).
        runtime: which runtime runs the sessions, for the executor the server
            makes (``AgentExecutor``'s ``runtime``); unset, the built-in one.
        webhooks: accept starts that name a webhook and deliver them, signed with
            its secret (``serve --webhook-secret``; specs/server.md "Webhooks");
            unset, such a start is ``INVALID_REQUEST``.
        run_schedules: fire the store's schedules (:attr:`schedules`) while open
            (``serve`` and a fleet's hosts do; specs/server.md, "Schedules").
        schedule_poll: the longest wait between two reads of the schedules log.

    Raises:
        UsageError: an option that does nothing here (``runtime``, ``llm``, ``tracer``
            or ``workspace_providers`` with an ``executor``; ``recover=True`` on a
            runtime that recovers its sessions itself), or what the executor refuses.
    """

    def __init__(
        self,
        agents: Mapping[str, AgentConfig] | Iterable[AgentConfig],
        store: EventStore,
        *,
        executor: AgentExecutor | None = None,
        llm: LLMAdapter | None = None,
        recover: bool | None = None,
        owns_store: bool = False,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        workspace_provider_kinds: Iterable[str] | None = None,
        tracer: Tracer | None = None,
        runtime: Runtime | None = None,
        webhooks: WebhookSettings | None = None,
        run_schedules: bool = False,
        schedule_poll: float = DEFAULT_POLL,
    ) -> None:
        if isinstance(agents, Mapping):
            for key, agent in agents.items():
                if key != agent.name:
                    raise UsageError(f"agent {agent.name!r} is registered under key {key!r}")
            agent_list = list(agents.values())
        else:
            agent_list = list(agents)
        self.store = store
        self._owns_executor = executor is None
        if executor is None:
            executor = AgentExecutor(
                store,
                agent_list,
                llm=llm,
                workspace_providers=workspace_providers,
                workspace_provider_kinds=workspace_provider_kinds,
                tracer=tracer,
                runtime=runtime,
            )
        elif runtime is not None:
            raise UsageError("give the runtime to the executor you pass, not to the AgentServer")
        elif llm is not None:
            raise UsageError("give the model to the executor you pass, not to the AgentServer")
        elif tracer is not None:
            raise UsageError("give the tracer to the executor you pass, not to the AgentServer")
        elif workspace_providers is not None:
            raise UsageError(
                "give workspace_providers to the executor you pass, not to the AgentServer"
            )
        else:
            for agent in agent_list:
                executor.registry.register(agent)
            executor.workspaces.check_wiring(executor.registry, workspace_provider_kinds)
            executor.require_models()
        self.executor = executor
        self.agent_types = sorted(agent.name for agent in agent_list)
        """The agent types callers may start (sub-agents are reachable only through them)."""
        self._running = False
        recovers_itself = executor.runtime is not None and executor.runtime.recovers_sessions
        if recover and recovers_itself:
            raise UsageError("recover=True does nothing here: the runtime recovers its sessions")
        self._recover = not recovers_itself if recover is None else recover
        self._owns_store = owns_store
        self.webhooks: WebhookDeliverer | None = None
        """Delivers the webhooks of the sessions on the store (None: no webhooks here)."""
        self._webhook_tasks: anyio.abc.TaskGroup | None = None
        if webhooks is not None:
            self.deliver_webhooks(webhooks)
        engine = getattr(executor.runtime, "engine_schedules", None)
        self.schedules = Schedules(store, self.agent_types, engine)
        """The store's schedules (``helix_agents.schedules``): what ``POST /crons`` changes."""
        self._scheduler: Scheduler | None = None
        if run_schedules:
            self.fire_schedules(schedule_poll)

    def deliver_webhooks(self, settings: WebhookSettings) -> None:
        """Accept starts naming a webhook and deliver them (before the server is entered)."""
        if self._running:
            raise UsageError("deliver_webhooks() is for a server not yet entered")
        self.webhooks = WebhookDeliverer(self.store, settings)
        self.executor.service.webhook_gate = self.webhooks

    def fire_schedules(self, poll: float = DEFAULT_POLL) -> None:
        """Fire the store's schedules while the server is open (call before entering it).

        Not on a runtime whose engine fires them itself (Temporal, DBOS): there
        ``POST /crons`` makes the engine's own schedule instead.
        """
        if self._scheduler is None and self.schedules.engine is None:
            self._scheduler = Scheduler(self.schedules, self, poll=poll)

    @property
    def running(self) -> bool:
        """True inside ``async with`` (or when the executor is managed by the caller)."""
        return self._running or not self._owns_executor

    async def __aenter__(self) -> AgentServer:
        if self._owns_executor:
            await self.executor.__aenter__()
        self._running = True
        if self.webhooks is not None:
            self._webhook_tasks = anyio.create_task_group()
            await self._webhook_tasks.__aenter__()
            self._webhook_tasks.start_soon(self.webhooks.run)
        if self._recover:
            recovered = await self.executor.recover()
            if recovered:
                log.info("resumed %d session(s) left running: %s", len(recovered), recovered)
        if self._scheduler is not None:  # after recovery: a tick's run starts on a settled store
            await self._scheduler.__aenter__()
        if self.schedules.engine is not None:  # an engine's schedules missed by a crash
            try:
                await self.schedules.sync_engine()
            except Exception as exc:  # the next change or start tries again
                log.warning("could not sync the engine's schedules: %s", exc)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._running = False
        tasks, self._webhook_tasks = self._webhook_tasks, None
        if tasks is not None:  # deliveries left due are made after a restart (the log says so)
            tasks.cancel_scope.cancel()
            await tasks.__aexit__(None, None, None)
        try:
            if self._scheduler is not None:  # no tick starts on an executor that is closing
                await self._scheduler.__aexit__(None, None, None)
            if self._owns_executor:
                return await self.executor.__aexit__(exc_type, exc, tb)
            return None
        finally:
            if self._owns_store:
                await self.store.close()

    async def _call(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        try:
            return await fn(*args)
        except (HelixError, ValueError):
            raise
        except Exception as exc:
            log.exception("agent server failed in %s", getattr(fn, "__name__", fn))
            raise AgentServerError("INTERNAL_ERROR", f"{type(exc).__name__}: {exc}") from exc

    @property
    def run_guard(self) -> RunGuard | None:
        """The executor's guard around every start and resume (see ``AgentExecutor.run_guard``)."""
        return self.executor.run_guard

    # The protocol, as a ``RemoteAgentTransport`` (the gateway and the NATS host
    # talk to this), over the executor's one implementation of it.

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session (idempotent); only the server's agent types may be started.

        Codes as ``ExecutorService.start``; an unexpected failure is ``INTERNAL_ERROR``.
        """
        checked_session_id(request.session_id)
        if request.agent_type not in self.agent_types:
            raise AgentServerError("NOT_FOUND", f"agent type not found: {request.agent_type}")
        return await self._call(self.executor.service.start, request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume an interrupted or paused session."""
        answer = await self._call(self.executor.service.resume, request)
        self._moved(answer.session_id)
        return answer

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Send a follow-up message: a new turn of a completed session (codes as the service)."""
        answer = await self._call(self.executor.service.send_message, request)
        self._moved(answer.session_id)
        return answer

    def _moved(self, session_id: str) -> None:
        """A request ran the session again: follow it for webhooks (if it has one)."""
        if self.webhooks is not None and self._running:
            self.webhooks.watch(session_id)

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream from ``from_sequence``; ``NOT_FOUND`` for an unknown session."""
        async with closing_iter(self.executor.service.stream(session_id, from_sequence)) as events:
            async for event in events:
                yield event

    async def open_stream(
        self, session_id: SessionId, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream, opened with one read of its log; ``NOT_FOUND`` now if unknown.

        For an edge that has checked the id (and ``from_sequence >= 0``): the
        store's own check is the only one after that.
        """
        store = self.executor.store
        return await self._call(open_session_stream, store, session_id, from_sequence)

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status, including ``latest_sequence``."""
        return await self._call(self.executor.service.get_status, session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt a session, wherever it runs (the request is an event in its log)."""
        await self._call(self.executor.service.interrupt, session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Abort a session, wherever it runs."""
        await self._call(self.executor.service.abort, session_id, reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call at ``session_id`` (routed to its owner; specs/hitl.md)."""
        return await self._call(
            self.executor.service.submit_tool_result, session_id, tool_call_id, result, error
        )

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Approve or deny a gated call at ``session_id`` (routed to its owner)."""
        return await self._call(
            functools.partial(self.executor.service.submit_approval, decided_by=decided_by),
            session_id,
            tool_call_id,
            approved,
            reason,
        )

    # The seeds' AgentServer names for the same operations.
    start_agent = start
    resume_agent = resume
    stream_agent = stream
    interrupt_agent = interrupt
    abort_agent = abort
