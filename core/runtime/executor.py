"""``AgentExecutor``: runs agent sessions on an event store.

The executor is an async context manager that owns a task group: every run it
starts lives there and ends with it. Sessions are created by compare-and-append
of ``session_created`` at seq 0, so a start is idempotent even across processes;
interrupts and aborts are events in the log: they reach a run from any process.

The protocol itself (start, resume, stream, status, interrupt, abort and the answers to
pending inputs) is implemented once, by ``executor.service`` (an ``ExecutorService``);
local sub-agents reach it through an ``InProcessTransport``, and the servers through it too.

Which runtime runs the sessions is given when the executor is built (``runtime=``, a
:class:`Runtime`: the built-in one, a durable engine's, a NATS fleet's); never afterwards.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from types import TracebackType
from typing import Any, Protocol

import anyio

from helix_agents._aio import api_error
from helix_agents.agents.config import AgentConfig, OutputT
from helix_agents.agents.define import AgentRegistry
from helix_agents.branches.fork import fork_executor_session
from helix_agents.children.inprocess import InProcessTransport
from helix_agents.errors import HelixError, UsageError
from helix_agents.events import Multitask, PendingInput, Webhook
from helix_agents.hitl.routing import remote_usage
from helix_agents.ids import new_run_id
from helix_agents.log.pricing import Prices
from helix_agents.log.projections import pending_inputs
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore
from helix_agents.log.usage import UsageRollup, get_usage_rollup
from helix_agents.memory.base import MemoryStore, memory_of
from helix_agents.messages import UserMessage
from helix_agents.models.base import LLMAdapter
from helix_agents.models.names import check_model
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    SubmitResponse,
    message_from_input,
)
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.handle import AgentHandle, handle_of
from helix_agents.runtime.recovery import ExpiryTimers, recover_sessions
from helix_agents.runtime.runs import RunGuard, SessionRuns, TakeoverClaim
from helix_agents.runtime.service import ExecutorService, RuntimeParts
from helix_agents.runtime.toolsets import ToolsetHub
from helix_agents.tracing import NO_TRACER, Tracer
from helix_agents.transport import RemoteAgentTransport
from helix_agents.workspaces.base import WorkspaceProvider
from helix_agents.workspaces.hub import WorkspaceHub

__all__ = ["AgentExecutor", "RunGuard", "Runtime", "RuntimeParts", "TakeoverClaim"]


class Runtime(Protocol):
    """Which runtime runs an executor's sessions: ``AgentExecutor(..., runtime=...)``.

    None (the default) is the built-in runtime: runs in this process, as
    tasks of the executor. ``helix_agents.temporal.TemporalRuntime``,
    ``helix_agents.dbos.DbosRuntime`` and the NATS fleet's ``NatsRuntime`` are
    the others. A runtime serves one executor.
    """

    @property
    def runs_models(self) -> bool:
        """False when this process never calls a model (a Temporal gateway): agents need none."""
        ...

    @property
    def recovers_sessions(self) -> bool:
        """True when the runtime recovers sessions left running itself (a durable engine)."""
        ...

    def bind(self, executor: AgentExecutor) -> RuntimeParts:
        """The parts of ``executor``, which is being built (``UsageError`` for a second one)."""
        ...

    def lifespan(self) -> AbstractAsyncContextManager[object]:
        """Entered once the executor is open, left before its runs are waited for."""
        ...


class AgentExecutor:
    """Runs agent sessions on ``store``.

    Use it as ``async with AgentExecutor(store, agents) as executor:``; leaving
    the block waits for every run started in it (cancel the block to stop them).

    Args:
        store: where session logs live.
        agents: the agents this executor can run, as a registry or an iterable
            (sub-agents of registered agents are registered too).
        llm: the default model for agents that have none.
        llm_override: a model every agent uses instead of its own (replays, tests).
        local_transport: how local sub-agents are reached; by default an
            :class:`InProcessTransport` over this executor.
        host_id: this process's identity in ``host_claimed`` events.
        stop_grace: seconds a stopping run waits for its children to acknowledge
            (default: the runtime's, else 10).
        workspace_providers: the workspace provider of each kind the agents'
            workspaces use (``{"local": LocalWorkspaceProvider(root)}``).
        workspace_provider_kinds: the kinds you declare wired: given, every
            registered agent's workspace kinds must be among them (else
            ``AgentServerError`` ``WORKSPACE_WIRING``); unset, a warning is
            logged when an agent declares workspaces (specs/workspaces.md).
        tracer: makes a span per run, model call, tool call and sub-agent call
            (``helix_agents.otel.OtelTracer()``, the ``otel`` extra; specs/otel.md).
            Unset: no tracing, and OpenTelemetry is never imported.
        runtime: which runtime runs the sessions (a :class:`Runtime`); unset, the
            built-in one, in this process.
        strict: start sessions strict (a run fails at its first problem; specs/runtime.md).
        memory: what tools reach as ``ctx.memory``; unset, the store's own (specs/server.md).

    Raises:
        UsageError: a runtime already given to another executor, or an option
            the runtime makes useless (a model, workspaces or a local transport
            for a runtime that runs no model here).
    """

    def __init__(
        self,
        store: EventStore,
        agents: AgentRegistry | Sequence[AgentConfig] = (),
        *,
        llm: LLMAdapter | None = None,
        llm_override: LLMAdapter | None = None,
        local_transport: RemoteAgentTransport | None = None,
        host_id: str | None = None,
        stop_grace: float | None = None,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        workspace_provider_kinds: Iterable[str] | None = None,
        tracer: Tracer | None = None,
        runtime: Runtime | None = None,
        strict: bool = False,
        memory: MemoryStore | None = None,
    ) -> None:
        given = (llm, llm_override, local_transport, workspace_providers)
        if runtime is not None and not runtime.runs_models and given != (None,) * 4:
            raise UsageError(
                "llm, llm_override, local_transport, workspace_providers: this runtime runs "
                "no model in this process (its workers do): give them to the workers"
            )
        self.store = store
        self.registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
        # --- workspaces: the providers, the wiring check, the open registries
        self.workspaces = WorkspaceHub(workspace_providers, self.registry, store)
        self.workspaces.check_wiring(self.registry, workspace_provider_kinds)
        self.runs = SessionRuns(store, self.registry, self.workspaces, on_run_end=self._on_run_end)
        """The owner of this executor's running sessions (locks, active runs, launches)."""
        self.runtime = runtime
        """The runtime the sessions run on (None: the built-in one)."""
        self.strict = strict
        parts = (
            runtime.bind(self)
            if runtime is not None
            else RuntimeParts(service=ExecutorService(self.runs))
        )
        runs = self.runs
        runs.launcher, runs.run_guard = parts.launcher, parts.run_guard
        runs.takeover_claim = parts.takeover_claim
        self.service = parts.service
        """The protocol, implemented once over this executor (a ``RemoteAgentTransport``)."""
        self._lifespan: AbstractAsyncContextManager[object] | None = None
        self.toolsets = ToolsetHub()
        """The agents' toolsets (an MCP server's tools...), open while the executor is."""
        self.env = RunEnv(
            store=store,
            llm=llm,
            llm_override=llm_override,
            local_transport=local_transport
            or parts.local_transport
            or InProcessTransport(self.service),
            host_id=host_id,
            stop_grace=stop_grace if stop_grace is not None else parts.stop_grace,
            tracer=tracer if tracer is not None else NO_TRACER,
            keep_workspaces=self.workspaces.keep,
            release_workspaces=self.workspaces.let_go,
            toolsets=self.toolsets,
            memory=memory if memory is not None else memory_of(store),
        )
        self.runs.env = self.env
        # the timers of the paused sessions' expiring open entries
        self._expiry = ExpiryTimers(self.runs, self.service.resume_if_paused)
        self.damaged_sessions: dict[str, str] = {}
        """Sessions :meth:`recover` found damaged (id -> what), quarantined."""
        self.require_models()

    def __repr__(self) -> str:
        state = "open" if self.runs.task_group is not None else "not entered"
        return (
            f"<AgentExecutor agents={list(self.registry.names())} store={self.store!r} "
            f"{state}, {len(self.runs)} runs active>"
        )

    @property
    def run_guard(self) -> RunGuard | None:
        """Entered around every start and resume here: requests', local children's,
        expiry timers', ``recover()``'s (a NATS fleet's runtime takes leases there)."""
        return self.runs.run_guard

    @property
    def takeover_claim(self) -> TakeoverClaim | None:
        """Events appended with, and before, the ``run_started`` of a takeover (a fleet's claim)."""
        return self.runs.takeover_claim

    def _on_run_end(self, state: SessionState) -> None:
        self._expiry.watch(state)

    def require_models(self) -> None:
        """Refuse an agent that could never run: no model of its own, and no default here.

        Called on construction and for each agent :meth:`execute` registers;
        call it after registering agents on :attr:`registry` yourself.

        Nothing to check on a runtime that runs no model in this process.

        Raises:
            UsageError: naming the first such agent.
        """
        if self.env.llm is not None or self.env.llm_override is not None:
            return
        if self.runtime is not None and not self.runtime.runs_models:
            return
        for name in self.registry.names():
            agent = self.registry.get(name)
            if agent is not None and agent.llm is None:
                raise UsageError(
                    f"agent {name!r} has no model: give it define_agent(..., llm=...) "
                    "or give the executor a default, AgentExecutor(..., llm=...)"
                )

    async def __aenter__(self) -> AgentExecutor:
        # The toolsets open first and close last: every run can use them.
        await self.toolsets.start()
        try:
            await self.toolsets.prepare(self.registry)
        except BaseException:
            await self.toolsets.aclose()
            raise
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self.runs.task_group = tg
        if self.runtime is not None:
            lifespan = self.runtime.lifespan()
            try:
                await lifespan.__aenter__()
            except BaseException as exc:
                await self._close(type(exc), exc, exc.__traceback__)
                raise
            self._lifespan = lifespan
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        lifespan, self._lifespan = self._lifespan, None
        if lifespan is not None:
            try:
                await lifespan.__aexit__(exc_type, exc, tb)
            except BaseException as failure:
                await self._close(type(failure), failure, failure.__traceback__)
                raise
        return await self._close(exc_type, exc, tb)

    async def _close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self.runs.task_group = self.runs.task_group, None
        assert tg is not None
        self._expiry.cancel()  # a waiting timer must not hold the executor open
        try:
            try:
                if isinstance(exc, Exception):
                    # The block failed: stop the runs, but keep its error out of the task
                    # group, so it reaches the caller as raised (cause and frames), not wrapped.
                    tg.cancel_scope.cancel()
                    await tg.__aexit__(None, None, None)
                    return None
                return await tg.__aexit__(exc_type, exc, tb)
            finally:
                with anyio.CancelScope(shield=True):
                    await self.workspaces.let_go_all()  # persistent companions' workspaces
        except BaseExceptionGroup as group:
            # The body's own exception comes back wrapped by the task group:
            # give the caller the exception they raised.
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                raise exc from None
            raise
        finally:
            await self.toolsets.aclose()
            await self.env.models.aclose()  # the HTTP clients of the models its runs called

    # --- the Python API -----------------------------------------------------------

    async def run(
        self,
        agent: AgentConfig[OutputT],
        message_or_input: Any,
        *,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        strict: bool | None = None,
    ) -> OutputT:
        """Run ``agent`` to its end and return its output: ``await executor.run(agent, "...")``.

        The output is an instance of the agent's ``output_schema`` (else the
        final text). Arguments as for :meth:`execute`.

        Errors are the library's own (a :class:`~helix_agents.errors.HelixError`),
        their causes kept, their tracebacks cut to the caller's frames.

        Raises:
            AgentRunError: the run failed, was interrupted or aborted, or paused
                waiting for a person (use :meth:`execute` and the handle to
                answer); its ``session_id`` names the log, kept in the store.
            AgentServerError: the start was refused, as for :meth:`execute`.
            UsageError: as for :meth:`execute`.
        """
        try:
            handle = await self.execute(
                agent,
                message_or_input,
                session_id=session_id,
                state=state,
                metadata=metadata,
                strict=strict,
            )
            return (await handle.result()).unwrap()
        except HelixError as exc:
            error = api_error(exc) or exc
        raise error  # out of the handler: the caller's frames only, no context added

    async def execute(
        self,
        agent: AgentConfig[OutputT],
        message_or_input: Any,
        *,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
        strict: bool | None = None,
        webhook: Webhook | None = None,
    ) -> AgentHandle[OutputT]:
        """Start ``agent`` on a message (a string) or an input (a dict, mapped to a message).

        Idempotent for a given ``session_id``; raises :class:`AgentServerError`
        (``ALREADY_COMPLETED``, ``ALREADY_RUNNING``) like ``service.start``,
        :class:`~helix_agents.errors.ToolsetError` when a toolset of the
        agent (or of its sub-agents) will not open, and :class:`UsageError`
        when the agent's model by name lacks a variable (``OPENAI_API_KEY``):
        nothing is started then.
        The handle's result carries the output as an ``output_schema`` instance.
        ``strict`` (default: the executor's): each run of the session, and of its
        children, fails at its first problem instead of showing it to the model.
        ``webhook``: where its run ends are POSTed (by an ``AgentServer`` with a secret).
        """
        self.registry.register(agent)
        self.require_models()
        if self.env.llm_override is None:
            check_model(agent.llm)  # a missing key now, in one line, before anything is written
        await self.toolsets.prepare(agent)
        message = (
            message_or_input
            if isinstance(message_or_input, str | list)
            else message_from_input(message_or_input)
        )
        response = await self.service.start(
            RemoteStartRequest(
                session_id=session_id or f"session-{new_run_id()[4:]}",
                agent_type=agent.name,
                message=message,
                state=state,
                metadata=metadata,
                input=None if isinstance(message_or_input, str) else message_or_input,
                strict=self.strict if strict is None else strict,
                webhook=webhook,
            )
        )
        return await handle_of(self.runs, self.service, response)

    async def resume(
        self, session_id: str, message: str | Sequence[UserMessage] | None = None
    ) -> AgentHandle:
        """Resume an interrupted or paused session (or take over one whose process died)."""
        msg = None if message is None else message if isinstance(message, str) else list(message)
        response = await self.service.resume(
            RemoteResumeRequest(session_id=session_id, message=msg)
        )
        return await handle_of(self.runs, self.service, response)

    async def send_message(
        self,
        session_id: str,
        message: str | Sequence[UserMessage],
        *,
        message_id: str | None = None,
        multitask: Multitask | None = None,
    ) -> AgentHandle:
        """Send a follow-up message: a new turn of a completed session, with its memory.

        The conversation and state are kept, ``max_steps`` counts per turn; an
        interrupted session resumes with it; a running or paused one does what
        ``multitask`` says (the handle: that run's). ``message_id`` makes it
        idempotent: a repeat changes nothing and returns the same run. Raises
        :class:`AgentServerError`: ``NOT_FOUND``, ``INVALID_REQUEST`` (an
        empty message, a bad id, an id used for another message),
        ``SESSION_FAILED`` (a failed or aborted session), ``SESSION_BUSY``
        (``multitask``, else the agent's, is ``reject``; specs/server.md).
        """
        response = await self.service.send_message(
            RemoteMessageRequest(
                session_id=session_id,
                message=message if isinstance(message, str) else list(message),
                message_id=message_id,
                multitask=multitask,
            )
        )
        started = RemoteStartResponse(
            session_id=response.session_id, stream_id=response.stream_id, run_id=response.run_id
        )
        return await handle_of(self.runs, self.service, started)

    fork = fork_executor_session  # core/branches/fork.py: fork a session (its tree) at a seq

    async def state(self, session_id: str) -> SessionState:
        """The session's state folded from its log; ``NOT_FOUND`` if it has none."""
        return await self.runs.state(session_id)

    async def wait_idle(self, session_id: str) -> None:
        """Wait until no run of ``session_id`` is active in this executor."""
        await self.runs.wait_idle(session_id)

    def active_sessions(self) -> list[str]:
        """The sessions with a run active in this executor, sorted."""
        return self.runs.sessions()

    async def recover(self) -> list[str]:
        """Resume every session whose log says ``running`` but that no run here holds.

        For a process starting on a store another left behind (a crash); reads
        each log once; returns the ids resumed. A damaged log (failing the
        integrity check or the fold) is skipped, listed in
        :attr:`damaged_sessions` and logged once; the others are recovered.
        """
        recovered, damaged = await recover_sessions(self.runs, self.service, self._expiry)
        self.damaged_sessions = damaged
        return recovered

    def is_executing(self, session_id: str, state: SessionState | None = None) -> bool:
        """True while a run of the session is active in this executor.

        With the folded ``state``: only while its log still says running (a run
        whose end is recorded is no longer executing, even while winding down).
        """
        return self.runs.is_executing(session_id, state)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer client tool call ``tool_call_id`` at ``session_id``, the root (hitl.md).

        The tree resumes once the call's owner has every answer. Raises
        :class:`AgentServerError` (``NOT_FOUND``, ``INVALID_REQUEST``, ``ALREADY_ANSWERED``).
        """
        return await self.service.submit_tool_result(session_id, tool_call_id, result, error)

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Approve or deny gated call ``tool_call_id`` at ``session_id`` (the root)."""
        return await self.service.submit_approval(
            session_id, tool_call_id, approved, reason, decided_by=decided_by
        )

    async def usage_rollup(
        self, session_id: str, *, include_sub_agents: bool = True, prices: Prices | None = None
    ) -> UsageRollup:
        """The session's usage and its descendants', each session once, remote children too.

        A remote child (a remote sub-agent or companion) is asked for its own
        usage through its transport's status; one that cannot be reached is
        left out (logged). ``prices`` prices the tokens (``None``: the built-in
        defaults only; see ``helix_agents.log.pricing``).
        """
        return await get_usage_rollup(
            self.store,
            session_id,
            include_sub_agents=include_sub_agents,
            remote=functools.partial(remote_usage, self.runs),
            prices=prices,
        )

    async def pending_inputs(self, session_id: str) -> list[PendingInput]:
        """The open entries of the session's subtree (client tools and approvals)."""
        return pending_inputs(await self.state(session_id))
