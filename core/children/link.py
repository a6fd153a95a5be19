"""``ChildLink``: what every call that follows a child shares: follow, finish, halt.

Subclassed by :class:`~helix_agents.core.child_calls.ChildCall` (a sub-agent
tool's call, which opens its child) and by a blocking companion call
(``core/companions/spawn.py``); a call's whole life is told in ``core/children/call.py``.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager
from typing import Any

import anyio

from helix_agents._aio import prefetch
from helix_agents.agents.config import AgentConfig
from helix_agents.children.target import (
    ChildOutcome,
    ChildTarget,
    SubAgentToolLike,
    checked_output,
    hook_call,
)
from helix_agents.errors import (
    AgentServerError,
    HelixError,
    RemoteAgentFailedError,
    StreamDropError,
    TransportError,
)
from helix_agents.events import (
    ChildChunkForwarded,
    Event,
    InputRequired,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionSuspended,
    UsageRecorded,
)
from helix_agents.hitl.gates import route_records
from helix_agents.log.state import SessionState
from helix_agents.messages import ToolCall
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent
from helix_agents.retry import transient
from helix_agents.runtime.env import Fire, RunEnv
from helix_agents.runtime.tool_runner import ToolOutcome, result_events, tool_end
from helix_agents.runtime.writer import SessionWriter, StopRequest
from helix_agents.tracing import Span, tool_span

__all__ = ["ChildLink", "SubAgentToolLike"]


log = logging.getLogger("helix_agents")


class ChildLink:
    """A parent call following one child session: follow, finish, or halt.

    The shared part of a sub-agent call (:class:`ChildCall`) and a blocking
    companion call (``core/companions/parent.py``); subclasses open the child and shape
    the call's result (:meth:`finish_events`).

    Args:
        writer: the parent's writer (every record goes through it).
        agent: the parent's agent.
        call: the parent's tool call.
        target: where the child lives.
        env: the parent run's environment (local transport, stop grace).
        fire: the parent run's hook callback.
    """

    def __init__(
        self,
        writer: SessionWriter,
        agent: AgentConfig,
        call: ToolCall,
        target: ChildTarget,
        env: RunEnv,
        fire: Fire,
    ) -> None:
        self.writer = writer
        self.agent = agent
        self.call = call
        self.env = env
        self.fire = fire
        self.target = target
        self.opened = False
        """True once the call's segment is open on the parent's stream (until it ends)."""
        self.resume_from = 0
        """A child seq the follow starts after at least (a durable engine's heartbeat)."""
        self._routed: set[str] = set()

    @property
    def session_id(self) -> str:
        """The child's session id."""
        return self.target.session_id

    def span(self) -> AbstractContextManager[Span]:
        """The call's ``execute_tool`` span; the child's runs are traced under it."""
        target = self.target
        return tool_span(
            self.env.tracer,
            self.agent.name,
            self.writer.session_id,
            self.call,
            sub_session_id=target.session_id,
            remote=target.remote.transport if target.remote is not None else "local",
        )

    async def suspended(self, outcome: ChildOutcome) -> None:
        """Record that the child paused for people (the call stays open, without a result)."""
        await self.writer.append(
            SubSessionSuspended(
                sub_session_id=self.session_id,
                reason="client_tool"
                if any(entry.kind == "client_tool" for entry in outcome.pending)
                else "approval",
                tool_call_ids=[entry.tool_call_id for entry in outcome.pending],
            )
        )

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
        held = max(writer.held_child_seq(child_id), self.resume_from)
        finished: ChildOutcome | None = None
        while True:
            before = held
            final_read = False  # True once the stream gave its end: a failure after is not a drop
            try:
                async with prefetch(
                    target.transport.stream(child_id, held), in_task=False
                ) as events:
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
                        if (
                            paused is not None
                            and isinstance(final, ChunkEvent)
                            and await self._still_waiting(paused)
                        ):
                            # Its last word so far: it waits (its stream stays open).
                            return ChildOutcome(status="suspended", pending=paused.pending)
                        if isinstance(final, EndEvent):
                            return ChildOutcome(status="completed", output=final.output)
                        if isinstance(final, ErrorEvent):
                            final_read = True
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
                log.info("stream of %s failed (%s); asking its status", child_id, exc)
            # The seeds' order: status first, then reconnect from the last seq
            # held. A child whose status says it ended is still re-read (so the
            # parent's stream stays whole), but if its stream stays out of reach
            # the call ends with the outcome its status gave, not a drop error.
            if not final_read:
                finished = await self._ended() or finished
            # Only drops in a row count: a connection that made progress resets it.
            drops = 1 if held > before else drops + 1
            if drops > target.stream_retries:
                if finished is not None:
                    return finished
                raise StreamDropError(child_id, held)
            await anyio.sleep(target.stream_retry_base * 2 ** (drops - 1))

    async def _ended(self) -> ChildOutcome | None:
        """After a drop: the child's outcome if its status says it ended, else None."""
        target = self.target
        try:
            status = await target.transport.get_status(target.session_id)
        except (TransportError, AgentServerError) as exc:
            if not transient(exc):
                raise
            return None  # unreachable for now: the reconnect's backoff applies
        if status.status == "completed":
            return ChildOutcome(status="completed", output=status.output)
        if status.status in ("failed", "interrupted"):
            return ChildOutcome(status=status.status, error=status.error or status.status)
        return None

    async def _still_waiting(self, notice: InputRequired) -> bool:
        """True if the child is paused on exactly the entries of ``notice``.

        A parent catching up on its child's stream (re-opened after the child
        was resumed and paused again, or answered) can read an old notice
        that the child has moved past: it then goes on following.
        """
        target = self.target
        status = await target.retry(lambda: target.transport.get_status(target.session_id))
        waiting = {entry.tool_call_id for entry in status.pending_inputs}
        return status.status == "paused" and waiting == {e.tool_call_id for e in notice.pending}

    # --- finish -------------------------------------------------------------------

    async def finish(self, outcome: ChildOutcome) -> None:
        """Record the child's end and the call's result in one batch; fire ``after_sub_agent``."""
        target = self.target
        self.opened = False
        if outcome.status == "completed":
            output, error = checked_output(target.output_schema, outcome.output)
            outcome = (
                ChildOutcome(status="failed", error=error)
                if error is not None
                else ChildOutcome(status="completed", output=output)
            )
        if outcome.status != "completed" and target.remote is not None:
            failure = RemoteAgentFailedError(target.session_id, outcome.error or outcome.status)
            outcome = ChildOutcome(status=outcome.status, error=str(failure))
        await self.writer.append_with(lambda _latest: self.finish_events(outcome))
        await self.fire("after_sub_agent", hook_call(self.call, target), outcome)

    def finish_events(self, outcome: ChildOutcome) -> list[Event]:
        """The batch that ends the call: the child's end, the call's result, the usage record."""
        target = self.target
        result = (
            ToolOutcome(result=outcome.output)
            if outcome.status == "completed"
            else ToolOutcome(error=outcome.error or f"sub-agent {target.agent_type!r} failed")
        )
        return [
            *self._segment_end(outcome),
            *result_events(self.agent, self.writer.session_id, self.call, result, usage=False),
            UsageRecorded(
                kind="subagent", name=target.agent_type, sub_session_id=target.session_id
            ),
        ]

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
