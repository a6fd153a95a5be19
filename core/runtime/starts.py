"""Starting and resuming sessions: the half of ``ExecutorService`` that launches runs.

A start is idempotent by compare-and-append of ``session_created`` at seq 0
(or, on SQLite, by its run's first commit: ``specs/runtime.md``); a start or
a plain resume racing another of the same session in this process gets that
one's answer (:class:`PendingAnswer`), even if its run has ended by then. A
retried start of a session left running by a process that died takes it
over. :class:`~helix_agents.runtime.service.ExecutorService` holds one
:class:`SessionStarts` and adds follow-ups, status, stops and answers.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import anyio
import msgspec

from helix_agents.agents.config import AgentConfig
from helix_agents.children.target import fits
from helix_agents.errors import AgentServerError, ConcurrencyConflict, UsageError
from helix_agents.events import Event, RunStarted, SessionCreated, Webhook
from helix_agents.ids import SessionId, is_schedule_log, new_run_id
from helix_agents.log.projections import project_state
from helix_agents.log.state import SessionState
from helix_agents.messages import UserMessage
from helix_agents.protocol import (
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    checked_session_id,
)
from helix_agents.runtime.runs import SessionRuns
from helix_agents.runtime.writer import stamp
from helix_agents.tracing import session_trace_context
from helix_agents.webhooks.gate import WebhookGate

__all__ = ["PendingAnswer", "SessionStarts", "already_finished", "user_messages"]


def user_messages(message: str | Sequence[UserMessage] | None) -> list[UserMessage]:
    """A request's message as user messages (none, one string, or a list)."""
    if message is None:
        return []
    if isinstance(message, str):
        return [UserMessage(content=message)]
    return list(message)


def already_finished(state: SessionState) -> AgentServerError:
    """``ALREADY_COMPLETED`` for a session whose last run has ended for good."""
    return AgentServerError("ALREADY_COMPLETED", f"session {state.session_id!r} is {state.status}")


class PendingAnswer:
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


class SessionStarts:
    """Start, resume and take over the sessions of ``runs`` (the service's half that launches)."""

    def __init__(self, runs: SessionRuns) -> None:
        self._runs = runs
        self._starting: dict[str, PendingAnswer] = {}  # session -> the start deciding it here
        self._resuming: dict[str, PendingAnswer] = {}  # session -> the plain resume deciding it
        self.webhook_gate: WebhookGate | None = None
        """Checks a start's webhook and follows its session (an ``AgentServer``'s deliverer)."""

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Create and run a session; idempotent for the same id and request.

        Raises :class:`AgentServerError`: ``NOT_FOUND`` (unknown agent type),
        ``INVALID_REQUEST`` (bad id or state), ``ALREADY_RUNNING`` (the id exists
        with a different agent type or message), ``ALREADY_COMPLETED``.
        """
        session_id = checked_session_id(request.session_id)
        if is_schedule_log(session_id):
            raise AgentServerError(
                "INVALID_REQUEST",
                f"session ids beginning 'cron:' are kept for schedules: {session_id}",
            )
        for related in (
            request.parent_session_id,
            request.root_session_id,
            request.workspace_session_id,
        ):
            if related is not None:
                checked_session_id(related)
        agent = self._runs.registry.get(request.agent_type)
        if agent is None:
            raise AgentServerError("NOT_FOUND", f"agent type not found: {request.agent_type}")
        inheriting = self._runs.workspaces.start_problem(agent, request)  # workspaces
        if inheriting is not None:
            raise AgentServerError("INVALID_REQUEST", inheriting)
        traced = session_trace_context(  # specs/otel.md
            self._runs.env.tracer, request.trace_context, agent.name, session_id
        )
        messages = user_messages(request.message)
        try:
            initial = agent.initial_state(_seed_state(agent, request))
        except UsageError as exc:
            raise AgentServerError("INVALID_REQUEST", str(exc)) from exc
        webhook = await self.webhook_of(request)
        run_id = new_run_id()
        now = time.time()
        [created] = stamp(
            session_id,
            0,
            [
                SessionCreated(
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
                    strict=request.strict is True,
                    owner=request.owner,
                    webhook=msgspec.UNSET if webhook is None else webhook,
                )
            ],
            now,
        )
        [started] = stamp(session_id, 1, [RunStarted(run_id=run_id)], now)
        ongoing = self._starting.get(session_id)
        if ongoing is not None:
            # The same id is being started here now: the same request gets
            # the same answer, even if that run has ended by then.
            joined = await ongoing.answer()
            if joined is not None and ongoing.same_request(agent.name, messages):
                return joined
        answer = await _answered_once(
            self._starting,
            session_id,
            PendingAnswer(agent.name, messages),
            lambda: self._start_locked(session_id, agent, messages, created, started),
        )
        if webhook is not None and self.webhook_gate is not None:
            self.webhook_gate.watch(session_id)
        return answer

    async def webhook_of(self, request: RemoteStartRequest) -> Webhook | None:
        """The start's webhook, checked by the gate (``INVALID_REQUEST`` when there is none)."""
        if not isinstance(request.webhook, Webhook):
            return None
        if self.webhook_gate is None:
            raise AgentServerError(
                "INVALID_REQUEST",
                "this server delivers no webhooks: serve it with a webhook secret "
                "(serve --webhook-secret, or $HELIX_WEBHOOK_SECRET)",
            )
        return await self.webhook_gate.check(request.webhook)

    async def _start_locked(
        self,
        session_id: SessionId,
        agent: AgentConfig,
        messages: list[UserMessage],
        created: SessionCreated,
        started: RunStarted,
    ) -> RemoteStartResponse:
        run_id = created.run_id
        async with self._runs.hold(session_id):
            store = self._runs.store
            if not getattr(store, "shares_start_commit", False):
                # A commit costs a round trip, not an fsync (memory, JetStream, a
                # store that does not say): the start is committed on its own, and
                # a retried start finds the session by the conflict.
                try:
                    await self._runs.begin_run(agent, session_id, [], [created, started], run_id)
                except ConcurrencyConflict:  # retried: a memory store, or a fleet's (claims)
                    return await self._existing(session_id, agent, messages, take_over=True)
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
            start = self._runs.launch(agent, [created, started], run_id, unsaved=2)
            assert start is not None
            try:
                await start.wait()
            except ConcurrencyConflict:  # another process created it meanwhile
                return await self._existing(session_id, agent, messages)
        return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=run_id)

    async def _existing(
        self,
        session_id: SessionId,
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
            log_ = await self._runs.store.read(session_id)
        state = project_state(log_)
        first = state.messages[: len(messages)]
        if state.agent_type != agent.name or first != messages:
            raise AgentServerError(
                "ALREADY_RUNNING",
                f"session {session_id!r} exists with a different request "
                f"(agent type {state.agent_type!r}); use a new session id",
            )
        if state.is_terminal:
            raise already_finished(state)
        if (
            take_over
            and state.status == "running"
            and self._runs.takeover_claim is None
            and not self._runs.is_executing(session_id, state)
        ):
            resumed = await self._resume_locked(session_id, [], log_=log_)
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
        return await _answered_once(
            self._resuming,
            session_id,
            PendingAnswer("", []),
            lambda: self._resume_here(session_id, []),
        )

    async def _resume_here(
        self, session_id: SessionId, messages: list[UserMessage]
    ) -> RemoteStartResponse:
        async with self._runs.hold(session_id):
            response = await self._resume_locked(session_id, messages)
        assert response is not None
        return response

    async def resume_if_paused(self, session_id: str) -> bool:
        """Resume ``session_id`` if it is paused (its answers came in); True if it was.

        Anything else is left as it is: a running session takes the answers in,
        an interrupt that came first stays in force.
        """
        session_id = checked_session_id(session_id)
        async with self._runs.hold(session_id):
            return await self._resume_locked(session_id, [], paused_only=True) is not None

    async def _resume_locked(
        self,
        session_id: SessionId,
        messages: list[UserMessage],
        *,
        paused_only: bool = False,
        log_: Sequence[Event] | None = None,
    ) -> RemoteStartResponse | None:
        """Resume under the session's lock; ``log_``: the log just read, if the caller has it."""
        while True:
            if log_ is None:
                log_ = await self._runs.store.read(session_id)
            if not log_:
                raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
            state = project_state(log_)
            if state.is_terminal:
                raise AgentServerError(
                    "ALREADY_COMPLETED", f"session {session_id!r} is {state.status}"
                )
            if paused_only and state.status != "paused":
                return None
            active = self._runs.active(session_id)
            if active is not None and state.status != "running":
                # Its run recorded its end (it paused as an answer arrived) and
                # is winding down: let it go, then start the new run.
                await active.done.wait()
                log_ = None
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
            agent = self._runs.registry.get(state.agent_type)
            if agent is None:
                raise AgentServerError(
                    "NOT_FOUND",
                    f"agent type not found: {state.agent_type} (session {session_id!r})",
                )
            claim = self._runs.takeover_claim
            # Left running with no run here: a takeover, claimed in the same batch.
            batch = claim(log_, state) if claim is not None and state.status == "running" else []
            run_id = new_run_id()
            batch.append(RunStarted(run_id=run_id, mode="resume", messages=messages))
            try:
                await self._runs.begin_run(agent, session_id, log_, batch, run_id)
            except ConcurrencyConflict:
                log_ = None
                continue  # someone else moved the log: decide again on the new state
            return RemoteStartResponse(session_id=session_id, stream_id=session_id, run_id=run_id)


def _seed_state(agent: AgentConfig, request: RemoteStartRequest) -> dict[str, Any] | None:
    """The state a start gives: its own, else a child's input when it fits the state schema.

    A child (local or remote) starts with its custom state seeded from the
    parsed input, as the seeds' remote agent server does (specs/runtime.md).
    """
    if request.state is not None or request.parent_session_id is None:
        return request.state
    given = request.input
    return given if isinstance(given, dict) and fits(agent.state_schema, given) else None


def _ancestors(request: RemoteStartRequest) -> list[str]:
    if request.ancestors is not None:
        return list(request.ancestors)
    chain = [request.root_session_id, request.parent_session_id]
    ancestors = [sid for sid in chain if sid is not None]
    return ancestors[-1:] if len(set(ancestors)) == 1 else ancestors


async def _answered_once(
    pending: dict[str, PendingAnswer],
    session_id: str,
    mine: PendingAnswer,
    decide: Callable[[], Awaitable[RemoteStartResponse]],
) -> RemoteStartResponse:
    """Decide, with ``mine`` there for requests that join it; settle it with the answer."""
    pending.setdefault(session_id, mine)
    response: RemoteStartResponse | None = None
    try:
        response = await decide()
    finally:
        if pending.get(session_id) is mine:
            del pending[session_id]
        mine.settle(response)
    return response
