"""A bounded shutdown for ``helix-agents serve``: drain for ``grace`` seconds, then interrupt.

On the first SIGTERM or SIGINT the server stops listening (new connections
are refused at once, ``/health`` included: a load balancer sees the port
closed), closes idle connections and lets requests and streams under way go
on. Runs still going after ``grace`` seconds are interrupted: an
``interrupt_requested`` event with :data:`SHUTDOWN_REASON` in each log, so
each run records ``interrupted`` and stops, and the next ``serve`` on the same
store resumes them. Their streams get a few seconds to send their last event,
then the remaining connections are closed and the process exits. A ``GET /sse``
stream of a session with no run executing here (paused on a client tool or an
approval; with no ``agents``, any: their runs are elsewhere) ends at once
with a recoverable ``error`` frame, its reader free to reconnect elsewhere or
after the restart; one whose run pauses during the grace ends when it does. A second
signal starts that at once; a third stops waiting for connections (uvicorn's
forced exit).

A library error the app's lifespan raises at startup (a toolset that will not
open, a store out of reach) is raised by :meth:`GracefulServer.serve` itself,
for the CLI to print in one line, instead of uvicorn logging its traceback and
exiting with status 3.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

import anyio
import uvicorn

from helix_agents._aio import api_error
from helix_agents.errors import HelixError
from helix_agents.ids import is_schedule_log
from helix_agents.protocol import RemoteResumeRequest
from helix_agents.server.agent_server import AgentServer
from helix_agents.server.streams.closing import OpenStreams

__all__ = ["SHUTDOWN_REASON", "GracefulServer", "resume_interrupted_by_shutdown"]

log = logging.getLogger("helix_agents.server")

SHUTDOWN_REASON = "server shutdown (resumed on restart)"
"""The reason of the interrupts a shutdown records; ``serve`` resumes those sessions."""

_TICK = 0.1  # seconds between looks at the runs and signals (uvicorn's own tick)
_STOP_WAIT = 15.0  # seconds interrupted runs get to record their end (children's acks included)
_EXIT_WAIT = 10.0  # seconds the on_exit call (a trace flush) may take
_STREAMS_END = 5.0  # seconds the streams of interrupted runs get to send their end


class GracefulServer(uvicorn.Server):
    """uvicorn with a bounded drain (see the module) and resumption of what it interrupted.

    Args:
        config: uvicorn's configuration; its ``timeout_graceful_shutdown``
            should be None (the grace here bounds the drain).
        grace: seconds to let runs and connections finish after the first signal.
        agents: the served ``AgentServer`` (None for a gateway with no runs of
            its own, such as ``serve --nats``).
        on_exit: a blocking call made (on a worker thread, at most
            ``_EXIT_WAIT`` seconds) once the shutdown is done, before uvicorn
            raises the signal again (which may end the process): flushing
            traces, say.
        streams: the app's open ``GET /sse`` streams (``create_http_app``'s
            ``app.streams``), those with no run here ended at once on shutdown.
    """

    def __init__(
        self,
        config: uvicorn.Config,
        *,
        grace: float,
        agents: AgentServer | None = None,
        on_exit: Callable[[], object] | None = None,
        streams: OpenStreams | None = None,
    ) -> None:
        self._startup = _StartupError(config.app)
        if not isinstance(config.app, str):  # an import string is loaded by uvicorn itself
            config.app = self._startup  # read by uvicorn when it loads the config, in serve()
        super().__init__(config)
        self.grace = grace
        self.agents = agents
        self.on_exit = on_exit
        self.streams = streams
        self._signals = 0
        self._hurry = False

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """First signal: drain; second: interrupt the runs now; third: stop waiting."""
        self._signals += 1
        if self._signals == 1:
            super().handle_exit(sig, frame)
            log.info("shutting down: %g s for runs and connections to finish", self.grace)
        elif self._signals == 2:
            self._hurry = True
            log.info("second %s: interrupting the runs now", signal.Signals(sig).name)
        else:
            self.force_exit = True

    @property
    def forced(self) -> bool:
        """True once a second signal cut the drain short."""
        return self._signals > 1

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's signal capture; a Ctrl-C whose drain ended cleanly is not raised again.

        uvicorn raises the captured signals again after the shutdown (so a
        ``KeyboardInterrupt`` ends the process with 130); after a clean drain
        the CLI exits 0 instead. A forced stop (a second signal) and SIGTERM
        keep uvicorn's behaviour.
        """
        with super().capture_signals():
            yield
            if not self.forced:
                captured = [sig for sig in self._captured_signals if sig != signal.SIGINT]
                self._captured_signals[:] = captured

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Start as uvicorn does, then resume the sessions the last shutdown interrupted.

        Raises:
            HelixError: what the app's lifespan raised at startup (uvicorn
                would exit with status 3 after logging its traceback).
        """
        try:
            await super().startup(sockets)
        except SystemExit:
            error = self._startup.error
            if error is None:
                raise
        else:
            error = None
        if error is not None:
            raise error  # out of the handler: the error alone, not "during SystemExit"
        if self.started and self.agents is not None and not self.should_exit:
            await resume_interrupted_by_shutdown(self.agents)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """uvicorn's shutdown, bounded by the drain running beside it."""
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._drain)
            await super().shutdown(sockets)
            tg.cancel_scope.cancel()
        if self.on_exit is not None:
            with anyio.move_on_after(_EXIT_WAIT):
                await anyio.to_thread.run_sync(self.on_exit, abandon_on_cancel=True)

    def _busy(self) -> bool:
        runs = self.agents.executor.active_sessions() if self.agents is not None else []
        return bool(runs or self.server_state.connections)

    async def _drain(self) -> None:
        deadline = anyio.current_time() + self.grace
        # Polled, as uvicorn polls its own flags: a signal handler can only set
        # a flag, and runs ending or connections closing signal nothing.
        while True:
            self._end_idle_streams()
            if not self._busy() or anyio.current_time() >= deadline or self._hurry:
                break
            await anyio.sleep(_TICK)
        if self.agents is not None and await self._interrupt_runs(self.agents):
            # The streams of the interrupted runs send their last event and end.
            ending = anyio.current_time() + _STREAMS_END
            while self.server_state.connections and anyio.current_time() < ending:  # noqa: ASYNC110
                await anyio.sleep(_TICK)
        for connection in list(self.server_state.connections):
            connection.transport.close()  # streams of paused sessions, slow clients

    def _end_idle_streams(self) -> None:
        """End the streams of sessions with no run executing here (paused, or run elsewhere)."""
        if self.streams is None or not len(self.streams):
            return
        executor = self.agents.executor if self.agents is not None else None
        ended = self.streams.end(
            lambda session_id: executor is None or not executor.is_executing(session_id)
        )
        if ended:
            log.info("ended %d stream(s) of sessions with no run here (readers reconnect)", ended)

    async def _interrupt_runs(self, agents: AgentServer) -> bool:
        """Interrupt the top-level runs still going and wait (bounded) for them; whether any."""
        executor = agents.executor
        active = executor.active_sessions()
        if not active:
            return False
        roots: list[str] = []
        for session_id in active:
            try:
                state = await executor.state(session_id)
            except HelixError as exc:
                log.warning("cannot read session %s to interrupt it: %s", session_id, exc)
                continue
            if state.parent_session_id not in active:  # its parent stops its children
                roots.append(session_id)
        log.warning("interrupting %d run(s) still going: %s", len(roots), roots)
        for session_id in roots:
            try:
                await agents.interrupt(session_id, SHUTDOWN_REASON)
            except HelixError as exc:  # it ended meanwhile, or the store failed
                log.warning("could not interrupt session %s: %s", session_id, exc)
        with anyio.move_on_after(_STOP_WAIT):
            for session_id in executor.active_sessions():
                await executor.wait_idle(session_id)
        return True


async def resume_interrupted_by_shutdown(agents: AgentServer) -> list[str]:
    """Resume the top-level sessions a shutdown interrupted (:data:`SHUTDOWN_REASON`).

    A session with a parent is left to its parent, which re-opens its
    children when it resumes. Returns the ids resumed; a session that cannot
    be read or resumed is logged and skipped.
    """
    executor = agents.executor
    resumed: list[str] = []
    for session_id in await agents.store.list_sessions():
        if is_schedule_log(session_id):
            continue  # the schedules' log is no session
        if session_id in executor.active_sessions() or session_id in executor.damaged_sessions:
            continue  # running already, or quarantined (recover() named it)
        try:
            state = await executor.state(session_id)
            if (
                state.status != "interrupted"
                or state.stop_reason != SHUTDOWN_REASON
                or state.parent_session_id is not None
                or executor.registry.get(state.agent_type) is None
            ):
                continue
            await agents.resume(RemoteResumeRequest(session_id=session_id))
        except HelixError as exc:
            log.warning("could not resume session %s after the shutdown: %s", session_id, exc)
            continue
        resumed.append(session_id)
    if resumed:
        log.info("resumed %d session(s) the last shutdown interrupted: %s", len(resumed), resumed)
    return resumed


class _StartupError:
    """The app, with a library error its lifespan raises at startup kept, not logged as a traceback.

    Starlette sends ``lifespan.startup.failed`` with the traceback as its
    message from inside its ``except`` block, so the error is at hand there:
    uvicorn then logs only that startup failed, and :class:`GracefulServer`
    raises the error.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.error: HelixError | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.app, name)  # the app's own attributes (streams...) stay reachable

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return

        async def quiet(message: Any) -> None:
            failed = sys.exc_info()[1]
            if message["type"] == "lifespan.startup.failed" and failed is not None:
                self.error = api_error(failed)
                if self.error is not None:
                    message = {**message, "message": ""}
            await send(message)

        await self.app(scope, receive, quiet)
