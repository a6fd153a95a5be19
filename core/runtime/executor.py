"""``AgentExecutor``: runs agent sessions on an event store.

The executor is an async context manager that owns a task group: every run
it starts lives there and ends with it. Sessions are created by
compare-and-append of ``session_created`` at seq 0, so a start is idempotent
even across processes; interrupts and aborts are events in the log, so they
reach a run from any process that shares the store.

The protocol itself (start, resume, stream, status, interrupt, abort and the
answers to pending inputs) is implemented once, by ``executor.service`` (an
:class:`~helix_agents.ExecutorService`); local sub-agents reach it through an
:class:`~helix_agents.InProcessTransport`, and the servers through it too.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from types import TracebackType
from typing import Any

import anyio
from anyio.abc import TaskGroup

from helix_agents.agents.config import AgentConfig, OutputT
from helix_agents.agents.define import AgentRegistry
from helix_agents.errors import AgentServerError, HelixError, OwnershipLost, UsageError
from helix_agents.events import Event, PendingInput, RunStarted
from helix_agents.hitl.routing import child_transport
from helix_agents.ids import new_run_id, validate_session_id
from helix_agents.log.projections import interrupted_step, pending_inputs, project_state
from helix_agents.log.state import SessionState, SubSessionRef, UsageTotals
from helix_agents.log.store import EventStore
from helix_agents.log.usage import UsageRollup, get_usage_rollup
from helix_agents.messages import UserMessage
from helix_agents.models.base import LLMAdapter
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    SubmitResponse,
    message_from_input,
)
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.handle import AgentHandle
from helix_agents.runtime.inprocess import InProcessTransport
from helix_agents.runtime.recovery import ExpiryTimers, recover_sessions
from helix_agents.runtime.run_loop import SessionRun
from helix_agents.runtime.runs import ActiveRun, SessionLocks
from helix_agents.runtime.service import ExecutorService
from helix_agents.runtime.writer import SessionWriter, StartCommit
from helix_agents.tracing import NO_TRACER, Tracer, end_run_span, tokens_used
from helix_agents.transport import RemoteAgentTransport
from helix_agents.workspaces.base import WorkspaceProvider
from helix_agents.workspaces.hub import WorkspaceHub

__all__ = ["AgentExecutor", "RunGuard", "TakeoverClaim"]

RunGuard = Callable[[str], AbstractAsyncContextManager[object]]
"""``guard(session_id)``: a context entered around every start and resume of a session.

A fleet host takes the session's lease there, before the run can begin."""
TakeoverClaim = Callable[[Sequence[Event], SessionState], list[Event]]
"""``claim(log, state)``: the events a resume appends before the ``run_started`` of a takeover.

A resume takes over when the log says the session runs and no run of it is
active here; a fleet host claims it there (``host_claimed``), in the same batch."""

log = logging.getLogger("helix_agents")


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
        stop_grace: seconds a stopping run waits for its children to acknowledge.
        workspace_providers: the workspace provider of each kind the agents'
            workspaces use (``{"local": LocalWorkspaceProvider(root)}``).
        workspace_provider_kinds: the kinds you declare wired: given, every
            registered agent's workspace kinds must be among them (else
            ``AgentServerError`` ``WORKSPACE_WIRING``); unset, a warning is
            logged when an agent declares workspaces (specs/workspaces.md).
        tracer: makes a span per run, model call, tool call and sub-agent call
            (``helix_agents.otel.OtelTracer()``, the ``otel`` extra; specs/otel.md).
            Unset: no tracing, and OpenTelemetry is never imported.
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
        stop_grace: float = 10.0,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        workspace_provider_kinds: Iterable[str] | None = None,
        tracer: Tracer | None = None,
    ) -> None:
        self.store = store
        self.registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
        # --- workspaces: the providers, the wiring check, the open registries
        self.workspaces = WorkspaceHub(workspace_providers, self.registry, store)
        self.workspaces.check_wiring(self.registry, workspace_provider_kinds)
        self.service = ExecutorService(self)
        """The protocol, implemented once over this executor (a ``RemoteAgentTransport``)."""
        self.env = RunEnv(
            store=store,
            llm=llm,
            llm_override=llm_override,
            local_transport=local_transport or InProcessTransport(self.service),
            host_id=host_id,
            stop_grace=stop_grace,
            tracer=tracer if tracer is not None else NO_TRACER,
        )
        self._runs: dict[str, ActiveRun] = {}
        # Starts and resumes of one session are serialised in this process, so
        # a run is registered before anyone else can look for it.
        self._session_locks = SessionLocks()
        self._tg: TaskGroup | None = None
        self._expiry = ExpiryTimers(self)  # of the paused sessions' expiring open entries
        self.damaged_sessions: dict[str, str] = {}
        """Sessions :meth:`recover` found damaged (id -> what), quarantined."""
        self.run_guard: RunGuard | None = None
        """Entered around every start and resume here: requests', local children's,
        expiry timers', ``recover()``'s (a NATS host sets it to take leases)."""
        self.takeover_claim: TakeoverClaim | None = None
        """Events to append with, and before, the ``run_started`` of a resume that takes
        over a session left running (no run of it active here): a NATS host's claim."""
        self.require_models()

    def __repr__(self) -> str:
        state = "open" if self._tg is not None else "not entered"
        return (
            f"<AgentExecutor agents={list(self.registry.names())} store={self.store!r} "
            f"{state}, {len(self._runs)} runs active>"
        )

    def guarded(self, session_id: str) -> AbstractAsyncContextManager[object]:
        """The :attr:`run_guard` around something that can begin a run of ``session_id``."""
        if self.run_guard is None:
            return nullcontext()
        return self.run_guard(session_id)

    def require_models(self) -> None:
        """Refuse an agent that could never run: no model of its own, and no default here.

        Called on construction and for each agent :meth:`execute` registers;
        call it after registering agents on :attr:`registry` yourself.

        Raises:
            UsageError: naming the first such agent.
        """
        if self.env.llm is not None or self.env.llm_override is not None:
            return
        for name in self.registry.names():
            agent = self.registry.get(name)
            if agent is not None and agent.llm is None:
                raise UsageError(
                    f"agent {name!r} has no model: give it define_agent(..., llm=...) "
                    "or give the executor a default, AgentExecutor(..., llm=...)"
                )

    async def __aenter__(self) -> AgentExecutor:
        self._tg = anyio.create_task_group()
        await self._tg.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        tg, self._tg = self._tg, None
        assert tg is not None
        self._expiry.cancel()  # a waiting timer must not hold the executor open
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The body's own exception comes back wrapped by the task group:
            # give the caller the exception they raised.
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                raise exc from None
            raise

    # --- the Python API -----------------------------------------------------------

    async def run(
        self,
        agent: AgentConfig[OutputT],
        message_or_input: Any,
        *,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> OutputT:
        """Run ``agent`` to its end and return its output: ``await executor.run(agent, "...")``.

        The output is an instance of the agent's ``output_schema`` (else the
        final text). Arguments as for :meth:`execute`.

        Raises:
            AgentRunError: the run failed, was interrupted or aborted, or paused
                waiting for a person (use :meth:`execute` and the handle to
                answer); its ``session_id`` names the log, kept in the store.
            AgentServerError: the start was refused, as for :meth:`execute`.
        """
        handle = await self.execute(
            agent, message_or_input, session_id=session_id, state=state, metadata=metadata
        )
        return (await handle.result()).unwrap()

    async def execute(
        self,
        agent: AgentConfig[OutputT],
        message_or_input: Any,
        *,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> AgentHandle[OutputT]:
        """Start ``agent`` on a message (a string) or an input (a dict, mapped to a message).

        Idempotent for a given ``session_id``; raises :class:`AgentServerError`
        (``ALREADY_COMPLETED``, ``ALREADY_RUNNING``) like ``service.start``.
        The handle's result carries the output as an ``output_schema`` instance.
        """
        self.registry.register(agent)
        self.require_models()
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
            )
        )
        return await self._handle(response)

    async def resume(
        self, session_id: str, message: str | Sequence[UserMessage] | None = None
    ) -> AgentHandle:
        """Resume an interrupted or paused session (or take over one whose process died)."""
        msg = None if message is None else message if isinstance(message, str) else list(message)
        response = await self.service.resume(
            RemoteResumeRequest(session_id=session_id, message=msg)
        )
        return await self._handle(response)

    async def send_message(
        self,
        session_id: str,
        message: str | Sequence[UserMessage],
        *,
        message_id: str | None = None,
    ) -> AgentHandle:
        """Send a follow-up message: a new turn of a completed session, with its memory.

        The session's conversation and state are kept and ``max_steps``
        counts per turn; an interrupted session resumes with the message; a
        running or paused one takes it in at its run's next step (the handle
        is then that run's). ``message_id`` makes it idempotent: a repeat with
        the same id changes nothing and returns the same run. Raises
        :class:`AgentServerError`: ``NOT_FOUND``, ``INVALID_REQUEST`` (an
        empty message, a bad id, an id used for another message),
        ``SESSION_FAILED`` (a failed or aborted session).
        """
        response = await self.service.send_message(
            RemoteMessageRequest(
                session_id=session_id,
                message=message if isinstance(message, str) else list(message),
                message_id=message_id,
            )
        )
        return await self._handle(
            RemoteStartResponse(
                session_id=response.session_id,
                stream_id=response.stream_id,
                run_id=response.run_id,
            )
        )

    async def _handle(self, response: RemoteStartResponse) -> AgentHandle:
        session_id = response.session_id
        active = self._runs.get(session_id)
        if active is not None and active.run_id == response.run_id:
            return AgentHandle(self, session_id, response.run_id, active.start_seq)
        # A run this executor did not launch (an idempotent start of a session
        # begun elsewhere): find where it started in the log.
        start_seq = 0
        for event in reversed(await self.store.read(session_id)):
            if isinstance(event, RunStarted) and event.run_id == response.run_id:
                start_seq = event.seq
                break
        return AgentHandle(self, session_id, response.run_id, start_seq)

    async def state(self, session_id: str) -> SessionState:
        """The session's state folded from its log; ``NOT_FOUND`` if it has none."""
        log_ = await self.store.read(validate_session_id(session_id))
        if not log_:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        return project_state(log_)

    async def wait_idle(self, session_id: str) -> None:
        """Wait until no run of ``session_id`` is active in this executor."""
        active = self._runs.get(session_id)
        while active is not None:
            await active.done.wait()
            active = self._runs.get(session_id)

    def active_sessions(self) -> list[str]:
        """The sessions with a run active in this executor, sorted."""
        return sorted(self._runs)

    async def recover(self) -> list[str]:
        """Resume every session whose log says ``running`` but that no run here holds.

        Call it when a process starts on a store another process left behind
        (a crash): those sessions were running when it died. Reads every
        session's log once. Returns the ids resumed.

        A session whose log is damaged (it fails the store's integrity check,
        or does not fold into a valid log) is quarantined, not fatal: it is
        skipped, listed in :attr:`damaged_sessions`, and named once in the
        log; every other session is recovered.
        """
        return await recover_sessions(self)

    def is_executing(self, session_id: str, state: SessionState | None = None) -> bool:
        """True while a run of the session is active in this executor.

        With the folded ``state``: only while its log still says running (a run
        whose end is recorded is no longer executing, even if it is still
        winding down).
        """
        if session_id not in self._runs:
            return False
        return state is None or state.status == "running"

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer client tool call ``tool_call_id`` at ``session_id`` (the root; see hitl.md).

        Routed to the owning session, local or remote; the tree resumes once
        the owner has every answer. Raises :class:`AgentServerError`:
        ``NOT_FOUND``, ``INVALID_REQUEST``, ``ALREADY_ANSWERED``.
        """
        return await self.service.submit_tool_result(session_id, tool_call_id, result, error)

    async def submit_approval(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> SubmitResponse:
        """Approve or deny gated call ``tool_call_id`` at ``session_id`` (the root)."""
        return await self.service.submit_approval(session_id, tool_call_id, approved, reason)

    async def usage_rollup(
        self, session_id: str, *, include_sub_agents: bool = True
    ) -> UsageRollup:
        """The session's usage and its descendants', each session once, remote children too.

        A remote child (a remote sub-agent or companion) is asked for its own
        usage through its transport's status; one that cannot be reached is
        left out (logged).
        """

        async def remote(state: SessionState, ref: SubSessionRef) -> UsageTotals | None:
            try:
                transport = child_transport(self, state, ref.sub_session_id)
                return (await transport.get_status(ref.sub_session_id)).usage
            except (HelixError, OSError) as exc:
                log.warning("usage of remote child %s left out: %s", ref.sub_session_id, exc)
                return None

        return await get_usage_rollup(
            self.store, session_id, include_sub_agents=include_sub_agents, remote=remote
        )

    async def pending_inputs(self, session_id: str) -> list[PendingInput]:
        """The open entries of the session's subtree (client tools and approvals)."""
        return pending_inputs(await self.state(session_id))

    # --- runs ---------------------------------------------------------------------------

    def _launch(
        self, agent: AgentConfig, log_: Sequence[Event], run_id: str, *, unsaved: int = 0
    ) -> StartCommit | None:
        """Run ``agent`` on ``log_``; its last ``unsaved`` events go in with the run's first batch.

        With ``unsaved``, the returned :class:`StartCommit` is settled once they
        are durable (or will never be).
        """
        if self._tg is None:
            raise UsageError("use the executor as 'async with AgentExecutor(...) as executor:'")
        session_id = log_[0].session_id
        active = ActiveRun(run_id, log_[-1].seq)  # the last event is the run's run_started
        self._runs[session_id] = active
        start = StartCommit() if unsaved else None
        self._tg.start_soon(
            self._run, agent, list(log_), active, unsaved, start, name=f"run {session_id}"
        )
        return start

    async def _run(
        self,
        agent: AgentConfig,
        log_: list[Event],
        active: ActiveRun,
        unsaved: int = 0,
        start: StartCommit | None = None,
    ) -> None:
        session_id = log_[0].session_id
        writer: SessionWriter | None = None
        try:
            run: SessionRun | None = None
            writer = SessionWriter(
                self.store,
                log_,
                host_id=self.env.host_id,
                on_stop=lambda request: run.request_stop(request) if run else None,
                unsaved=unsaved,
                start=start,
            )
            if unsaved and _acts_before_its_loop(agent, writer.state):
                # Workspaces and the start hook act outside the log: only once
                # the start is durable (a lost start then runs nothing of them).
                try:
                    await writer.save_start()
                except OwnershipLost:
                    return
            # workspaces: open the session's registry for this run, close it at its end
            async with self.workspaces.session(agent, writer) as with_workspaces:
                run = SessionRun(
                    self.env,
                    with_workspaces,
                    writer,
                    active.run_id,
                    restart=interrupted_step(log_),
                )
                active.run = run
                with active.span(self.env.tracer, agent, log_) as span:
                    tokens_before = tokens_used(writer.state)
                    await run.run()
                    end_run_span(span, writer.state, tokens_before)
            self._expiry.watch(writer.state)
        finally:
            if start is not None and not start.settled:
                await _settle_start(writer, start)
            if self._runs.get(session_id) is active:
                del self._runs[session_id]
            active.done.set()


def _acts_before_its_loop(agent: AgentConfig, state: SessionState) -> bool:
    """Whether a run of ``agent`` does anything outside its log before its loop begins."""
    return bool(
        agent.workspaces or state.workspace_session_id or agent.hooks.on_agent_start is not None
    )


async def _settle_start(writer: SessionWriter | None, start: StartCommit) -> None:
    """A run that ended before its start was saved (cancelled, crashed): save it, or say why not."""
    with anyio.CancelScope(shield=True):
        try:
            if writer is not None:
                await writer.save_start()
        except Exception as exc:
            start.settle(exc)
        if writer is None or not writer.start_saved:
            start.settle(
                AgentServerError("UNAVAILABLE", "the run ended before its start was recorded")
            )
        start.settle()


def _now() -> float:
    return time.time()
