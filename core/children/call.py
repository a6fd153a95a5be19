"""``ChildCall``: one sub-agent call, from its tool call to its tool result.

``ChildLink`` holds what every call that follows a child shares (follow,
finish, halt); ``ChildCall`` adds how a sub-agent tool opens its child, and a
blocking companion call (``core/companions/spawn.py``) how a spawn opens a persistent one.
``ChildLink`` lives in ``core/children/link.py`` (re-exported here).

Every child, local or remote, is its own session reached through a
:class:`~helix_agents.RemoteAgentTransport` (local children through the
in-process one). A call's life:

- **open**: start the child (idempotent: its session id is deterministic; a
  start answered ``ALREADY_COMPLETED`` finds this call's child already ended,
  and follows it all the same), or, when the parent's log already knows it (a
  resumed parent), re-open it and resume the child if nothing runs it;
- **follow**: append each chunk the child streams as ``child_chunk_forwarded``
  with the child's seq, until the child's run ends (bounded by the tool's
  timeout). Whether a chunk is new is decided against the parent's *log*
  (``SubSessionRef.last_child_seq``) plus what this call has emitted, so a
  redelivered chunk is dropped, never appended, and after a crash
  forwarding resumes from exactly the last seq held;
- **finish**: check a remote child's output against the tool's schema and
  record ``sub_session_finished``, ``subagent_end``, the tool result and
  ``tool_end`` in one batch;
- **halt** (when the parent stops): send the stop to the child, follow it
  until it acknowledges (bounded), and record the acknowledgement on the
  child's ref with no tool result, so the parent's resume re-opens the call.
"""

from __future__ import annotations

from typing import Any

from helix_agents.agents.config import AgentConfig
from helix_agents.children.link import ChildLink
from helix_agents.children.target import (
    ChildOutcome,
    SubAgentToolLike,
    child_target,
    fits,
    hook_call,
)
from helix_agents.errors import AgentServerError, StreamDropError, TransportError
from helix_agents.events import SubSessionResumed, SubSessionStarted
from helix_agents.messages import ToolCall
from helix_agents.protocol import RemoteStartRequest, message_from_input
from helix_agents.runtime.env import Fire, RunEnv
from helix_agents.runtime.tool_runner import (
    InvalidArguments,
    ToolOutcome,
    result_events,
    tool_start,
    validate_arguments,
)
from helix_agents.runtime.writer import SessionWriter
from helix_agents.workspaces.hub import inherited_workspace

__all__ = ["ChildCall", "SubAgentToolLike"]


class ChildCall(ChildLink):
    """One sub-agent call of a running parent: open, follow, finish, or halt.

    Args:
        writer: the parent's writer (every record goes through it).
        agent: the parent's agent.
        call: the parent's tool call.
        tool: the sub-agent tool called.
        env: the parent run's environment (local transport, stop grace).
        fire: the parent run's hook callback.
    """

    def __init__(
        self,
        writer: SessionWriter,
        agent: AgentConfig,
        call: ToolCall,
        tool: SubAgentToolLike,
        env: RunEnv,
        fire: Fire,
    ) -> None:
        target = child_target(tool, writer.session_id, call.id, env.local_transport)
        super().__init__(writer, agent, call, target, env, fire)
        self.tool = tool

    async def run(self) -> bool:
        """Open the child, follow it to its end and record the call's result.

        Returns True when the child suspended waiting for people: the call then
        keeps no result and its segment stays open until the parent re-opens it.
        """
        return await self.open() and await self.conclude()

    async def open(self) -> bool:
        """Validate the input and start (or re-open) the child; False if the call is finished.

        The first half of :meth:`run`; a durable engine runs the halves as two
        durable steps, with the child's run launched in between.
        """
        try:
            value = validate_arguments(self.tool.input_schema, self.call.arguments)
        except InvalidArguments as exc:
            sid = self.writer.session_id
            await self.writer.append(
                tool_start(self.agent, sid, self.call),
                *result_events(
                    self.agent,
                    sid,
                    self.call,
                    ToolOutcome(error=str(exc)),
                    usage=False,
                ),
            )
            return False
        payload = value.model_dump(mode="json")
        try:
            if self.session_id in self.writer.state.sub_sessions:
                await self._reopen(payload)
            elif not await self._start(payload):
                return False
        except (TransportError, AgentServerError) as exc:
            await self.finish(ChildOutcome(status="failed", error=str(exc)))
            return False
        return True

    async def conclude(self, *, raise_drops: bool = False) -> bool:
        """Follow the opened child to its end and record the call's result (or suspension).

        The second half of :meth:`run`; True when the child suspended. With
        ``raise_drops``, a :class:`StreamDropError` (the stream dropped more
        often in a row than the tool allows) is raised instead of being the
        call's error result: a durable engine retries the step.
        """
        try:
            outcome = await self._await()
        except StreamDropError as exc:
            if raise_drops:
                raise
            outcome = ChildOutcome(status="failed", error=str(exc))
        except (TransportError, AgentServerError) as exc:
            outcome = ChildOutcome(status="failed", error=str(exc))
        if outcome.status == "suspended":
            await self.suspended(outcome)
            return True
        await self.finish(outcome)
        return False

    # --- open ---------------------------------------------------------------------

    async def _start(self, payload: Any) -> bool:
        """Start the child; False if the start failed (the call is then finished)."""
        state = self.writer.state
        target = self.target
        await self.fire("before_sub_agent", hook_call(self.call, target))
        # Written behind: start is idempotent with a deterministic child id, so
        # if these were lost in a crash, the resumed call (still without a
        # result) reaches the same child again.
        self.writer.emit(
            tool_start(self.agent, state.session_id, self.call),
            SubSessionStarted(
                sub_session_id=target.session_id,
                agent_type=target.agent_type,
                tool_call_id=self.call.id,
                input=payload,
                remote=target.remote,
            ),
            self._segment_start(state, payload),
        )
        self.opened = True
        try:
            await self._send_start(payload)
        except (TransportError, AgentServerError) as exc:
            await self.finish(ChildOutcome(status="failed", error=str(exc)))
            return False
        return True

    async def _send_start(self, payload: Any) -> None:
        """Ask the child's server to start it (idempotent: the child's id is fixed)."""
        await self.target.start(self._start_request(payload))

    def _start_request(self, payload: Any) -> RemoteStartRequest:
        state = self.writer.state
        target = self.target
        return RemoteStartRequest(
            session_id=target.session_id,
            agent_type=target.agent_type,
            message=message_from_input(payload),
            state=payload if target.remote is None and fits(target.state_schema, payload) else None,
            parent_session_id=state.session_id,
            root_session_id=state.root_session_id,
            input=payload,
            parent_tool_call_id=self.call.id,
            ancestors=[*state.ancestors, state.session_id],
            workspace_session_id=inherited_workspace(self.tool, state, self.agent),
            trace_context=self.env.tracer.trace_context() or None,
            strict=state.strict,
            owner=state.owner,  # a child belongs to its parent's owner (specs/auth.md)
        )

    async def _reopen(self, payload: Any) -> None:
        """Re-open a child the parent's log already knows, resuming it if nothing runs it."""
        state = self.writer.state
        ref = state.sub_sessions[self.session_id]
        if ref.status == "interrupted":
            # The segment was closed at the interrupt; open a new one.
            await self.writer.append(
                tool_start(self.agent, state.session_id, self.call),
                self._segment_start(state, payload),
                SubSessionResumed(sub_session_id=self.session_id),
            )
        elif ref.status == "paused_awaiting_client":
            # The segment is still open: the child paused for people.
            await self.writer.append(SubSessionResumed(sub_session_id=self.session_id))
        self.opened = True
        # Recorded but never reached (the parent stopped first): started now.
        await self.target.reach(lambda: self._start_request(payload))
