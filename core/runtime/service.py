"""``ExecutorService``: the remote-agent protocol, implemented once, over an executor.

It is the one :class:`~helix_agents.RemoteAgentTransport` every edge talks to:
local sub-agents through :class:`~helix_agents.InProcessTransport`, the HTTP
gateway and the NATS host through :class:`~helix_agents.server.AgentServer`.
Starts and resumes are a :class:`~helix_agents.runtime.starts.SessionStarts`
it holds; here are follow-up messages, status, streams, stops and answers. Interrupts and
aborts are events in the log, so they reach a run in any process that
shares the store.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from helix_agents.errors import AgentServerError, ConcurrencyConflict
from helix_agents.events import (
    Aborted,
    AbortRequested,
    ErrorChunk,
    Event,
    Interrupted,
    InterruptRequested,
    Multitask,
    RunStarted,
)
from helix_agents.hitl.paused_abort import abort_waiting_children, waiting_children_ended
from helix_agents.hitl.routing import Answer, route_answer
from helix_agents.ids import new_run_id
from helix_agents.log.projections import project_state, status_of
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore, WaitsOutOutages
from helix_agents.log.streaming import run_from_sequence, stream_session
from helix_agents.messages import UserMessage
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    StoreWait,
    SubmitResponse,
    TransportEvent,
    checked_decided_by,
    checked_from_sequence,
    checked_message_id,
    checked_messages,
    checked_multitask,
    checked_session_id,
)
from helix_agents.runtime.decide import queued_events, stop_of
from helix_agents.runtime.runs import Launcher, RunGuard, SessionRuns, TakeoverClaim
from helix_agents.runtime.starts import SessionStarts, already_finished
from helix_agents.runtime.writer import stamp
from helix_agents.transport import RemoteAgentTransport
from helix_agents.webhooks.gate import WebhookGate
from helix_agents.webhooks.outbox import fold_outbox, webhook_of

__all__ = ["ExecutorService", "RuntimeParts", "append_decided"]


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
        stamped = stamp(session_id, state.last_seq, events)
        try:
            await store.append(session_id, stamped, state.last_seq)
        except ConcurrencyConflict:
            continue
        return project_state([*log_, *stamped])


class ExecutorService:
    """The protocol's operations on the sessions of ``runs`` (a ``RemoteAgentTransport``)."""

    def __init__(self, runs: SessionRuns) -> None:
        self._runs = runs
        self._starts = SessionStarts(runs)

    @property
    def webhook_gate(self) -> WebhookGate | None:
        """Checks a start's webhook and follows its session; None: starts naming one are refused."""
        return self._starts.webhook_gate

    @webhook_gate.setter
    def webhook_gate(self, gate: WebhookGate | None) -> None:
        self._starts.webhook_gate = gate

    async def check_webhook(self, request: RemoteStartRequest) -> None:
        """Refuse a start whose webhook this server would not deliver (nothing written)."""
        await self._starts.webhook_of(request)

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Create and run a session; idempotent for the same id and request.

        Raises :class:`AgentServerError`: ``NOT_FOUND`` (unknown agent type),
        ``INVALID_REQUEST`` (bad id or state), ``ALREADY_RUNNING`` (the id exists
        with a different agent type or message), ``ALREADY_COMPLETED``.
        """
        return await self._starts.start(request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume an interrupted or paused session, or take over one no process runs.

        Raises :class:`AgentServerError`: ``NOT_FOUND``, ``ALREADY_COMPLETED``,
        ``ALREADY_RUNNING`` (a message was sent to a run that is active here).
        """
        return await self._starts.resume(request)

    async def resume_if_paused(self, session_id: str) -> bool:
        """Resume ``session_id`` if it is paused (its answers came in); True if it was."""
        return await self._starts.resume_if_paused(session_id)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """A follow-up message: a new turn of a completed session, with its memory.

        A ``completed`` session starts a new run (``run_started(continue)``:
        its messages and state kept, ``max_steps`` counted afresh); an
        ``interrupted`` one resumes with the message. To a ``running`` or
        ``paused`` one, the message does what its ``multitask`` choice says
        (the request's, else its agent's default; specs/server.md): ``steer``
        queues it (``message_queued``) for its run's next step; ``enqueue``
        queues it for a turn of its own once the run completes; ``interrupt``
        and ``rollback`` also stop the run (``interrupt_requested``), whose end
        begins that turn (a rollback supersedes the run first); ``reject``
        refuses it (``SESSION_BUSY``, nothing written). ``queued`` in the
        answer, with the run under way's id. With ``message_id``, a repeat
        changes nothing and answers the same run.

        Raises :class:`AgentServerError`: ``INVALID_REQUEST`` (bad id, empty
        message, a message id already used for another message, an unknown
        ``multitask``), ``NOT_FOUND``, ``SESSION_FAILED`` (a failed or aborted
        session takes no more turns), ``SESSION_BUSY`` (``reject``).
        """
        session_id = checked_session_id(request.session_id)
        messages = checked_messages(request.message)
        message_id = None if request.message_id is None else checked_message_id(request.message_id)
        multitask = checked_multitask(request.multitask)
        async with self._runs.hold(session_id):
            answer, stop = await self._send_locked(session_id, messages, message_id, multitask)
        if stop is not None:
            status, reason = stop
            await self.stop_requested(session_id, "interrupt", reason)
            if status == "paused":  # stopped at once: its turn begins now
                await self._runs.begin_next_turn(session_id)
        return answer

    async def stop_requested(self, session_id: str, kind: str, reason: str | None) -> None:
        """A stop request is in the log: tell the run where the log alone does not (a hook).

        A run of this process watches its log; a durable engine's service
        signals its engine's run.
        """

    async def _send_locked(
        self,
        session_id: str,
        messages: list[UserMessage],
        message_id: str | None,
        multitask: Multitask | None,
    ) -> tuple[RemoteMessageResponse, tuple[str, str] | None]:
        """The answer, and the status and reason of a run it asked to stop."""
        while True:
            log_ = await self._runs.store.read(session_id)
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
                answer = _message_response(session_id, receipt.run_id, queued=receipt.queued)
                return answer, None
            if state.status == "failed":
                raise AgentServerError(
                    "SESSION_FAILED",
                    f"session {session_id!r} failed ({state.error}); it takes no more "
                    "messages: start a new session",
                )
            if state.status in ("running", "paused"):
                choice = multitask or self._default_multitask(state)
                events = queued_events(state, messages, message_id, choice)
                try:
                    await self._runs.append(session_id, state.last_seq, events)
                except ConcurrencyConflict:
                    continue
                stop = stop_of(events)
                answer = _message_response(session_id, state.run_id, queued=True, multitask=choice)
                return answer, None if stop is None else (state.status, stop)
            active = self._runs.active(session_id)
            if active is not None:
                await active.done.wait()  # the ended run is winding down here
                continue
            run_id = await self._new_run(state, log_, messages, message_id)
            if run_id is not None:
                return _message_response(session_id, run_id, queued=False), None

    def _default_multitask(self, state: SessionState) -> Multitask:
        """The session's agent's ``multitask`` (``steer`` for an agent not registered here)."""
        agent = self._runs.registry.get(state.agent_type)
        return "steer" if agent is None else agent.multitask

    async def _new_run(
        self,
        state: SessionState,
        log_: Sequence[Event],
        messages: list[UserMessage],
        message_id: str | None,
    ) -> str | None:
        """Start the next run of a completed or interrupted session; None if the log moved."""
        agent = self._runs.registry.get(state.agent_type)
        if agent is None:
            raise AgentServerError(
                "NOT_FOUND",
                f"agent type not found: {state.agent_type} (session {state.session_id!r})",
            )
        run_id = new_run_id()
        event = RunStarted(
            run_id=run_id,
            mode="continue" if state.status == "completed" else "resume",
            messages=messages,
            message_id=message_id,
        )
        try:
            await self._runs.begin_run(agent, state.session_id, log_, [event], run_id)
        except ConcurrencyConflict:
            return None
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
        return stream_session(self._runs.store, session_id, from_sequence, must_exist=must_exist)

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status; ``NOT_FOUND`` if it does not exist.

        While its run, executing here, waits for the store to come back (an
        outage its appends wait out), the answer comes from the run's state
        as of its last stored event, without a read (the store is down), and
        says so in ``waiting``.
        """
        checked_session_id(session_id)
        waiting = self._store_wait(session_id)
        active = self._runs.active(session_id)
        if waiting is not None and active is not None and active.run is not None:
            state = active.run.writer.state
            return self._status(state, active.start_seq - 1, True, waiting)
        log_ = await self._runs.store.read(session_id)
        if not log_:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        state = project_state(log_)
        executing = self._runs.is_executing(session_id, state)
        waiting = self._store_wait(session_id) if executing else None
        answer = self._status(state, run_from_sequence(log_), executing, waiting)
        if webhook_of(log_[0]) is None:
            return answer
        # The deliveries it owes, folded from the same log (specs/server.md "Webhooks").
        return msgspec.structs.replace(answer, webhooks=fold_outbox(log_).status())

    def _store_wait(self, session_id: str) -> StoreWait | None:
        """What the session's run waits for, if it executes here and its store is down."""
        store = self._runs.store
        if not isinstance(store, WaitsOutOutages) or self._runs.active(session_id) is None:
            return None
        since = store.outage_since
        if since is None:
            return None
        return StoreWait(
            since=since,
            message="the event store is unreachable: the run waits for it to come back",
        )

    def _status(
        self,
        state: SessionState,
        run_from: int,
        executing: bool,
        waiting: StoreWait | None,
    ) -> RemoteStatusResponse:
        snapshot = status_of(state)
        client_tools = [e for e in snapshot.pending_inputs if e.kind == "client_tool"]
        return RemoteStatusResponse(
            session_id=state.session_id,
            run_id=snapshot.run_id,
            status=snapshot.status,
            step_count=snapshot.step_count,
            is_executing=executing,
            stream_id=state.session_id,
            latest_sequence=snapshot.latest_sequence,
            output=snapshot.output,
            state=snapshot.state,
            error=snapshot.error,
            suspension=snapshot.suspension,
            pending_client_tool_call_ids=snapshot.pending_client_tool_call_ids,
            pending_inputs=snapshot.pending_inputs,
            awaiting_input=snapshot.awaiting_input,
            awaiting_client_tool=snapshot.awaiting_input and bool(client_tools),
            pending_client_tool_calls=client_tools,
            usage=state.usage,
            local_sub_session_ids=[
                sid for sid, ref in state.sub_sessions.items() if ref.remote is None
            ],
            run_from_sequence=run_from,
            problems=list(state.problems),
            waiting=msgspec.UNSET if waiting is None else waiting,
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
        the children waiting with it (``core/hitl/paused_abort.py``).
        """
        session_id = checked_session_id(session_id)
        error = f"aborted: {reason}" if reason else "aborted"
        ended = await abort_waiting_children(self._runs, session_id, reason)
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
                raise already_finished(state)
            # A paused session has no run to watch for the request: it takes
            # effect in the same batch (compare-and-append against a resume).
            return [request, *(stop_paused(state) if state.status == "paused" else [])]

        await append_decided(self._runs.store, session_id, decide)

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
            self._runs, self.resume_if_paused, checked_session_id(session_id), tool_call_id, answer
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
        """Approve or deny call ``tool_call_id`` at ``session_id`` (the root); see
        :meth:`submit_tool_result` for the routing and the errors.

        ``decided_by`` names who decided (recorded on ``approval_given``); a
        name that is not a string, is empty, longer than ``DECIDED_BY_MAX`` or
        holds control characters is ``INVALID_REQUEST`` and records nothing.
        """
        answer = Answer(
            kind="approval",
            approved=bool(approved),
            reason=reason,
            decided_by=checked_decided_by(decided_by),
        )
        return await route_answer(
            self._runs, self.resume_if_paused, checked_session_id(session_id), tool_call_id, answer
        )


def _message_response(
    session_id: str, run_id: str, *, queued: bool, multitask: Multitask | None = None
) -> RemoteMessageResponse:
    return RemoteMessageResponse(
        session_id=session_id,
        stream_id=session_id,
        run_id=run_id,
        queued=queued,
        multitask=multitask,
    )


def _now() -> float:
    return time.time()


@dataclass(frozen=True, kw_only=True)
class RuntimeParts:
    """What a runtime gives the executor it runs: its service, and where and how runs begin.

    Args:
        service: the protocol's service over ``executor.runs`` (an ``ExecutorService``).
        launcher: where runs happen when not in this process (a durable engine's).
        local_transport: how local sub-agents are reached (default: in process, to ``service``).
        run_guard: entered around every start and resume (a fleet host's lease).
        takeover_claim: the events a takeover appends before its ``run_started``.
        stop_grace: seconds a stopping run waits for its children (the executor's default).
    """

    service: ExecutorService
    launcher: Launcher | None = None
    local_transport: RemoteAgentTransport | None = None
    run_guard: RunGuard | None = None
    takeover_claim: TakeoverClaim | None = None
    stop_grace: float = 10.0
