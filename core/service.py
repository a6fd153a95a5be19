"""``ExecutorService``: the remote-agent protocol, implemented once, over an executor.

It is the one :class:`~helix_agents.RemoteAgentTransport` every edge talks to:
local sub-agents through :class:`~helix_agents.InProcessTransport`, the HTTP
gateway and the NATS host through :class:`~helix_agents.server.AgentServer`.
Start is idempotent by compare-and-append of ``session_created`` at seq 0;
interrupts and aborts are events in the log, so they reach a run in any
process that shares the store.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from .agents import AgentConfig
from .answers import Answer, route_answer
from .errors import AgentServerError, ConcurrencyConflict, UsageError
from .events import (
    Aborted,
    AbortRequested,
    ErrorChunk,
    Event,
    Interrupted,
    InterruptRequested,
    MessageQueued,
    RunStarted,
    SessionCreated,
)
from .ids import new_run_id
from .messages import UserMessage
from .paused_stop import abort_waiting_children, waiting_children_ended
from .projections import project_state, status_of
from .protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
    checked_from_sequence,
    checked_message_id,
    checked_messages,
    checked_session_id,
)
from .state import SessionState
from .store import EventStore
from .streaming import run_from_sequence, stream_session
from .tracing import session_trace_context

if TYPE_CHECKING:
    from .executor import AgentExecutor

__all__ = ["ExecutorService", "append_decided", "user_messages"]


def user_messages(message: str | Sequence[UserMessage] | None) -> list[UserMessage]:
    """A request's message as user messages (none, one string, or a list)."""
    if message is None:
        return []
    if isinstance(message, str):
        return [UserMessage(content=message)]
    return list(message)


async def append_decided(
    store: EventStore, session_id: str, decide: Callable[[SessionState], Sequence[Event]]
) -> SessionState:
    """Append what ``decide(state)`` returns at the log's end, deciding again on a conflict.

    ``decide`` gets the state folded from the whole log and returns events
    with any envelope (stamped here), or raises to refuse; an empty result
    appends nothing. ``NOT_FOUND`` for a session with no log.
    """
    while True:
        log_ = await store.read(session_id)
        if not log_:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        state = project_state(log_)
        events = list(decide(state))
        if not events:
            return state
        now = time.time()
        stamped = [
            msgspec.structs.replace(event, session_id=session_id, seq=state.last_seq + n, ts=now)
            for n, event in enumerate(events, start=1)
        ]
        try:
            await store.append(session_id, stamped, state.last_seq)
        except ConcurrencyConflict:
            continue
        return project_state([*log_, *stamped])


class ExecutorService:
    """The protocol's operations on ``executor``'s sessions (a ``RemoteAgentTransport``)."""

    def __init__(self, executor: AgentExecutor) -> None:
        self._executor = executor
        self._starting: dict[str, _Starting] = {}  # session -> the start deciding it here
        self._resuming: dict[str, _Starting] = {}  # session -> the plain resume deciding it

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Create and run a session; idempotent for the same id and request.

        Raises :class:`AgentServerError`: ``NOT_FOUND`` (unknown agent type),
        ``INVALID_REQUEST`` (bad id or state), ``ALREADY_RUNNING`` (the id exists
        with a different agent type or message), ``ALREADY_COMPLETED``.
        """
        session_id = checked_session_id(request.session_id)
        for related in (
            request.parent_session_id,
            request.root_session_id,
            request.workspace_session_id,
        ):
            if related is not None:
                checked_session_id(related)
        agent = self._executor.registry.get(request.agent_type)
        if agent is None:
            raise AgentServerError("NOT_FOUND", f"agent type not found: {request.agent_type}")
        inheriting = self._executor.workspaces.start_problem(agent, request)  # workspaces
        if inheriting is not None:
            raise AgentServerError("INVALID_REQUEST", inheriting)
        traced = session_trace_context(  # specs/otel.md
            self._executor.env.tracer, request.trace_context, agent.name, session_id
        )
        messages = user_messages(request.message)
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
            trace_context=traced,
        )
        started = RunStarted(session_id=session_id, seq=2, ts=created.ts, run_id=run_id)
        ongoing = self._starting.get(session_id)
        if ongoing is not None:
            # The same id is being started here now: the same request gets
            # the same answer, even if that run has ended by then.
            joined = await ongoing.answer()
            if joined is not None and ongoing.same_request(agent.name, messages):
                return joined
        mine = _Starting(agent.name, messages)
        self._starting.setdefault(session_id, mine)
        response: RemoteStartResponse | None = None
        try:
            response = await self._start_locked(agent, messages, created, started)
        finally:
            if self._starting.get(session_id) is mine:
                del self._starting[session_id]
            mine.settle(response)
        return response

    async def _start_locked(
        self,
        agent: AgentConfig,
        messages: list[UserMessage],
        created: SessionCreated,
        started: RunStarted,
    ) -> RemoteStartResponse:
        session_id, run_id = created.session_id, created.run_id
        async with (
            self._executor._session_locks.hold(session_id),
            self._executor.guarded(session_id),
        ):
            store = self._executor.store
            if not getattr(store, "shares_start_commit", False):
                # A commit costs a round trip, not an fsync (memory, JetStream, a
                # store that does not say): the start is committed on its own, and
                # a retried start finds the session by the conflict.
                try:
                    await store.append(session_id, [created, started], 0)
                except ConcurrencyConflict:  # retried: a memory store, or a fleet's (claims)
                    return await self._existing(session_id, agent, messages, take_over=True)
                self._executor._launch(agent, [created, started], run_id)
                return RemoteStartResponse(
                    session_id=session_id, stream_id=session_id, run_id=run_id
                )
            # An existing session (a retried start) launches nothing: its
            # answer comes from its log. A new one starts running at once, its
            # start events committed with the run's first batch (the writer's
            # window bounds the wait); the answer waits for that commit.
            log_ = await store.read(session_id)
            if log_:
                return await self._existing(session_id, agent, messages, log_, take_over=True)
            start = self._executor._launch(agent, [created, started], run_id, unsaved=2)
            assert start is not None
            try:
                await start.wait()
            except ConcurrencyConflict:  # another process created it meanwhile
                return await self._existing(session_id, agent, messages)
        return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=run_id)

    async def _existing(
        self,
        session_id: str,
        agent: AgentConfig,
        messages: list[UserMessage],
        log_: Sequence[Event] | None = None,
        *,
        take_over: bool = False,
    ) -> RemoteStartResponse:
        """The answer to a start of a session that exists: its run, if the same request.

        ``take_over``: the start was retried (not a race another process won).
        A session its log says is running, with no run here and no fleet to
        claim it, was left by a process that died (a parent resumed after the
        records of its child's start were lost starts that child again): the
        start resumes it, as a resume would, or nothing would ever run it
        while its caller waits for its end.
        """
        if log_ is None:
            log_ = await self._executor.store.read(session_id)
        state = project_state(log_)
        first = state.messages[: len(messages)]
        if state.agent_type != agent.name or first != messages:
            raise AgentServerError(
                "ALREADY_RUNNING",
                f"session {session_id!r} exists with a different request "
                f"(agent type {state.agent_type!r}); use a new session id",
            )
        if state.is_terminal:
            raise _finished(state)
        if (
            take_over
            and state.status == "running"
            and self._executor.takeover_claim is None
            and not self._executor.is_executing(session_id, state)
        ):
            resumed = await self._resume_locked(session_id, [])
            assert resumed is not None
            return resumed
        return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=state.run_id)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume an interrupted or paused session, or take over one no process runs.

        Raises :class:`AgentServerError`: ``NOT_FOUND``, ``ALREADY_COMPLETED``,
        ``ALREADY_RUNNING`` (a message was sent to a run that is active here).
        """
        session_id = checked_session_id(request.session_id)
        messages = user_messages(request.message)
        if messages:  # a message is delivered once: never an answer shared with another
            return await self._resume_here(session_id, messages)
        ongoing = self._resuming.get(session_id)
        if ongoing is not None:
            # A plain resume of this session is being decided here now (recover()
            # and a parent reconciling its child): the same answer, even if its
            # run has ended by then.
            joined = await ongoing.answer()
            if joined is not None:
                return joined
        mine = _Starting("", [])
        self._resuming.setdefault(session_id, mine)
        response: RemoteStartResponse | None = None
        try:
            response = await self._resume_here(session_id, [])
        finally:
            if self._resuming.get(session_id) is mine:
                del self._resuming[session_id]
            mine.settle(response)
        return response

    async def _resume_here(
        self, session_id: str, messages: list[UserMessage]
    ) -> RemoteStartResponse:
        async with (
            self._executor._session_locks.hold(session_id),
            self._executor.guarded(session_id),
        ):
            response = await self._resume_locked(session_id, messages)
        assert response is not None
        return response

    async def resume_if_paused(self, session_id: str) -> bool:
        """Resume ``session_id`` if it is paused (its answers came in); True if it was.

        Anything else is left as it is: a running session takes the answers in,
        an interrupt that came first stays in force.
        """
        session_id = checked_session_id(session_id)
        async with (
            self._executor._session_locks.hold(session_id),
            self._executor.guarded(session_id),
        ):
            return await self._resume_locked(session_id, [], paused_only=True) is not None

    async def _resume_locked(
        self, session_id: str, messages: list[UserMessage], *, paused_only: bool = False
    ) -> RemoteStartResponse | None:
        while True:
            log_ = await self._executor.store.read(session_id)
            if not log_:
                raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
            state = project_state(log_)
            if state.is_terminal:
                raise AgentServerError(
                    "ALREADY_COMPLETED", f"session {session_id!r} is {state.status}"
                )
            if paused_only and state.status != "paused":
                return None
            active = self._executor._runs.get(session_id)
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
            agent = self._executor.registry.get(state.agent_type)
            if agent is None:
                raise AgentServerError(
                    "NOT_FOUND",
                    f"agent type not found: {state.agent_type} (session {session_id!r})",
                )
            claim = self._executor.takeover_claim
            # Left running with no run here: a takeover, claimed in the same batch.
            batch = claim(log_, state) if claim is not None and state.status == "running" else []
            run_id = new_run_id()
            event = RunStarted(
                session_id=session_id,
                seq=state.last_seq + len(batch) + 1,
                ts=_now(),
                run_id=run_id,
                mode="resume",
                messages=messages,
            )
            batch.append(event)
            try:
                await self._executor.store.append(session_id, batch, state.last_seq)
            except ConcurrencyConflict:
                continue  # someone else moved the log: decide again on the new state
            self._executor._launch(agent, [*log_, *batch], run_id)
            return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=run_id)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """A follow-up message: a new turn of a completed session, with its memory.

        A ``completed`` session starts a new run (``run_started(continue)``:
        its messages and state kept, ``max_steps`` counted afresh); an
        ``interrupted`` one resumes with the message; a ``running`` or
        ``paused`` one queues it (``message_queued``) for its run's next step
        (``queued`` in the answer). With ``message_id``, a repeat changes
        nothing and answers the same run.

        Raises :class:`AgentServerError`: ``INVALID_REQUEST`` (bad id, empty
        message, a message id already used for another message), ``NOT_FOUND``,
        ``SESSION_FAILED`` (a failed or aborted session takes no more turns).
        """
        session_id = checked_session_id(request.session_id)
        messages = checked_messages(request.message)
        message_id = None if request.message_id is None else checked_message_id(request.message_id)
        async with (
            self._executor._session_locks.hold(session_id),
            self._executor.guarded(session_id),
        ):
            return await self._send_locked(session_id, messages, message_id)

    async def _send_locked(
        self, session_id: str, messages: list[UserMessage], message_id: str | None
    ) -> RemoteMessageResponse:
        while True:
            log_ = await self._executor.store.read(session_id)
            if not log_:
                raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
            state = project_state(log_)
            receipt = None if message_id is None else state.message_ids.get(message_id)
            if receipt is not None:
                if receipt.messages != messages:
                    raise AgentServerError(
                        "INVALID_REQUEST",
                        f"message id {message_id!r} was already used for another message",
                    )
                return _message_response(session_id, receipt.run_id, queued=receipt.queued)
            if state.status == "failed":
                raise AgentServerError(
                    "SESSION_FAILED",
                    f"session {session_id!r} failed ({state.error}); it takes no more "
                    "messages: start a new session",
                )
            if state.status in ("running", "paused"):
                queued = MessageQueued(
                    session_id=session_id,
                    seq=state.last_seq + 1,
                    ts=_now(),
                    messages=messages,
                    message_id=message_id,
                )
                try:
                    await self._executor.store.append(session_id, [queued], state.last_seq)
                except ConcurrencyConflict:
                    continue
                return _message_response(session_id, state.run_id, queued=True)
            active = self._executor._runs.get(session_id)
            if active is not None:
                await active.done.wait()  # the ended run is winding down here
                continue
            run_id = await self._new_run(state, log_, messages, message_id)
            if run_id is not None:
                return _message_response(session_id, run_id, queued=False)

    async def _new_run(
        self,
        state: SessionState,
        log_: Sequence[Event],
        messages: list[UserMessage],
        message_id: str | None,
    ) -> str | None:
        """Start the next run of a completed or interrupted session; None if the log moved."""
        agent = self._executor.registry.get(state.agent_type)
        if agent is None:
            raise AgentServerError(
                "NOT_FOUND",
                f"agent type not found: {state.agent_type} (session {state.session_id!r})",
            )
        run_id = new_run_id()
        event = RunStarted(
            session_id=state.session_id,
            seq=state.last_seq + 1,
            ts=_now(),
            run_id=run_id,
            mode="continue" if state.status == "completed" else "resume",
            messages=messages,
            message_id=message_id,
        )
        try:
            await self._executor.store.append(state.session_id, [event], state.last_seq)
        except ConcurrencyConflict:
            return None
        self._executor._launch(agent, [*log_, event], run_id)
        return run_id

    def stream(
        self, session_id: str, from_sequence: int = 0, *, must_exist: bool = True
    ) -> AsyncIterator[TransportEvent]:
        """The session's protocol stream from ``from_sequence`` (see ``stream_session``).

        An unknown session raises ``NOT_FOUND`` at the first iteration; with
        ``must_exist=False`` the stream waits for the session to be created.
        """
        checked_session_id(session_id)
        checked_from_sequence(from_sequence)
        return stream_session(
            self._executor.store, session_id, from_sequence, must_exist=must_exist
        )

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status; ``NOT_FOUND`` if it does not exist."""
        log_ = await self._executor.store.read(checked_session_id(session_id))
        if not log_:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        state = project_state(log_)
        snapshot = status_of(state)
        return RemoteStatusResponse(
            session_id=session_id,
            run_id=snapshot.run_id,
            status=snapshot.status,
            step_count=snapshot.step_count,
            is_executing=self._executor.is_executing(session_id, state),
            stream_id=session_id,
            latest_sequence=snapshot.latest_sequence,
            output=snapshot.output,
            state=snapshot.state,
            error=snapshot.error,
            suspension=snapshot.suspension,
            pending_client_tool_call_ids=snapshot.pending_client_tool_call_ids,
            pending_inputs=snapshot.pending_inputs,
            awaiting_input=snapshot.awaiting_input,
            usage=state.usage,
            run_from_sequence=run_from_sequence(log_),
        )

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Record an interrupt request; the run (in any process) stops and can be resumed.

        A paused session has no run to stop: it is interrupted at once (answers
        given to it afterwards are kept, and ``resume`` goes on).
        """
        await self._request(
            session_id,
            InterruptRequested(reason=reason),
            lambda state: [Interrupted(reason=reason)],
        )

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Record an abort request; the run (in any process) stops for good.

        A paused session has no run to stop: it is aborted at once, and so are
        the children waiting with it (``core/paused_stop.py``).
        """
        session_id = checked_session_id(session_id)
        error = f"aborted: {reason}" if reason else "aborted"
        ended = await abort_waiting_children(self._executor, session_id, reason)
        await self._request(
            session_id,
            AbortRequested(reason=reason),
            lambda state: [
                *waiting_children_ended(state, ended, error),
                ErrorChunk(agent_id=session_id, agent_type=state.agent_type, error=error),
                Aborted(reason=reason),
            ],
        )

    async def _request(
        self,
        session_id: str,
        request: Event,
        stop_paused: Callable[[SessionState], list[Event]],
    ) -> None:
        session_id = checked_session_id(session_id)

        def decide(state: SessionState) -> list[Event]:
            if state.is_terminal:
                raise _finished(state)
            # A paused session has no run to watch for the request: it takes
            # effect in the same batch (compare-and-append against a resume).
            return [request, *(stop_paused(state) if state.status == "paused" else [])]

        await append_decided(self._executor.store, session_id, decide)

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
        return await route_answer(
            self._executor, checked_session_id(session_id), tool_call_id, answer
        )

    async def submit_approval(
        self, session_id: str, tool_call_id: str, approved: bool, reason: str | None = None
    ) -> SubmitResponse:
        """Approve or deny call ``tool_call_id`` at ``session_id`` (the root); see
        :meth:`submit_tool_result` for the routing and the errors."""
        answer = Answer(kind="approval", approved=bool(approved), reason=reason)
        return await route_answer(
            self._executor, checked_session_id(session_id), tool_call_id, answer
        )


class _Starting:
    """A start (or plain resume) under way in this process: what it asked for, then its answer."""

    __slots__ = ("_done", "agent_type", "messages", "response")

    def __init__(self, agent_type: str, messages: list[UserMessage]) -> None:
        self.agent_type = agent_type
        self.messages = messages
        self.response: RemoteStartResponse | None = None
        self._done = anyio.Event()

    def same_request(self, agent_type: str, messages: list[UserMessage]) -> bool:
        """Whether a start of ``agent_type`` with ``messages`` asks for what this one did."""
        return agent_type == self.agent_type and self.messages[: len(messages)] == messages

    def settle(self, response: RemoteStartResponse | None) -> None:
        """The answer (None: it failed; a joiner then decides on its own)."""
        self.response = response
        self._done.set()

    async def answer(self) -> RemoteStartResponse | None:
        """Wait for the answer."""
        await self._done.wait()
        return self.response


def _ancestors(request: RemoteStartRequest) -> list[str]:
    if request.ancestors is not None:
        return list(request.ancestors)
    chain = [request.root_session_id, request.parent_session_id]
    ancestors = [sid for sid in chain if sid is not None]
    return ancestors[-1:] if len(set(ancestors)) == 1 else ancestors


def _message_response(session_id: str, run_id: str, *, queued: bool) -> RemoteMessageResponse:
    return RemoteMessageResponse(
        session_id=session_id, stream_id=session_id, run_id=run_id, queued=queued
    )


def _finished(state: SessionState) -> AgentServerError:
    return AgentServerError("ALREADY_COMPLETED", f"session {state.session_id!r} is {state.status}")


def _now() -> float:
    return time.time()
