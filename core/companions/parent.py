"""``Companions``: the companion tools of one parent run (specs/companions.md).

A persistent child ("companion") is its own session, ``{parent}-agent-{name}``,
reached through its :class:`~helix_agents.PersistentAgent`'s transport (the
in-process one for a local child). The parent's log is the only record of
what the parent knows about it (its ``SubSessionRef``): every decision here is
taken under the writer's lock on the latest log, so concurrent calls in one
step, a restarted parent and a re-entered one all agree.

Every child outcome (the end of one of its turns) reaches the parent's model
exactly once, recorded by ``completion_delivered`` in the batch that delivers
it: pulled (a blocking spawn's result, ``waitForResult``, ``terminateChild``;
a re-consult that supersedes an outcome not yet seen carries it as
``previous``) or pushed (a message at the start of the parent's next step).
"""

from __future__ import annotations

import logging
from typing import Any

import anyio

from helix_agents.agents.config import AgentConfig
from helix_agents.children.open_calls import OpenCalls
from helix_agents.companions.base import CompanionCore, _CallFailure, _turn_end
from helix_agents.companions.refs import (
    ENDED,
    LIVE,
    ended_events,
    no_child,
    outcome_notice,
    outcome_view,
    send_problem,
    supersede,
    undelivered,
)
from helix_agents.companions.spawn import CompanionLink, CompanionSpawning
from helix_agents.companions.stop import CompanionStopping
from helix_agents.companions.tools import (
    GET_CHILD_STATUS,
    LIST_CHILDREN,
    SEND_MESSAGE,
    SPAWN_AGENT,
    TERMINATE_CHILD,
    WAIT_FOR_RESULT,
    CompanionArgs,
    check_arguments,
    companion_tool_names,
)
from helix_agents.errors import AgentServerError, HelixError
from helix_agents.events import CompletionDelivered, Event, MessageAppended, SubSessionResumed
from helix_agents.hitl.gates import Waiting
from helix_agents.log.state import SessionState, SubSessionRef
from helix_agents.messages import ToolCall, UserMessage
from helix_agents.protocol import RemoteStatusResponse
from helix_agents.runtime.env import Fire, RunEnv
from helix_agents.runtime.tool_runner import tool_start
from helix_agents.runtime.writer import SessionWriter

__all__ = ["Companions"]

log = logging.getLogger("helix_agents")


class Companions:
    """The companion tools of one run of a parent with ``persistent_agents``.

    It holds the run's :class:`~helix_agents.companions.base.CompanionCore` and
    the two operations handed it, spawning and stopping (``spawn.py``,
    ``stop.py``); the other tools and the push of outcomes are here.

    Args:
        writer: the parent's writer.
        agent: the parent's agent.
        env: the run's environment (local transport, stop grace).
        fire: the run's hook callback.
        open_calls: the run's open calls, shared with its stop.
    """

    def __init__(
        self,
        writer: SessionWriter,
        agent: AgentConfig,
        env: RunEnv,
        fire: Fire,
        open_calls: OpenCalls,
    ) -> None:
        self.core = CompanionCore(writer, agent, env, fire, open_calls)
        self._spawning = CompanionSpawning(self.core)
        self._stopping = CompanionStopping(self.core)

    async def terminate_live(self, reason: str | None) -> None:
        """Terminate every live companion no call follows (the parent is being aborted)."""
        await self._stopping.terminate_live(reason)

    def followed(self, call: ToolCall) -> CompanionLink | None:
        """The link of a blocking spawn ``call`` whose child's turn still runs, or None.

        For a stop recorded apart from the call that followed the child (a
        durable engine's stop step): the link halts the child as the run's
        own stop halts the links it follows.
        """
        if call.name != SPAWN_AGENT:
            return None
        ref = self.core.owned(call.id)
        if ref is None or ref.status != "running" or ref.name is None:
            return None
        if self.core.entry(ref.agent_type).mode != "blocking":
            return None
        link = CompanionLink(self.core, call, self.core.target(ref), ref.name)
        link.opened = True
        return link

    # --- dispatch -------------------------------------------------------------------

    async def call(self, call: ToolCall, waiting: Waiting) -> None:
        """Run one companion call and record its result (an ``{error}`` for a bad one)."""
        if call.name not in companion_tool_names(self.core.agent):
            await self.core.answer(call, error=f"unknown tool {call.name!r}")
            return
        args, problem = check_arguments(call.name, call.arguments, self.core.agent)
        self.core.open_calls.open_tool(call)
        try:
            if args is None:
                await self.core.answer(call, error=problem)
                return
            handlers = {
                SPAWN_AGENT: self._spawning.spawn,
                SEND_MESSAGE: self._send,
                LIST_CHILDREN: self._list,
                GET_CHILD_STATUS: self._status,
                TERMINATE_CHILD: self._stopping.terminate,
                WAIT_FOR_RESULT: self._wait,
            }
            try:
                await handlers[call.name](call, args, waiting)
            except _CallFailure as exc:  # a transport's failure is data for the model
                self.core.open_calls.open_tool(call)
                await self.core.answer(call, error=f"{type(exc).__name__}: {exc}")
        finally:
            self.core.open_calls.close_tool(call.id)

    # --- push -----------------------------------------------------------------------

    async def deliver(self) -> None:
        """Push every ended, undelivered outcome to the model: a message each, once.

        Called at the start of each step of the parent. Live children are
        synced first; terminated children are skipped (the parent stopped them).
        """
        for ref in list(self.core.writer.state.sub_sessions.values()):
            if ref.mode == "persistent" and ref.status in LIVE:
                try:
                    await self.core.sync(ref)
                except (HelixError, OSError) as exc:  # unreachable now: the next step asks again
                    log.info("could not sync companion %s: %s", ref.sub_session_id, exc)

        def build(state: SessionState) -> list[Event]:
            events: list[Event] = []
            for ref in sorted(state.sub_sessions.values(), key=lambda r: r.finished_seq or 0):
                if ref.mode == "persistent" and undelivered(ref):
                    events.append(MessageAppended(message=UserMessage(content=outcome_notice(ref))))
                    events.append(
                        CompletionDelivered(sub_session_id=ref.sub_session_id, via="push")
                    )
            return events

        await self.core.writer.append_with(build)

    # --- sendMessage ----------------------------------------------------------------

    async def _send(self, call: ToolCall, args: CompanionArgs, waiting: Waiting) -> None:
        assert args.name is not None
        previous: dict[str, Any] | None = None
        owned = self.core.owned(call.id)
        if owned is None:
            ref, status = await self.core.synced(args.name)
            problem = send_problem(args.name, ref, status)
            if problem is not None:
                await self.core.answer(call, error=problem)
                return
            assert ref is not None
            decided: dict[str, Any] = {}

            def reopen(state: SessionState) -> list[Event]:
                current = state.sub_sessions[ref.sub_session_id]
                decided["previous"] = outcome_view(current) if undelivered(current) else None
                return [
                    tool_start(self.core.agent, self.core.writer.session_id, call),
                    *supersede(current),
                    SubSessionResumed(sub_session_id=current.sub_session_id, tool_call_id=call.id),
                ]

            await self.core.writer.append_with(reopen)
            owned = self.core.writer.state.sub_sessions[ref.sub_session_id]
            previous = decided["previous"]
        target = self.core.target(owned)
        sid = target.session_id
        self.core.sending.add(sid)
        try:
            await self.core.send_turn(target, call, args.message)
        except AgentServerError as exc:
            if exc.code != "SESSION_FAILED":
                raise
            # It failed between its status and the send: not stranded, not delivered.
            status = await target.retry(lambda: target.transport.get_status(sid))
            await self.core.answer(
                call,
                {"delivered": False},
                extra=lambda latest: ended_events(latest, owned, status),
                started=True,
            )
            return
        finally:
            self.core.sending.discard(sid)
        result: dict[str, Any] = {"delivered": True}
        if previous is not None:
            result["previous"] = previous
        await self.core.answer(call, result, started=True)

    # --- listChildren / getChildStatus ----------------------------------------------

    async def _list(self, call: ToolCall, args: CompanionArgs, waiting: Waiting) -> None:
        state = self.core.writer.state
        names: dict[str, int] = {}
        for ref in state.sub_sessions.values():
            if ref.mode == "persistent" and ref.name is not None:
                names.setdefault(ref.name, ref.started_seq)
        listed = []
        for name in sorted(names, key=names.__getitem__):
            current, status = await self.core.synced(name)
            assert current is not None
            word = self.core.status_word(current, status)
            listed.append({"name": name, "agent": current.agent_type, "status": word})
        await self.core.answer(call, listed)

    async def _status(self, call: ToolCall, args: CompanionArgs, waiting: Waiting) -> None:
        assert args.name is not None
        ref, status = await self.core.synced(args.name)
        if ref is None:
            await self.core.answer(call, error=no_child(args.name))
            return
        shown: dict[str, Any] = {
            "name": args.name,
            "agent": ref.agent_type,
            "status": self.core.status_word(ref, status),
        }
        if ref.status == "completed":
            shown["lastOutput"] = ref.output
        elif ref.error is not None and ref.status not in LIVE:
            shown["error"] = ref.error
        await self.core.answer(call, shown)

    # --- waitForResult ----------------------------------------------------------------

    async def _wait(self, call: ToolCall, args: CompanionArgs, waiting: Waiting) -> None:
        assert args.name is not None
        name = args.name
        ref, status = await self.core.synced(name)
        if ref is None:
            await self.core.answer(call, error=no_child(name))
            return
        if ref.status in LIVE and not (status is not None and status.status == "paused"):
            target = self.core.target(ref)
            start = status.latest_sequence if status is not None else 0
            with anyio.move_on_after(args.timeout):
                await _turn_end(target, start)
            ref, status = await self.core.synced(name)
            assert ref is not None
        await self._answer_wait(call, name, ref, status)

    async def wait_look(self, call: ToolCall, *, final: bool) -> SubSessionRef | None:
        """One look of a ``waitForResult`` call, for an engine that waits between looks.

        Answers the call (no such child, its turn ended, it waits for people,
        or ``final``: its time is up) and returns None; else returns the child
        still running, which the engine waits on (a durable sleep until the
        child's notice or the call's deadline) before looking again. A call
        with bad arguments is answered as :meth:`call` answers it.
        """
        args, problem = check_arguments(call.name, call.arguments, self.core.agent)
        if args is None or args.name is None:
            await self.core.answer(call, error=problem or "name is required")
            return None
        try:
            ref, status = await self.core.synced(args.name)
        except _CallFailure as exc:  # a transport's failure is data for the model
            await self.core.answer(call, error=f"{type(exc).__name__}: {exc}")
            return None
        if ref is None:
            await self.core.answer(call, error=no_child(args.name))
            return None
        paused = status is not None and status.status == "paused"
        if ref.status in LIVE and not paused and not final:
            return ref
        await self._answer_wait(call, args.name, ref, status)
        return None

    async def follow_turn(self, ref: SubSessionRef, within: float | None) -> None:
        """Follow child ``ref``'s stream until its turn ends (or pauses), at most ``within`` s."""
        target = self.core.target(ref)
        status = await target.retry(lambda: target.transport.get_status(ref.sub_session_id))
        if status.status != "running":
            return
        with anyio.move_on_after(within):
            await _turn_end(target, status.latest_sequence)

    async def _answer_wait(
        self,
        call: ToolCall,
        name: str,
        ref: SubSessionRef,
        status: RemoteStatusResponse | None,
    ) -> None:
        if ref.status in LIVE:
            paused = status is not None and status.status == "paused"
            word = "paused_awaiting_client" if paused else "timeout"
            await self.core.answer(call, {"name": name, "status": word})
            return
        sid = ref.sub_session_id
        shown = {"name": name, **outcome_view(ref)}

        def delivered(state: SessionState) -> list[Event]:
            current = state.sub_sessions[sid]
            if current.completion_delivered or current.status not in ENDED:
                return []
            return [CompletionDelivered(sub_session_id=sid)]

        await self.core.answer(call, shown, extra=delivered)
