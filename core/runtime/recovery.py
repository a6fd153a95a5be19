"""Recovering a store another process left behind, and the expiry timers of pending inputs.

``recover_sessions`` is :meth:`AgentExecutor.recover`; :class:`ExpiryTimers` answers
an expiring entry of a paused root when its time comes (``answers.watch_expiry``).
"""

from __future__ import annotations

import logging

import anyio

from helix_agents.errors import AgentServerError, DamagedLogError, LogError
from helix_agents.events import PendingInput
from helix_agents.hitl.routing import Resume, expiring, watch_expiry
from helix_agents.ids import SessionId, is_schedule_log
from helix_agents.log.state import SessionState
from helix_agents.log.streaming import fold_session
from helix_agents.protocol import RemoteResumeRequest
from helix_agents.runtime.decide import turn_due
from helix_agents.runtime.runs import SessionRuns
from helix_agents.runtime.service import ExecutorService

__all__ = ["ExpiryTimers", "recover_sessions"]

log = logging.getLogger("helix_agents")


async def recover_sessions(
    runs: SessionRuns, service: ExecutorService, expiry: ExpiryTimers
) -> tuple[list[str], dict[str, str]]:
    """Resume every session whose log says ``running`` but that no run in ``runs`` holds,
    and begin the waiting turn due of one whose run ended (``decide.turn_due``).

    As :meth:`AgentExecutor.recover` (its documentation). Returns the ids
    resumed and the damaged sessions (id -> what), quarantined.
    """
    recovered: list[str] = []
    damaged: dict[str, str] = {}
    for session_id in await runs.store.list_sessions():
        if is_schedule_log(session_id):
            continue  # the schedules' log is no session
        try:
            if runs.active(session_id) is not None:
                continue
            folded = await fold_session(runs.store, session_id)
            if folded is None or runs.active(session_id) is not None:
                continue
            state = folded
        except (DamagedLogError, LogError) as exc:
            damaged[session_id] = str(exc)
            continue
        expiry.watch(state)
        if turn_due(state) is not None:  # its run ended, the process died before the turn
            if await runs.begin_next_turn(session_id) is not None:
                recovered.append(session_id)
            continue
        if state.status != "running" or runs.registry.get(state.agent_type) is None:
            continue
        try:
            await service.resume(RemoteResumeRequest(session_id=session_id))
        except AgentServerError as exc:
            log.warning("could not recover session %s: %s", session_id, exc)
            continue
        except (DamagedLogError, LogError) as exc:
            damaged[session_id] = str(exc)
            continue
        recovered.append(session_id)
    if damaged:
        log.error(
            "%d damaged session(s) quarantined (they answer INTERNAL_ERROR; "
            "see 'helix-agents check'): %s",
            len(damaged),
            "; ".join(damaged[key] for key in sorted(damaged)),
        )
    return recovered, dict(sorted(damaged.items()))


class ExpiryTimers:
    """One timer per expiring open entry of a paused root, in the executor's task group."""

    def __init__(self, runs: SessionRuns, resume: Resume) -> None:
        self._runs = runs
        self._resume = resume
        self._timers: dict[tuple[str, str], anyio.CancelScope] = {}

    def watch(self, state: SessionState) -> None:
        """Start a timer for each expiring open entry of a paused root (once per entry)."""
        tg = self._runs.task_group
        if tg is None:
            return
        for entry in expiring(state):
            key = (state.session_id, entry.tool_call_id)
            if key in self._timers:
                continue
            self._timers[key] = anyio.CancelScope()
            # A stored log's id was checked when it was appended.
            tg.start_soon(self._expire, SessionId(state.session_id), entry)

    def cancel(self) -> None:
        """Cancel every waiting timer (the executor is closing; ``recover()`` re-arms them)."""
        for timer in list(self._timers.values()):
            timer.cancel()

    async def _expire(self, session_id: SessionId, entry: PendingInput) -> None:
        key = (session_id, entry.tool_call_id)
        try:
            with self._timers[key]:
                await watch_expiry(self._runs, self._resume, session_id, entry, anyio.sleep)
        finally:
            self._timers.pop(key, None)
