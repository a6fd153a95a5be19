"""Spawning companions: ``companion__spawnAgent`` and its re-run (specs/companions.md).

A spawn records the child (a fresh session, or a re-consulted one that keeps
its memory), starts its turn and, for a blocking entry, follows it through a
:class:`CompanionLink` to the end of that turn. A re-run of the same call (a
restarted, resumed or re-entered parent) reaches the same child again.
"""

from __future__ import annotations

from typing import Any

from helix_agents.agents.config import PersistentAgent
from helix_agents.children.link import ChildLink
from helix_agents.children.target import (
    ChildOutcome,
    ChildTarget,
    companion_session_id,
    companion_target,
)
from helix_agents.companions.base import CompanionCore, _CallFailure
from helix_agents.companions.refs import (
    ENDED,
    LIVE,
    auto_name,
    latest_child,
    outcome_view,
    recorded_outcome,
    segment_failed,
    segment_start,
    supersede,
    undelivered,
)
from helix_agents.companions.tools import CompanionArgs, check_arguments
from helix_agents.events import (
    CompletionDelivered,
    Event,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    UsageRecorded,
)
from helix_agents.hitl.gates import Waiting
from helix_agents.ids import MAX_SESSION_ID_LENGTH
from helix_agents.log.state import SessionState, SubSessionRef
from helix_agents.messages import ToolCall
from helix_agents.protocol import RemoteStartRequest
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, tool_start
from helix_agents.workspaces.hub import inherited_workspace

__all__ = ["CompanionLink", "CompanionSpawning"]


class CompanionLink(ChildLink):
    """A blocking companion call following its child's turn to its end."""

    def __init__(self, companions: CompanionCore, call: ToolCall, target: ChildTarget, name: str):
        super().__init__(
            companions.writer, companions.agent, call, target, companions.env, companions.fire
        )
        self.name = name

    def finish_events(self, outcome: ChildOutcome) -> list[Event]:
        """The child's end, the call's ``{name, status, output}`` result and its delivery."""
        result: dict[str, Any] = {"name": self.name, "status": outcome.status}
        if outcome.status == "completed":
            result["output"] = outcome.output
        elif outcome.error is not None:
            result["error"] = outcome.error
        ref = self.writer.state.sub_sessions.get(self.session_id)
        delivered = ref is not None and ref.completion_delivered and ref.status in ENDED
        return [
            *self._segment_end(outcome),
            *result_events(
                self.agent,
                self.writer.session_id,
                self.call,
                ToolOutcome(result=result),
                usage=False,
            ),
            *([] if delivered else [CompletionDelivered(sub_session_id=self.session_id)]),
        ]


class CompanionSpawning:
    """The spawn operations of :class:`~helix_agents.core.companions.Companions`."""

    def __init__(self, core: CompanionCore) -> None:
        self.core = core

    async def spawn(self, call: ToolCall, args: CompanionArgs, waiting: Waiting) -> None:
        """``companion__spawnAgent``: start a named child (or give a re-run the same one)."""
        owned = self.core.owned(call.id)
        if owned is not None:
            await self._spawn_again(call, owned, waiting)
            return
        if args.name is not None:
            await self.core.synced(args.name)
        entry = self.core.entry(args.agent)
        blocking = entry.mode == "blocking"
        parent = self.core.writer.session_id
        decided: dict[str, Any] = {}

        def decide(state: SessionState) -> list[Event]:
            decided.clear()
            name = args.name or auto_name(state, args.agent)
            old = latest_child(state, name)
            if old is not None and old.agent_type != args.agent:
                decided["error"] = f"name {name!r} is used by a child of type {old.agent_type!r}"
                return []
            if old is not None and old.status in LIVE:
                decided["error"] = (
                    f"child {name!r} is already running: use companion__sendMessage, or "
                    "another name"
                )
                return []
            if old is not None and old.status in ("completed", "interrupted"):
                sid, fresh = old.sub_session_id, False  # re-consulted: it keeps its memory
            else:
                generations = sum(
                    1
                    for ref in state.sub_sessions.values()
                    if ref.mode == "persistent" and ref.name == name
                )
                sid, fresh = companion_session_id(parent, name, generations + 1), True
            if len(sid) > MAX_SESSION_ID_LENGTH:
                decided["error"] = f"name {name!r} makes the child's session id too long"
                return []
            decided.update(name=name, sid=sid, fresh=fresh)
            if undelivered(old):
                assert old is not None
                decided["previous"] = outcome_view(old)
            target = companion_target(entry, sid, self.core.env.local_transport)
            return [
                tool_start(self.core.agent, parent, call),
                *supersede(old),
                SubSessionStarted(
                    sub_session_id=sid,
                    agent_type=args.agent,
                    tool_call_id=call.id,
                    mode="persistent",
                    name=name,
                    input=args.message,
                    remote=target.remote,
                ),
                *([segment_start(state, self.core.agent, sid, call, args)] if blocking else []),
                UsageRecorded(kind="subagent", name=args.agent, sub_session_id=sid),
            ]

        await self.core.writer.append_with(decide)
        if "error" in decided:
            await self.core.answer(call, error=decided["error"])
            return
        name, sid = decided["name"], decided["sid"]
        ref = self.core.writer.state.sub_sessions[sid]
        target = self.core.target(ref)
        link = CompanionLink(self.core, call, target, name) if blocking else None
        if link is not None:
            self.core.open_calls.follow(link)
            self.core.open_calls.close_tool(call.id)
            link.opened = True
        self.core.sending.add(sid)
        try:
            if decided["fresh"]:
                await self._send_start(target, call, args.message, entry)
            else:
                await self.core.send_turn(target, call, args.message)
        except _CallFailure as exc:
            # The name stays re-spawnable: the child is recorded failed.
            self.core.open_calls.drop(sid)
            error = f"could not start child {name!r}: {exc}"
            await self.core.answer(
                call,
                error=error,
                extra=lambda latest: [
                    *([segment_failed(latest, args.agent, sid, call, error)] if blocking else []),
                    SubSessionFinished(sub_session_id=sid, status="failed", error=error),
                    CompletionDelivered(sub_session_id=sid),
                ],
                started=True,
            )
            return
        finally:
            self.core.sending.discard(sid)
        previous = decided.get("previous")
        if link is None:
            result: dict[str, Any] = {"name": name, "status": "running"}
            if previous is not None:
                result["previous"] = previous
            await self.core.answer(call, result, started=True)
            return
        await self._follow(link, waiting)

    async def _follow(self, link: CompanionLink, waiting: Waiting) -> None:
        """Follow the child to its turn's end and record it; a stop leaves the link to halt."""
        try:
            outcome = await link.follow()
        except _CallFailure as exc:
            outcome = ChildOutcome(status="failed", error=str(exc))
        if outcome.status == "suspended":
            await link.suspended(outcome)
            waiting.children[link.session_id] = link.call.id
        else:
            await link.finish(outcome)
        # Not on cancellation: the run's stop cleanup halts the links still here.
        self.core.open_calls.unfollow(link)

    async def _send_start(
        self, target: ChildTarget, call: ToolCall, message: str, entry: PersistentAgent
    ) -> None:
        request = self._start_request(target, call, message, entry)
        if entry.workspace_lifetime == "persistent":
            await self.core.env.keep_workspaces(target.session_id, entry.agent.workspaces)
        await target.start(request)  # a re-run whose child already ended: fine

    def _start_request(
        self, target: ChildTarget, call: ToolCall, message: str, entry: PersistentAgent
    ) -> RemoteStartRequest:
        state = self.core.writer.state
        return RemoteStartRequest(
            session_id=target.session_id,
            agent_type=target.agent_type,
            message=message,
            parent_session_id=state.session_id,
            root_session_id=state.root_session_id,
            parent_tool_call_id=call.id,
            ancestors=[*state.ancestors, state.session_id],
            workspace_session_id=inherited_workspace(entry, state, self.core.agent),
            trace_context=self.core.env.tracer.trace_context() or None,
            strict=state.strict,
            owner=state.owner,  # a companion belongs to its parent's owner (specs/auth.md)
        )

    async def _spawn_again(self, call: ToolCall, ref: SubSessionRef, waiting: Waiting) -> None:
        """A spawn re-run (a restarted, resumed or re-entered parent): reach the same child."""
        entry = self.core.entry(ref.agent_type)
        sid = ref.sub_session_id
        target = self.core.target(ref)
        assert ref.name is not None
        args, _ = check_arguments(call.name, call.arguments, self.core.agent)
        assert args is not None  # it was checked when the call first ran
        blocking = entry.mode == "blocking"
        link = CompanionLink(self.core, call, target, ref.name) if blocking else None
        if ref.status == "interrupted":
            # Halted with the parent: its segment was closed; this call resumes it.
            state = self.core.writer.state
            await self.core.writer.append(
                tool_start(self.core.agent, state.session_id, call),
                *([segment_start(state, self.core.agent, sid, call, args)] if link else []),
                SubSessionResumed(sub_session_id=sid, tool_call_id=call.id),
            )
        elif ref.status == "paused_awaiting_client":
            resumed = SubSessionResumed(sub_session_id=sid, tool_call_id=call.id)
            await self.core.writer.append(resumed)
        ref = self.core.writer.state.sub_sessions[sid]
        if ref.status in ENDED:  # its end was recorded before the call's result
            if link is not None:
                await link.finish(recorded_outcome(ref))
            else:
                await self.core.answer(call, {"name": ref.name, "status": ref.status}, started=True)
            return
        if link is not None:
            self.core.open_calls.follow(link)
            self.core.open_calls.close_tool(call.id)
            link.opened = True
        try:
            await self._reach(target, call, ref, args.message, entry)
        except _CallFailure:
            self.core.open_calls.drop(sid)
            raise
        if link is None:
            await self.core.answer(call, {"name": ref.name, "status": "running"}, started=True)
            return
        await self._follow(link, waiting)

    async def _reach(
        self,
        target: ChildTarget,
        call: ToolCall,
        ref: SubSessionRef,
        message: str,
        entry: PersistentAgent,
    ) -> None:
        """Make sure the child got this call's turn, and that something runs it."""
        if ref.spawn_call_id == call.id:
            # Recorded, then the parent stopped before the start reached it: started.
            await target.reach(lambda: self._start_request(target, call, message, entry))
        else:
            await self.core.send_turn(target, call, message)  # a repeat changes nothing
            await target.reach()
