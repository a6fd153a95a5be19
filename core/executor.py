"""``AgentExecutor``: runs agent sessions on an event store.

The executor is an async context manager that owns a task group: every run
it starts lives there and ends with it. Sessions are created by
compare-and-append of ``session_created`` at seq 0, so a start is idempotent
even across processes; interrupts and aborts are events in the log, so they
reach a run from any process that shares the store.

Its ``*_agent`` methods are the protocol's service (the seeds' AgentServer
API) that :class:`~helix_agents.InProcessTransport` exposes as a
:class:`~helix_agents.RemoteAgentTransport`; local sub-agents are reached
that way.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any

import anyio
import msgspec
from anyio.abc import TaskGroup

from ._aio import closing_iter
from .agents import AgentConfig, AgentRegistry
from .answers import Answer, expiring, route_answer, watch_expiry
from .errors import AgentServerError, ConcurrencyConflict, UsageError
from .events import (
    AbortRequested,
    Event,
    InterruptRequested,
    PendingInput,
    RunStarted,
    SessionCreated,
    Suspended,
)
from .ids import new_run_id, validate_session_id
from .inprocess import InProcessTransport
from .llm import LLMAdapter
from .messages import UserMessage
from .projections import pending_inputs, project_state, status_of, stream_item
from .protocol import (
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
    checked_from_sequence,
    checked_session_id,
    message_from_input,
)
from .run_loop import RunEnv, SessionRun
from .session_writer import SessionWriter
from .state import SessionState, SessionStatus, StreamItem
from .store import EventStore
from .streaming import RUN_ENDING_EVENTS, stream_session
from .transport import RemoteAgentTransport
from .workspace_hub import WorkspaceHub
from .workspaces import WorkspaceProvider

__all__ = ["AgentExecutor", "AgentHandle", "AgentResult"]

log = logging.getLogger("helix_agents")


class AgentResult(msgspec.Struct, frozen=True, kw_only=True):
    """How a run ended: status, output or error, custom state."""

    session_id: str
    status: SessionStatus
    output: Any = None
    error: str | None = None
    state: dict[str, Any] = {}
    step_count: int = 0


class _SessionLocks:
    """One lock per session id, held only while someone uses it."""

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(session_id, (anyio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)


class _ActiveRun:
    __slots__ = ("done", "run", "run_id", "start_seq")

    def __init__(self, run_id: str, start_seq: int) -> None:
        self.run_id = run_id
        self.start_seq = start_seq
        self.done = anyio.Event()
        self.run: SessionRun | None = None


class AgentHandle:
    """A started or resumed run: wait for it, stream it, stop it."""

    def __init__(self, executor: AgentExecutor, session_id: str, run_id: str, start_seq: int):
        self.executor = executor
        self.session_id = session_id
        self.run_id = run_id
        self.start_seq = start_seq
        """The seq of this run's ``run_started`` event."""

    async def result(self) -> AgentResult:
        """Wait until this run ends (completed, failed, interrupted or paused) and report it."""
        await self.executor.wait_idle(self.session_id)
        state = await self.executor.state(self.session_id)
        return AgentResult(
            session_id=self.session_id,
            status=state.status,
            output=state.output,
            error=state.error,
            state=state.custom_state,
            step_count=state.step_count,
        )

    async def stream(self, from_sequence: int | None = None) -> AsyncIterator[StreamItem]:
        """Yield this run's stream items (nested children flattened) until the run ends.

        ``from_sequence`` defaults to where this run started.
        """
        cursor = self.start_seq if from_sequence is None else from_sequence
        store = self.executor.store
        async with closing_iter(store.tail(self.session_id, cursor)) as events:
            async for event in events:
                item = stream_item(event)
                if item is not None:
                    yield item
                elif isinstance(event, (*RUN_ENDING_EVENTS, Suspended)):
                    return

    async def pending_inputs(self) -> list[PendingInput]:
        """The open entries (client tools, approvals) of this session's whole tree."""
        return await self.executor.pending_inputs(self.session_id)

    async def submit_tool_result(
        self, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call anywhere in this session's tree."""
        return await self.executor.submit_tool_result(self.session_id, tool_call_id, result, error)

    async def approve(self, tool_call_id: str, reason: str | None = None) -> SubmitResponse:
        """Approve a gated call anywhere in this session's tree."""
        return await self.executor.submit_approval(self.session_id, tool_call_id, True, reason)

    async def deny(self, tool_call_id: str, reason: str | None = None) -> SubmitResponse:
        """Deny a gated call; the LLM gets an error result with ``reason``."""
        return await self.executor.submit_approval(self.session_id, tool_call_id, False, reason)

    async def interrupt(self, reason: str | None = None) -> None:
        """Ask the run to stop softly; it can be resumed."""
        await self.executor.interrupt_agent(self.session_id, reason)

    async def abort(self, reason: str | None = None) -> None:
        """Ask the run to stop for good."""
        await self.executor.abort_agent(self.session_id, reason)


def _user_messages(message: str | Sequence[UserMessage] | None) -> list[UserMessage]:
    if message is None:
        return []
    if isinstance(message, str):
        return [UserMessage(content=message)]
    return list(message)


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
    ) -> None:
        self.store = store
        self.registry = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
        # --- workspaces: the providers, the wiring check, the open registries
        self.workspaces = WorkspaceHub(workspace_providers, self.registry, store)
        self.workspaces.check_wiring(self.registry, workspace_provider_kinds)
        self.env = RunEnv(
            store=store,
            llm=llm,
            llm_override=llm_override,
            local_transport=local_transport or InProcessTransport(self),
            host_id=host_id,
            stop_grace=stop_grace,
        )
        self._runs: dict[str, _ActiveRun] = {}
        # Starts and resumes of one session are serialised in this process, so
        # a run is registered before anyone else can look for it.
        self._session_locks = _SessionLocks()
        self._tg: TaskGroup | None = None
        self._expiry_timers: dict[tuple[str, str], anyio.CancelScope] = {}

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
        for timer in list(self._expiry_timers.values()):
            timer.cancel()  # a waiting timer must not hold the executor open; recover() re-arms it
        try:
            return await tg.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            # The body's own exception comes back wrapped by the task group:
            # give the caller the exception they raised.
            if exc is not None and len(group.exceptions) == 1 and group.exceptions[0] is exc:
                raise exc from None
            raise

    # --- the Python API -----------------------------------------------------------

    async def execute(
        self,
        agent: AgentConfig,
        message_or_input: Any,
        *,
        session_id: str | None = None,
        state: dict[str, Any] | None = None,
        metadata: dict[str, str] | None = None,
    ) -> AgentHandle:
        """Start ``agent`` on a message (a string) or an input (a dict, mapped to a message).

        Idempotent for a given ``session_id``; raises :class:`AgentServerError`
        (``ALREADY_COMPLETED``, ``ALREADY_RUNNING``) like :meth:`start_agent`.
        """
        self.registry.register(agent)
        message = (
            message_or_input
            if isinstance(message_or_input, str | list)
            else message_from_input(message_or_input)
        )
        response = await self.start_agent(
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
        response = await self.resume_agent(RemoteResumeRequest(session_id=session_id, message=msg))
        return await self._handle(response)

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
        """
        recovered: list[str] = []
        for session_id in await self.store.list_sessions():
            log_ = await self.store.read(session_id)
            if not log_ or session_id in self._runs:
                continue
            state = project_state(log_)
            self._watch_expiry(state)
            if state.status != "running" or self.registry.get(state.agent_type) is None:
                continue
            try:
                await self.resume_agent(RemoteResumeRequest(session_id=session_id))
            except AgentServerError as exc:
                log.warning("could not recover session %s: %s", session_id, exc)
                continue
            recovered.append(session_id)
        return recovered

    def _watch_expiry(self, state: SessionState) -> None:
        """Start a timer for each expiring open entry of a paused root (once per entry)."""
        if self._tg is None:
            return
        for entry in expiring(state):
            key = (state.session_id, entry.tool_call_id)
            if key in self._expiry_timers:
                continue
            self._expiry_timers[key] = anyio.CancelScope()
            self._tg.start_soon(self._expire, state.session_id, entry)

    async def _expire(self, session_id: str, entry: PendingInput) -> None:
        key = (session_id, entry.tool_call_id)
        try:
            with self._expiry_timers[key]:
                await watch_expiry(self, session_id, entry, anyio.sleep)
        finally:
            self._expiry_timers.pop(key, None)

    def is_executing(self, session_id: str, state: SessionState | None = None) -> bool:
        """True while a run of the session is active in this executor.

        With the folded ``state``: only while its log still says running (a run
        whose end is recorded is no longer executing, even if it is still
        winding down).
        """
        if session_id not in self._runs:
            return False
        return state is None or state.status == "running"

    # --- the protocol's service ---------------------------------------------------------

    async def start_agent(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Create and run a session; idempotent for the same id and request.

        Raises :class:`AgentServerError`: ``NOT_FOUND`` (unknown agent type),
        ``INVALID_REQUEST`` (bad id or state), ``ALREADY_RUNNING`` (the id exists
        with a different agent type or message), ``ALREADY_COMPLETED``.
        """
        session_id = self._valid_id(request.session_id)
        for related in (
            request.parent_session_id,
            request.root_session_id,
            request.workspace_session_id,
        ):
            if related is not None:
                self._valid_id(related)
        agent = self.registry.get(request.agent_type)
        if agent is None:
            raise AgentServerError("NOT_FOUND", f"agent type not found: {request.agent_type}")
        inheriting = self.workspaces.start_problem(agent, request)  # workspaces
        if inheriting is not None:
            raise AgentServerError("INVALID_REQUEST", inheriting)
        messages = _user_messages(request.message)
        try:
            initial = agent.initial_state(request.state)
        except UsageError as exc:
            raise AgentServerError("INVALID_REQUEST", str(exc)) from exc
        run_id = new_run_id()
        created = SessionCreated(
            session_id=session_id,
            seq=1,
            ts=_now(),
            agent_type=agent.name,
            run_id=run_id,
            messages=messages,
            input=request.input,
            initial_state=initial,
            metadata=dict(request.metadata or {}),
            parent_session_id=request.parent_session_id,
            root_session_id=request.root_session_id or request.parent_session_id,
            parent_tool_call_id=request.parent_tool_call_id,
            ancestors=_ancestors(request),
            workspace_session_id=request.workspace_session_id,
        )
        started = RunStarted(session_id=session_id, seq=2, ts=created.ts, run_id=run_id)
        async with self._session_locks.hold(session_id):
            try:
                await self.store.append(session_id, [created, started], 0)
            except ConcurrencyConflict:
                return await self._existing(session_id, agent, messages)
            self._launch(agent, [created, started], run_id)
        return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=run_id)

    async def _existing(
        self, session_id: str, agent: AgentConfig, messages: list[UserMessage]
    ) -> RemoteStartResponse:
        state = project_state(await self.store.read(session_id))
        first = state.messages[: len(messages)]
        if state.agent_type != agent.name or first != messages:
            raise AgentServerError(
                "ALREADY_RUNNING",
                f"session {session_id!r} exists with a different request "
                f"(agent type {state.agent_type!r}); use a new session id",
            )
        if state.is_terminal:
            raise _finished(state)
        return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=state.run_id)

    async def resume_agent(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume an interrupted or paused session, or take over one no process runs.

        Raises :class:`AgentServerError`: ``NOT_FOUND``, ``ALREADY_COMPLETED``,
        ``ALREADY_RUNNING`` (a message was sent to a run that is active here).
        """
        session_id = self._valid_id(request.session_id)
        async with self._session_locks.hold(session_id):
            return await self._resume_locked(session_id, _user_messages(request.message))

    async def _resume_locked(
        self, session_id: str, messages: list[UserMessage]
    ) -> RemoteStartResponse:
        while True:
            log_ = await self.store.read(session_id)
            if not log_:
                raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
            state = project_state(log_)
            if state.is_terminal:
                raise AgentServerError(
                    "ALREADY_COMPLETED", f"session {session_id!r} is {state.status}"
                )
            active = self._runs.get(session_id)
            if active is not None and state.status != "running":
                # Its run recorded its end (it paused as an answer arrived) and
                # is winding down: let it go, then start the new run.
                await active.done.wait()
                continue
            if active is not None:
                if messages:
                    raise AgentServerError(
                        "ALREADY_RUNNING",
                        f"session {session_id!r} is running; wait or interrupt it",
                    )
                return RemoteStartResponse(
                    session_id=session_id, stream_id=session_id, run_id=active.run_id
                )
            agent = self.registry.get(state.agent_type)
            if agent is None:
                raise AgentServerError(
                    "NOT_FOUND",
                    f"agent type not found: {state.agent_type} (session {session_id!r})",
                )
            run_id = new_run_id()
            event = RunStarted(
                session_id=session_id,
                seq=state.last_seq + 1,
                ts=_now(),
                run_id=run_id,
                mode="resume",
                messages=messages,
            )
            try:
                await self.store.append(session_id, [event], state.last_seq)
            except ConcurrencyConflict:
                continue  # someone else moved the log: decide again on the new state
            self._launch(agent, [*log_, event], run_id)
            return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=run_id)

    def stream_agent(
        self, session_id: str, from_sequence: int = 0, *, must_exist: bool = False
    ) -> AsyncIterator[TransportEvent]:
        """The session's protocol stream from ``from_sequence`` (see ``stream_session``).

        With ``must_exist``, an unknown session raises ``NOT_FOUND`` at the first
        iteration; otherwise the stream waits for the session to be created.
        """
        self._valid_id(session_id)
        checked_from_sequence(from_sequence)
        return stream_session(self.store, session_id, from_sequence, must_exist=must_exist)

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status; ``NOT_FOUND`` if it does not exist."""
        state = await self.state(self._valid_id(session_id))
        snapshot = status_of(state)
        return RemoteStatusResponse(
            session_id=session_id,
            run_id=snapshot.run_id,
            status=snapshot.status,
            step_count=snapshot.step_count,
            is_executing=self.is_executing(session_id, state),
            stream_id=session_id,
            latest_sequence=snapshot.latest_sequence,
            output=snapshot.output,
            state=snapshot.state,
            error=snapshot.error,
            suspension=snapshot.suspension,
            pending_client_tool_call_ids=snapshot.pending_client_tool_call_ids,
            pending_inputs=snapshot.pending_inputs,
            awaiting_input=snapshot.awaiting_input,
        )

    async def interrupt_agent(self, session_id: str, reason: str | None = None) -> None:
        """Record an interrupt request; the run (in any process) stops and can be resumed."""
        await self._request(
            session_id,
            lambda seq: InterruptRequested(
                session_id=session_id, seq=seq, ts=_now(), reason=reason
            ),
        )

    async def abort_agent(self, session_id: str, reason: str | None = None) -> None:
        """Record an abort request; the run (in any process) stops for good."""
        await self._request(
            session_id,
            lambda seq: AbortRequested(session_id=session_id, seq=seq, ts=_now(), reason=reason),
        )

    async def _request(self, session_id: str, build: Any) -> None:
        session_id = self._valid_id(session_id)
        while True:
            state = await self.state(session_id)
            if state.is_terminal:
                raise AgentServerError(
                    "ALREADY_COMPLETED", f"session {session_id!r} is {state.status}"
                )
            try:
                await self.store.append(session_id, [build(state.last_seq + 1)], state.last_seq)
                return
            except ConcurrencyConflict:
                continue

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer client tool call ``tool_call_id`` at ``session_id`` (the root; see hitl.md).

        The answer is routed to the owning session, local or remote, and the
        tree resumes once the owner has every answer. Raises
        :class:`AgentServerError`: ``NOT_FOUND`` (no such entry on this
        session's path), ``INVALID_REQUEST`` (an approval entry, or a result
        failing the tool's ``output_schema``), ``ALREADY_ANSWERED``.
        """
        answer = Answer(kind="client_tool", result=result, error=error)
        return await route_answer(self, self._valid_id(session_id), tool_call_id, answer)

    async def submit_approval(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> SubmitResponse:
        """Approve or deny call ``tool_call_id`` at ``session_id`` (the root); see
        :meth:`submit_tool_result` for the routing and the errors."""
        answer = Answer(kind="approval", approved=bool(approved), reason=reason)
        return await route_answer(self, self._valid_id(session_id), tool_call_id, answer)

    async def pending_inputs(self, session_id: str) -> list[PendingInput]:
        """The open entries of the session's subtree (client tools and approvals)."""
        return pending_inputs(await self.state(session_id))

    # --- runs ---------------------------------------------------------------------------

    def _valid_id(self, session_id: str) -> str:
        return checked_session_id(session_id)

    def _launch(self, agent: AgentConfig, log_: Sequence[Event], run_id: str) -> None:
        if self._tg is None:
            raise UsageError("use the executor as 'async with AgentExecutor(...) as executor:'")
        session_id = log_[0].session_id
        active = _ActiveRun(run_id, log_[-1].seq)  # the last event is the run's run_started
        self._runs[session_id] = active
        self._tg.start_soon(self._run, agent, list(log_), active, name=f"run {session_id}")

    async def _run(self, agent: AgentConfig, log_: list[Event], active: _ActiveRun) -> None:
        session_id = log_[0].session_id
        try:
            run: SessionRun | None = None
            writer = SessionWriter(
                self.store,
                log_,
                host_id=self.env.host_id,
                on_stop=lambda request: run.request_stop(request) if run else None,
            )
            # workspaces: open the session's registry for this run, close it at its end
            async with self.workspaces.session(agent, writer) as with_workspaces:
                run = SessionRun(self.env, with_workspaces, writer, active.run_id)
                active.run = run
                await run.run()
            self._watch_expiry(writer.state)
        finally:
            if self._runs.get(session_id) is active:
                del self._runs[session_id]
            active.done.set()


def _ancestors(request: RemoteStartRequest) -> list[str]:
    if request.ancestors is not None:
        return list(request.ancestors)
    chain = [request.root_session_id, request.parent_session_id]
    ancestors = [sid for sid in chain if sid is not None]
    return ancestors[-1:] if len(set(ancestors)) == 1 else ancestors


def _finished(state: SessionState) -> AgentServerError:
    return AgentServerError("ALREADY_COMPLETED", f"session {state.session_id!r} is {state.status}")


def _now() -> float:
    return time.time()
