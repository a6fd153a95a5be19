"""The shared ground of a parent's companion tools (specs/companions.md).

:class:`CompanionCore` holds one run's view of its companions: where a child
lives (its transport target), how the log says it is (``sync``), and how a
call's result is recorded (``answer``). The tool operations are objects that
are handed it: spawning (``spawn.py``), stopping (``stop.py``), and
``Companions`` (``parent.py``), which holds both and the other tools.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from helix_agents.agents.config import AgentConfig, PersistentAgent
from helix_agents.children.open_calls import OpenCalls
from helix_agents.children.target import ChildTarget, checked_output, companion_target
from helix_agents.companions.refs import ENDED, LIVE, ended_events, latest_child
from helix_agents.errors import AgentServerError, TransportError
from helix_agents.events import Event, InputRequired
from helix_agents.hitl.gates import route_records
from helix_agents.log.state import SessionState, SubSessionRef
from helix_agents.messages import ToolCall
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteMessageRequest,
    RemoteStatusResponse,
)
from helix_agents.runtime.env import Fire, RunEnv
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, tool_start
from helix_agents.runtime.writer import SessionWriter

__all__ = ["CompanionCore"]

_CallFailure = (TransportError, AgentServerError)


class CompanionCore:
    """One parent run's companions as its log and their transports show them.

    Args:
        writer: the parent's writer.
        agent: the parent's agent.
        env: the run's environment (local transport, stop grace).
        fire: the run's hook callback.
        open_calls: the run's open calls (its stop halts the children followed
            and closes the plain calls still open).
    """

    def __init__(
        self,
        writer: SessionWriter,
        agent: AgentConfig,
        env: RunEnv,
        fire: Fire,
        open_calls: OpenCalls,
    ) -> None:
        self.writer = writer
        self.agent = agent
        self.env = env
        self.fire = fire
        self.open_calls = open_calls
        self.sending: set[str] = set()
        """Children this run is giving a new turn now: their status is in flux."""

    async def answer(
        self,
        call: ToolCall,
        result: Any = None,
        *,
        error: str | None = None,
        extra: Callable[[SessionState], list[Event]] | None = None,
        started: bool = False,
    ) -> None:
        """Record the call's result (after ``extra(latest state)``, in one batch).

        ``started``: its ``tool_start`` is already recorded.
        """
        sid = self.writer.session_id
        outcome = ToolOutcome(result=result, error=error)

        def build(state: SessionState) -> list[Event]:
            before = extra(state) if extra is not None else []
            return [
                *([] if started else [tool_start(self.agent, sid, call)]),
                *before,
                *result_events(self.agent, sid, call, outcome, usage=False),
            ]

        await self.writer.append_with(build)
        self.open_calls.close_tool(call.id)

    # --- where children live ------------------------------------------------------

    def entry(self, agent_type: str) -> PersistentAgent:
        entry = self.agent.persistent(agent_type)
        if entry is None:  # a ref written by an older definition of the parent
            raise AgentServerError(
                "INTERNAL_ERROR", f"agent {self.agent.name!r} has no persistent {agent_type!r}"
            )
        return entry

    def target(self, ref: SubSessionRef) -> ChildTarget:
        return companion_target(
            self.entry(ref.agent_type), ref.sub_session_id, self.env.local_transport
        )

    def owned(self, call_id: str) -> SubSessionRef | None:
        """The child whose current turn this call opened (the call is being re-run)."""
        for ref in self.writer.state.sub_sessions.values():
            if ref.mode == "persistent" and ref.tool_call_id == call_id:
                return ref
        return None

    # --- status -------------------------------------------------------------------

    async def sync(self, ref: SubSessionRef) -> RemoteStatusResponse | None:
        """Ask a child the log thinks live how it is; record its end if it ended.

        None for a child this log already knows ended (nothing asked), or one
        whose start has not reached its server yet.
        """
        busy = self.open_calls.following(ref.sub_session_id) or ref.sub_session_id in self.sending
        if ref.status not in LIVE or busy:
            return None
        target = self.target(ref)
        try:
            status: RemoteStatusResponse = await target.retry(
                lambda: target.transport.get_status(ref.sub_session_id)
            )
        except AgentServerError as exc:
            if exc.code == "NOT_FOUND":
                return None
            raise
        status = _checked_output(target, status)
        if status.status in ENDED:
            await self.writer.append_with(lambda latest: ended_events(latest, ref, status))
        elif status.status == "paused" and status.pending_inputs:
            # A non-blocking child waits for people: route its entries here, so
            # they are this session's (and the root's) to list and answer.
            notice = InputRequired(
                agent_id=ref.sub_session_id,
                agent_type=ref.agent_type,
                pending=status.pending_inputs,
            )
            await self.writer.append_with(
                lambda latest: route_records(
                    notice,
                    via=ref.sub_session_id,
                    remote=ref.remote,
                    known=latest.client_tool_ownership.keys(),
                )
            )
        return status

    def status_word(self, ref: SubSessionRef, status: RemoteStatusResponse | None) -> str:
        if ref.status in LIVE and status is not None and status.status == "paused":
            return "paused_awaiting_client"
        return ref.status

    def current(self, name: str) -> SubSessionRef | None:
        return latest_child(self.writer.state, name)

    async def synced(self, name: str) -> tuple[SubSessionRef | None, RemoteStatusResponse | None]:
        ref = self.current(name)
        if ref is None:
            return None, None
        status = await self.sync(ref)
        return self.current(name), status

    async def send_turn(self, target: ChildTarget, call: ToolCall, message: str) -> None:
        """Give the child a new turn (idempotent: the call's id is the message id)."""
        request = RemoteMessageRequest(
            session_id=target.session_id, message=message, message_id=call.id
        )
        await target.retry(lambda: target.transport.send_message(request))


def _checked_output(target: ChildTarget, status: RemoteStatusResponse) -> RemoteStatusResponse:
    """A remote child's completed output checked against the schema the parent declared.

    As for a remote sub-agent: output that does not fit makes the turn a failure.
    """
    if status.status != "completed":
        return status
    output, error = checked_output(target.output_schema, status.output)
    if error is not None:
        return msgspec.structs.replace(status, status="failed", output=None, error=error)
    return msgspec.structs.replace(status, output=output)


async def _turn_end(target: ChildTarget, from_sequence: int) -> None:
    """Return when the child's current run ends (or it pauses for people)."""
    async for event in target.transport.stream(target.session_id, from_sequence):
        if isinstance(event, EndEvent | ErrorEvent):
            return
        if (
            isinstance(event, ChunkEvent)
            and isinstance(event.chunk, InputRequired)
            and event.chunk.agent_id == target.session_id
        ):
            return
