"""Recovering a store another process left behind, and the expiry timers of pending inputs.

``recover_sessions`` is :meth:`AgentExecutor.recover`; :class:`ExpiryTimers` answers
an expiring entry of a paused root when its time comes (``answers.watch_expiry``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import anyio

from helix_agents.errors import AgentServerError, DamagedLogError, LogError
from helix_agents.events import PendingInput
from helix_agents.hitl.routing import expiring, watch_expiry
from helix_agents.log.projections import project_state
from helix_agents.log.state import SessionState
from helix_agents.protocol import RemoteResumeRequest

if TYPE_CHECKING:
    from helix_agents.runtime.executor import AgentExecutor

__all__ = ["ExpiryTimers", "recover_sessions"]

log = logging.getLogger("helix_agents")


async def recover_sessions(executor: AgentExecutor) -> list[str]:
    """Resume every session whose log says ``running`` but that no run of ``executor`` holds.

    As :meth:`AgentExecutor.recover` (its documentation); sets its ``damaged_sessions``.
    """
    recovered: list[str] = []
    damaged: dict[str, str] = {}
    for session_id in await executor.store.list_sessions():
        try:
            log_ = await executor.store.read(session_id)
            if not log_ or session_id in executor._runs:
                continue
            state = project_state(log_)
        except (DamagedLogError, LogError) as exc:
            damaged[session_id] = str(exc)
            continue
        executor._expiry.watch(state)
        if state.status != "running" or executor.registry.get(state.agent_type) is None:
            continue
        try:
            await executor.service.resume(RemoteResumeRequest(session_id=session_id))
        except AgentServerError as exc:
            log.warning("could not recover session %s: %s", session_id, exc)
            continue
        except (DamagedLogError, LogError) as exc:
            damaged[session_id] = str(exc)
            continue
        recovered.append(session_id)
    executor.damaged_sessions = dict(sorted(damaged.items()))
    if damaged:
        log.error(
            "%d damaged session(s) quarantined (they answer INTERNAL_ERROR; "
            "see 'helix-agents check'): %s",
            len(damaged),
            "; ".join(executor.damaged_sessions.values()),
        )
    return recovered


class ExpiryTimers:
    """One timer per expiring open entry of a paused root, in the executor's task group."""

    def __init__(self, executor: AgentExecutor) -> None:
        self._executor = executor
        self._timers: dict[tuple[str, str], anyio.CancelScope] = {}

    def watch(self, state: SessionState) -> None:
        """Start a timer for each expiring open entry of a paused root (once per entry)."""
        tg = self._executor._tg
        if tg is None:
            return
        for entry in expiring(state):
            key = (state.session_id, entry.tool_call_id)
            if key in self._timers:
                continue
            self._timers[key] = anyio.CancelScope()
            tg.start_soon(self._expire, state.session_id, entry)

    def cancel(self) -> None:
        """Cancel every waiting timer (the executor is closing; ``recover()`` re-arms them)."""
        for timer in list(self._timers.values()):
            timer.cancel()

    async def _expire(self, session_id: str, entry: PendingInput) -> None:
        key = (session_id, entry.tool_call_id)
        try:
            with self._timers[key]:
                await watch_expiry(self._executor, session_id, entry, anyio.sleep)
        finally:
            self._timers.pop(key, None)
