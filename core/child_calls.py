"""``ChildCall``: one sub-agent call, from its tool call to its tool result.

Every child, local or remote, is its own session reached through a
:class:`~helix_agents.RemoteAgentTransport` (local children through the
in-process one). A call's life:

- **open**: start the child (idempotent: its session id is deterministic), or,
  when the parent's log already knows it (a resumed parent), re-open it and
  resume the child if nothing runs it;
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

import logging
from typing import Any

import anyio
from pydantic import ValidationError

from ._aio import prefetch
from .agents import AgentConfig
from .child_target import ChildOutcome, SubAgentToolLike, child_target, fits
from .errors import (
    AgentServerError,
    HelixError,
    RemoteAgentFailedError,
    StreamDropError,
    TransportError,
)
from .events import (
    ChildChunkForwarded,
    Event,
    InputRequired,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    SubSessionSuspended,
    UsageRecorded,
)
from .hitl import route_records
from .messages import ToolCall
from .protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteResumeRequest,
    RemoteStartRequest,
    message_from_input,
)
from .retry import transient
from .run_env import Fire, RunEnv
from .session_writer import SessionWriter, StopRequest
from .state import SessionState
from .tool_runner import ToolOutcome, result_events, tool_end, tool_start, validation_message
from .workspace_hub import inherited_workspace

__all__ = ["ChildCall", "ChildOutcome", "SubAgentToolLike"]

log = logging.getLogger("helix_agents")


class ChildCall:
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
        self.writer = writer
        self.agent = agent
        self.call = call
        self.tool = tool
        self.env = env
        self.fire = fire
        self.target = child_target(tool, writer.session_id, call.id, env.local_transport)
        self.opened = False
        """True once the call's segment is open on the parent's stream (until it ends)."""
        self._routed: set[str] = set()

    @property
    def session_id(self) -> str:
        """The child's session id."""
        return self.target.session_id

    async def run(self) -> bool:
        """Open the child, follow it to its end and record the call's result.

        Returns True when the child suspended waiting for people: the call then
        keeps no result and its segment stays open until the parent re-opens it.
        """
        try:
            value = self.tool.input_schema.model_validate(self.call.arguments)
        except ValidationError as exc:
            sid = self.writer.session_id
            await self.writer.append(
                tool_start(self.agent, sid, self.call),
                *result_events(
                    self.agent,
                    sid,
                    self.call,
                    ToolOutcome(error=validation_message(exc)),
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
            outcome = await self._await()
        except (TransportError, AgentServerError) as exc:
            outcome = ChildOutcome(status="failed", error=str(exc))
        if outcome.status == "suspended":
            await self.writer.append(
                SubSessionSuspended(
                    sub_session_id=self.session_id,
                    reason="client_tool"
                    if any(entry.kind == "client_tool" for entry in outcome.pending)
                    else "approval",
                    tool_call_ids=[entry.tool_call_id for entry in outcome.pending],
                )
            )
            return True
        await self.finish(outcome)
        return False

    # --- open ---------------------------------------------------------------------

    async def _start(self, payload: Any) -> bool:
        """Start the child; False if the start failed (the call is then finished)."""
        state = self.writer.state
        target = self.target
        await self.fire("before_sub_agent", self.call)
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
        state = self.writer.state
        target = self.target
        request = RemoteStartRequest(
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
        )
        await target.retry(lambda: target.transport.start(request))

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
        target = self.target
        try:
            status = await target.retry(lambda: target.transport.get_status(target.session_id))
        except AgentServerError as exc:
            if exc.code != "NOT_FOUND":
                raise
            # The parent recorded the start, then stopped (a crash, an
            # interrupt) before the start reached the child: start it now.
            await self._send_start(payload)
            return
        # A paused child is resumed too: if its answers are all in it goes on,
        # otherwise it suspends again at once and says so on its stream.
        if status.status in ("interrupted", "paused") or (
            status.status == "running" and not status.is_executing
        ):
            try:
                await target.retry(
                    lambda: target.transport.resume(
                        RemoteResumeRequest(session_id=target.session_id)
                    )
                )
            except AgentServerError as exc:
                if exc.code != "ALREADY_COMPLETED":
                    raise

    def _segment_start(self, state: SessionState, payload: Any) -> SubAgentStart:
        return SubAgentStart(
            agent_id=state.session_id,
            agent_type=state.agent_type,
            sub_agent_id=self.session_id,
            sub_agent_type=self.target.agent_type,
            tool_call_id=self.call.id,
            parent_session_id=state.session_id,
            input=payload,
        )

    # --- follow -------------------------------------------------------------------

    async def _await(self) -> ChildOutcome:
        """Follow the child to its end, within the tool's timeout (then halt it)."""
        target = self.target
        if target.timeout is None:
            return await self.follow()
        with anyio.move_on_after(target.timeout):
            return await self.follow()
        message = f"sub-agent {target.agent_type!r} timed out after {target.timeout:g}s"
        outcome = await self._stop_and_follow(StopRequest("interrupt", message))
        if outcome.status == "completed":
            return outcome  # it finished while being stopped: keep the result
        return ChildOutcome(status="interrupted", error=message)

    async def follow(self) -> ChildOutcome:
        """Forward the child's chunks into the parent's log until the child's run ends.

        A stream that stops without ``end``/``error`` is reconnected from the
        last seq held, with backoff; ``stream_retries`` bounds the drops in a
        row (a connection that delivered new chunks resets the count), then
        :class:`StreamDropError`.
        """
        target = self.target
        writer = self.writer
        child_id = target.session_id
        drops = 0
        # The last child seq held: the log's, plus what this call has emitted
        # and not yet seen committed. Only this call forwards this child.
        held = writer.held_child_seq(child_id)
        while True:
            before = held
            try:
                async with prefetch(target.transport.stream(child_id, held)) as events:
                    async for batch in events.batches():
                        forwarded: list[Event] = []
                        paused: InputRequired | None = None
                        for event in batch:
                            if isinstance(event, ChunkEvent) and event.sequence > held:
                                held = event.sequence
                                chunk = event.chunk
                                forwarded.append(
                                    ChildChunkForwarded(
                                        child_session_id=child_id,
                                        child_seq=event.sequence,
                                        chunk=chunk,
                                    )
                                )
                                paused = None
                                if isinstance(chunk, InputRequired):
                                    # The route to each entry, in the batch that
                                    # makes the entry visible on this stream.
                                    forwarded.extend(
                                        route_records(
                                            chunk,
                                            via=child_id,
                                            remote=target.remote,
                                            known=writer.state.client_tool_ownership.keys()
                                            | self._routed,
                                        )
                                    )
                                    self._routed.update(e.tool_call_id for e in chunk.pending)
                                    if chunk.agent_id == child_id:
                                        paused = chunk
                        if forwarded:
                            writer.emit(*forwarded)
                        final = batch[-1]
                        if paused is not None and isinstance(final, ChunkEvent):
                            # Its last word so far: it waits (its stream stays open).
                            return ChildOutcome(status="suspended", pending=paused.pending)
                        if isinstance(final, EndEvent):
                            return ChildOutcome(status="completed", output=final.output)
                        if isinstance(final, ErrorEvent):
                            status = await target.retry(
                                lambda: target.transport.get_status(child_id)
                            )
                            return ChildOutcome(
                                status="interrupted"
                                if status.status == "interrupted"
                                else "failed",
                                error=final.error,
                            )
            except (TransportError, AgentServerError) as exc:
                if not transient(exc):
                    raise
                log.info("stream of %s failed (%s); reconnecting", child_id, exc)
            # Only drops in a row count: a connection that made progress resets it.
            drops = 1 if held > before else drops + 1
            if drops > target.stream_retries:
                raise StreamDropError(child_id, held)
            await anyio.sleep(target.stream_retry_base * 2 ** (drops - 1))

    # --- finish -------------------------------------------------------------------

    async def finish(self, outcome: ChildOutcome) -> None:
        """Record the child's end and the call's result in one batch; fire ``after_sub_agent``."""
        target = self.target
        self.opened = False
        if outcome.status == "completed" and target.output_schema is not None:
            try:
                output = target.output_schema.model_validate(outcome.output)
            except ValueError as exc:
                outcome = ChildOutcome(
                    status="failed", error=f"remote output does not match the schema: {exc}"
                )
            else:
                outcome = ChildOutcome(status="completed", output=output.model_dump(mode="json"))
        if outcome.status != "completed" and target.remote is not None:
            failure = RemoteAgentFailedError(target.session_id, outcome.error or outcome.status)
            outcome = ChildOutcome(status=outcome.status, error=str(failure))
        result = (
            ToolOutcome(result=outcome.output)
            if outcome.status == "completed"
            else ToolOutcome(error=outcome.error or f"sub-agent {target.agent_type!r} failed")
        )
        sid = self.writer.session_id
        await self.writer.append(
            *self._segment_end(outcome),
            *result_events(self.agent, sid, self.call, result, usage=False),
            UsageRecorded(
                kind="subagent", name=target.agent_type, sub_session_id=target.session_id
            ),
        )
        await self.fire("after_sub_agent", self.call, outcome)

    def _segment_end(self, outcome: ChildOutcome) -> list[Event]:
        """The parent's record of a child's end: ``sub_session_finished`` and ``subagent_end``."""
        state = self.writer.state
        # A suspended child has not ended: it never reaches here as such.
        status = "interrupted" if outcome.status == "suspended" else outcome.status
        return [
            SubSessionFinished(
                sub_session_id=self.session_id,
                status=status,
                output=outcome.output,
                error=outcome.error,
            ),
            SubAgentEnd(
                agent_id=state.session_id,
                agent_type=state.agent_type,
                sub_agent_id=self.session_id,
                sub_agent_type=self.target.agent_type,
                tool_call_id=self.call.id,
                parent_session_id=state.session_id,
                success=outcome.status == "completed",
                result=outcome.output,
                error=outcome.error,
            ),
        ]

    # --- halt ---------------------------------------------------------------------

    async def halt(self, stop: StopRequest) -> None:
        """Stop an open child and record its acknowledgement (no tool result). Shield it.

        A child that ended on its own before the stop reached it keeps its
        result (completed, or failed under an interrupt).
        """
        if not self.opened:
            return
        outcome = await self._stop_and_follow(stop)
        # It ended on its own before the stop reached it (an interrupt leaves
        # a child interrupted, never failed): keep its result.
        if outcome.status == "completed" or (
            outcome.status == "failed" and stop.kind == "interrupt"
        ):
            await self.finish(outcome)
            return
        self.opened = False
        await self.writer.append(
            *self._segment_end(outcome),
            tool_end(
                self.agent, self.writer.session_id, self.call, ToolOutcome(error=outcome.error)
            ),
        )

    async def _stop_and_follow(self, stop: StopRequest) -> ChildOutcome:
        """Send the stop to the child and follow it until it acknowledges (bounded)."""
        target = self.target
        child_id = target.session_id
        outcome = ChildOutcome(status="interrupted", error="no acknowledgement from the child")
        started = True
        try:
            if stop.kind == "abort":
                await target.transport.abort(child_id, stop.reason)
            else:
                await target.transport.interrupt(child_id, stop.reason)
        except AgentServerError as exc:
            started = exc.code != "NOT_FOUND"  # cut short before the child was created
            if started:
                log.warning("could not stop child %s: %s", child_id, exc)
        except (HelixError, OSError) as exc:  # best effort: the parent stops regardless
            log.warning("could not stop child %s: %s", child_id, exc)
        with anyio.move_on_after(self.env.stop_grace if started else 0):
            try:
                outcome = await self.follow()
            except (HelixError, OSError) as exc:
                outcome = ChildOutcome(status="interrupted", error=str(exc))
        return outcome
