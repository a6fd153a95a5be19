"""``DurableService``: the protocol's service when a durable engine runs the runs.

The executor's :class:`~helix_agents.runtime.service.ExecutorService` with
what every durable engine needs, over two engine hooks: :meth:`run_open`
(is a run of the session open in the engine?) and :meth:`signal_stop` (tell
the engine's run to stop, after the request is in the log):

- ``is_executing`` in ``/status`` is the engine's answer, since no run is held here;
- a repeated ``start`` (the same request) or a ``resume`` of a session whose
  run is open joins that run (its ids) instead of taking the session over as
  one left by a dead process (which would launch a second run);
- ``interrupt``/``abort`` record the request in the log, as always, then signal.

Everything else (idempotent start by compare-and-append, follow-ups, answers
routed at the root, streams from the log) is the service unchanged, so a
gateway cannot tell which runtime runs a session.
"""

from __future__ import annotations

import msgspec

from helix_agents.errors import AgentServerError
from helix_agents.log.projections import project_state
from helix_agents.protocol import (
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    checked_session_id,
)
from helix_agents.runtime.service import ExecutorService
from helix_agents.runtime.starts import user_messages

__all__ = ["DurableService"]


class DurableService(ExecutorService):
    """The service over a durable engine (see the module doc); engines define the two hooks."""

    async def run_open(self, session_id: str) -> bool:
        """Whether the engine has a run of the session open (running, queued or waiting)."""
        raise NotImplementedError

    async def signal_stop(self, session_id: str, kind: str, reason: str | None) -> None:
        """Tell the session's run in the engine to stop (the request is in the log)."""
        raise NotImplementedError

    async def _run_live(self, session_id: str) -> bool:
        """Whether a run of the session is being launched from here, or is open in the engine.

        Asked in that order: a launch in flight here (the start answered once
        its events were saved, the engine's start call still on its way) is
        not yet open in the engine, and once it is, it is no longer in flight;
        asking the engine first would leave a window where neither says so,
        and a repeated start would take the session over as a dead one's.
        """
        return self._runs.is_executing(session_id) or await self.run_open(session_id)

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The status from the log; ``is_executing`` from the engine."""
        status = await super().get_status(session_id)
        executing = status.status == "running" and await self.run_open(session_id)
        return msgspec.structs.replace(status, is_executing=executing)

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start a session (idempotent); a repeat while its run is open joins that run."""
        session_id = checked_session_id(request.session_id)
        log_ = await self._runs.store.read(session_id)
        if log_:
            state = project_state(log_)
            if state.status == "running" and await self._run_live(session_id):
                messages = user_messages(request.message)
                if state.agent_type != request.agent_type or (
                    state.messages[: len(messages)] != messages
                ):
                    raise AgentServerError(
                        "ALREADY_RUNNING",
                        f"session {session_id!r} exists with a different request "
                        f"(agent type {state.agent_type!r}); use a new session id",
                    )
                return RemoteStartResponse(
                    session_id=session_id, stream_id=session_id, run_id=state.run_id
                )
        return await super().start(request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume, unless the session's run is open in the engine (then: that run's ids)."""
        session_id = checked_session_id(request.session_id)
        state = await self._runs.state(session_id)
        if state.status == "running" and await self._run_live(session_id):
            if request.message:
                raise AgentServerError(
                    "ALREADY_RUNNING", f"session {session_id!r} is running: send the message"
                )
            return RemoteStartResponse(
                session_id=session_id, stream_id=session_id, run_id=state.run_id
            )
        return await super().resume(request)

    async def stop_requested(self, session_id: str, kind: str, reason: str | None) -> None:
        """A message's stop request (``interrupt``, ``rollback``) is in the log: signal it."""
        await self.signal_stop(session_id, kind, reason)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Record the interrupt in the log, then signal the session's run."""
        await super().interrupt(session_id, reason)
        await self.signal_stop(session_id, "interrupt", reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Record the abort in the log, then signal the session's run."""
        await super().abort(session_id, reason)
        await self.signal_stop(session_id, "abort", reason)
