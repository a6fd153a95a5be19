"""``SessionRuns``: the owner of running sessions, with per-session locks and active runs."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    nullcontext,
)

import anyio
from anyio.abc import TaskGroup

from helix_agents.agents.config import AgentConfig
from helix_agents.agents.define import AgentRegistry
from helix_agents.errors import (
    AgentServerError,
    ConcurrencyConflict,
    HelixError,
    OwnershipLost,
    UsageError,
)
from helix_agents.events import Event, RunStarted, SessionCreated
from helix_agents.ids import SessionId, new_run_id, validate_session_id
from helix_agents.log.projections import interrupted_step, project_state
from helix_agents.log.state import SessionState
from helix_agents.log.store import EventStore
from helix_agents.log.streaming import fold_session
from helix_agents.runtime.decide import next_turn, turn_due
from helix_agents.runtime.env import RunEnv
from helix_agents.runtime.run_loop import SessionRun
from helix_agents.runtime.writer import SessionWriter, StartCommit, stamp
from helix_agents.tracing import Span, Tracer, end_run_span, run_span, tokens_used
from helix_agents.workspaces.hub import WorkspaceHub

log = logging.getLogger("helix_agents")

__all__ = ["ActiveRun", "Launcher", "RunGuard", "SessionLocks", "SessionRuns", "TakeoverClaim"]


RunGuard = Callable[[str], AbstractAsyncContextManager[object]]
"""``guard(session_id)``: a context entered around every start and resume of a session.

A NATS fleet's runtime takes the session's lease there, before the run can begin."""
TakeoverClaim = Callable[[Sequence[Event], SessionState], list[Event]]
"""``claim(log, state)``: the events a resume appends before the ``run_started`` of a takeover.

A resume takes over when the log says the session runs and no run of it is
active here; a NATS fleet's runtime claims it there (``host_claimed``), in the same batch."""

Launcher = Callable[[AgentConfig, Sequence[Event], str], Awaitable[None]]
"""``launcher(agent, log, run_id)``: have a run of the session whose ``log`` ends with its
``run_started`` happen elsewhere (a durable engine's worker), instead of in this process.

Called once the log is durable; it returns once the run is handed over."""


class SessionLocks:
    """One lock per key (a session id), kept only while someone holds or waits for it.

    Taking a lock nobody holds does not yield to the event loop (anyio's
    ``fast_acquire``): under load, a yield there would queue each start
    behind every other task ready to run.
    """

    def __init__(self) -> None:
        self._locks: dict[str, tuple[anyio.Lock, int]] = {}

    @asynccontextmanager
    async def hold(self, session_id: str) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock for the block (other holders wait)."""
        held = self._locks.get(session_id)
        lock, users = held if held is not None else (anyio.Lock(fast_acquire=True), 0)
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


class ActiveRun:
    """A run this executor launched: its id, where it started, its end, its ``SessionRun``."""

    __slots__ = ("done", "run", "run_id", "start_seq")

    def __init__(self, run_id: str, start_seq: int) -> None:
        self.run_id = run_id
        self.start_seq = start_seq
        self.done = anyio.Event()
        self.run: SessionRun | None = None

    def span(
        self, tracer: Tracer, agent: AgentConfig, log_: Sequence[Event]
    ) -> AbstractContextManager[Span]:
        """The run's span, under the trace context stored at the session's start."""
        first, started = log_[0], log_[-1]  # a valid log begins with session_created
        created = first if isinstance(first, SessionCreated) else None
        return run_span(
            tracer,
            agent_name=agent.name,
            session_id=first.session_id,
            run_id=self.run_id,
            mode=started.mode if isinstance(started, RunStarted) else "resume",
            parent_session_id=created.parent_session_id if created is not None else None,
            root_session_id=created.root_session_id if created is not None else None,
            model=agent.llm_config.model,
            trace_context=created.trace_context if created is not None else {},
        )


class SessionRuns:
    """The owner of running sessions: where they live, who may run them, and the one launch path.

    It holds the store and the agents, one lock per session (starts and
    resumes of a session are serialised in this process, so a run is
    registered before anyone else can look for it), the runs active here,
    and the launcher, guard and claim its executor's runtime gives (set once, as the
    executor is built). The service, answer routing
    and recovery depend on it, never on the executor. ``env`` is set by the
    executor once its service (the local transport) exists.
    """

    def __init__(
        self,
        store: EventStore,
        registry: AgentRegistry,
        workspaces: WorkspaceHub,
        *,
        on_run_end: Callable[[SessionState], None] = lambda _state: None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.workspaces = workspaces
        self.env: RunEnv
        self.locks = SessionLocks()
        self.run_guard: RunGuard | None = None
        """Entered around every start and resume (a NATS host takes leases there)."""
        self.takeover_claim: TakeoverClaim | None = None
        """Events a resume that takes over a session left running appends first."""
        self.launcher: Launcher | None = None
        """Where runs happen when not here (a durable engine's runtime); None: in this process."""
        self._active: dict[str, ActiveRun] = {}
        self._tg: TaskGroup | None = None
        self._on_run_end = on_run_end

    @property
    def task_group(self) -> TaskGroup | None:
        """The executor's task group while it is open (every run lives there)."""
        return self._tg

    @task_group.setter
    def task_group(self, tg: TaskGroup | None) -> None:
        self._tg = tg

    def __len__(self) -> int:
        return len(self._active)

    def active(self, session_id: str) -> ActiveRun | None:
        """The run of ``session_id`` active here, if any."""
        return self._active.get(session_id)

    def sessions(self) -> list[str]:
        """The sessions with a run active here, sorted."""
        return sorted(self._active)

    def guarded(self, session_id: str) -> AbstractAsyncContextManager[object]:
        """The :attr:`run_guard` around something that can begin a run of ``session_id``."""
        if self.run_guard is None:
            return nullcontext()
        return self.run_guard(session_id)

    @asynccontextmanager
    async def hold(self, session_id: SessionId) -> AsyncIterator[None]:
        """Hold ``session_id``'s lock and guard: the block alone may start or resume it."""
        async with self.locks.hold(session_id), self.guarded(session_id):
            yield

    def is_executing(self, session_id: str, state: SessionState | None = None) -> bool:
        """True while a run of the session is active here (and, given ``state``, says running)."""
        if session_id not in self._active:
            return False
        return state is None or state.status == "running"

    async def state(self, session_id: str) -> SessionState:
        """The session's state folded from its log; ``NOT_FOUND`` if it has none."""
        state = await fold_session(self.store, validate_session_id(session_id))
        if state is None:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        return state

    async def wait_idle(self, session_id: str) -> None:
        """Wait until no run of ``session_id`` is active here."""
        active = self._active.get(session_id)
        while active is not None:
            await active.done.wait()
            active = self._active.get(session_id)

    async def append(self, session_id: str, after_seq: int, events: Sequence[Event]) -> list[Event]:
        """Stamp ``events`` and append them at ``after_seq``; the stamped events.

        Raises:
            ConcurrencyConflict: the log no longer ends at ``after_seq``.
        """
        stamped = stamp(session_id, after_seq, events)
        await self.store.append(session_id, stamped, after_seq)
        return stamped

    async def begin_run(
        self,
        agent: AgentConfig,
        session_id: str,
        log_: Sequence[Event],
        batch: Sequence[Event],
        run_id: str,
    ) -> None:
        """Append ``batch`` (ending with the run's ``run_started``) after ``log_``, then launch.

        The one "append, then launch" path: of starts (``log_`` empty, the
        batch beginning with ``session_created``), resumes, follow-ups and
        takeovers. (A start on a store that shares its first commit with the
        run's launches first instead: :meth:`launch` with ``unsaved``.)

        Raises:
            ConcurrencyConflict: the log moved; nothing was appended or launched.
        """
        stamped = await self.append(session_id, log_[-1].seq if log_ else 0, batch)
        self.launch(agent, [*log_, *stamped], run_id)

    async def begin_next_turn(self, session_id: str) -> str | None:
        """Begin the session's waiting turn that is due (``decide.next_turn``); its run id.

        Called where a run ends (here, and in a durable engine's steps). By
        compare-and-append at the log's end: a message or a resume that got
        there first wins, and the turn waits for the end of that run. A store
        error is logged (the turn stays in the log: the next run's end, a
        message or a resume begins it). None: no turn was due.
        """
        try:
            while True:
                log_ = await self.store.read(session_id)
                state = project_state(log_) if log_ else None
                if state is None or turn_due(state) is None:
                    return None
                agent = self.registry.get(state.agent_type)
                if agent is None:
                    return None
                run_id = new_run_id()
                try:
                    await self.begin_run(
                        agent, session_id, log_, next_turn(agent, state, run_id), run_id
                    )
                except ConcurrencyConflict:
                    continue
                return run_id
        except HelixError as error:
            log.error("could not begin the next turn of %s: %s", session_id, error)
            return None

    def launch(
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
        self._active[session_id] = active
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
            if self.launcher is not None:
                # Run elsewhere: the start is saved first, then the run handed over.
                try:
                    await writer.save_start()
                except OwnershipLost:
                    return
                await self.launcher(agent, log_, active.run_id)
                return
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
            self._on_run_end(writer.state)
            if turn_due(writer.state) is not None:
                await self.begin_next_turn(session_id)
        finally:
            if start is not None and not start.settled:
                await _settle_start(writer, start)
            if self._active.get(session_id) is active:
                del self._active[session_id]
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
