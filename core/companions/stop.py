"""Stopping companions: ``companion__terminateChild`` and the parent's abort (specs/companions.md).

A stop aborts the child and follows it until it acknowledges (bounded by the
stop grace); a child that ended on its own first keeps its outcome.
"""

from __future__ import annotations

import logging

import anyio

from helix_agents.children.target import ChildTarget
from helix_agents.companions.base import CompanionCore, _checked_output, _turn_end
from helix_agents.companions.refs import LIVE, ended_events, no_child, terminated_events
from helix_agents.companions.tools import CompanionArgs
from helix_agents.errors import AgentServerError, HelixError
from helix_agents.hitl.gates import Waiting
from helix_agents.log.state import SubSessionRef
from helix_agents.messages import ToolCall
from helix_agents.protocol import RemoteStatusResponse

__all__ = ["CompanionStopping"]

log = logging.getLogger("helix_agents")


class CompanionStopping:
    """The stop operations of :class:`~helix_agents.core.companions.Companions`."""

    def __init__(self, core: CompanionCore) -> None:
        self.core = core

    async def terminate(self, call: ToolCall, args: CompanionArgs, waiting: Waiting) -> None:
        """``companion__terminateChild``: abort a live child and record it terminated."""
        assert args.name is not None
        name = args.name
        ref, _ = await self.core.synced(name)
        if ref is None:
            await self.core.answer(call, error=no_child(name))
            return
        if ref.status not in (*LIVE, "interrupted"):
            await self.core.answer(call, {"name": name, "terminated": False, "status": ref.status})
            return
        sid = ref.sub_session_id
        if not await self._stop(ref, "terminated by its parent"):
            # It ended on its own before the stop reached it: say so, keep its outcome.
            current = self.core.writer.state.sub_sessions[sid]
            await self.core.answer(
                call, {"name": name, "terminated": False, "status": current.status}
            )
            return
        await self.core.answer(
            call,
            {"name": name, "terminated": True, "status": "terminated"},
            extra=lambda state: terminated_events(sid, "terminated"),
        )

    async def _stop(self, ref: SubSessionRef, why: str) -> bool:
        """Abort a child and follow it until it acknowledges; False if it ended on its own.

        A child that completed (or failed by itself) before the abort reached it
        keeps its outcome, recorded here.
        """
        target = self.core.target(ref)
        sid = ref.sub_session_id
        await self.core.env.release_workspaces(sid)  # a persistent workspace_lifetime ends here
        try:
            await target.retry(lambda: target.transport.abort(sid, why))
        except AgentServerError as exc:
            if exc.code not in ("ALREADY_COMPLETED", "NOT_FOUND"):
                raise
        final = await self._acknowledged(target)
        if final is not None:
            final = _checked_output(target, final)
        if final is not None and (
            final.status == "completed"
            or (final.status == "failed" and not (final.error or "").startswith("aborted"))
        ):
            await self.core.writer.append_with(lambda latest: ended_events(latest, ref, final))
            return False
        return True

    async def _acknowledged(self, target: ChildTarget) -> RemoteStatusResponse | None:
        """Follow a stopped child until its run ends (bounded); its status then."""
        sid = target.session_id
        try:
            status: RemoteStatusResponse = await target.retry(
                lambda: target.transport.get_status(sid)
            )
        except AgentServerError as exc:
            if exc.code == "NOT_FOUND":
                return None
            raise
        if status.status == "running":
            with anyio.move_on_after(self.core.env.stop_grace):
                await _turn_end(target, status.latest_sequence)
            status = await target.retry(lambda: target.transport.get_status(sid))
        return status

    async def terminate_live(self, reason: str | None) -> None:
        """Terminate every live companion no call follows (the parent is being aborted).

        Best effort, as the stop of any child: one that cannot be reached is
        logged and left as the log knows it.
        """
        why = f"its parent was aborted: {reason}" if reason else "its parent was aborted"
        async with anyio.create_task_group() as tg:
            for ref in list(self.core.writer.state.sub_sessions.values()):
                busy = self.core.open_calls.following(ref.sub_session_id)
                if ref.mode == "persistent" and ref.status in LIVE and not busy:
                    tg.start_soon(self._terminate_one, ref, why)

    async def _terminate_one(self, ref: SubSessionRef, why: str) -> None:
        sid = ref.sub_session_id
        try:
            if not await self._stop(ref, why):
                return
        except (HelixError, OSError) as exc:
            log.warning("could not terminate companion %s: %s", sid, exc)
            return
        await self.core.writer.append_with(
            lambda state: (
                terminated_events(sid, why) if state.sub_sessions[sid].status in LIVE else []
            )
        )
