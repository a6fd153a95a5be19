"""``AgentHandle`` and ``AgentResult``: a run as its caller holds it, and how it ended."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Generic

import msgspec

from helix_agents._aio import closing_iter
from helix_agents.agents.config import OutputT
from helix_agents.errors import AgentRunError, AgentServerError
from helix_agents.events import PendingInput, RunStarted, Suspended
from helix_agents.log.projections import pending_inputs, stream_item
from helix_agents.log.state import RunProblem, SessionStatus, StreamItem
from helix_agents.log.streaming import RUN_ENDING_EVENTS
from helix_agents.protocol import RemoteStartResponse, SubmitResponse
from helix_agents.runtime.runs import SessionRuns
from helix_agents.runtime.service import ExecutorService

__all__ = ["AgentHandle", "AgentResult", "handle_of"]


class AgentResult(msgspec.Struct, Generic[OutputT], frozen=True, kw_only=True):
    """How a run ended: status, output or error, custom state, and what went wrong.

    ``output`` is an instance of the agent's ``output_schema`` when it has one
    (the log holds its JSON, validated back into the class here), else the
    final text; None unless ``status`` is ``completed``. ``problems`` are the
    turn's tool errors, unknown tools, failed children and rejected outputs,
    in order: the model was shown each and may have recovered, so a
    ``completed`` run can have some (a strict session fails at the first).
    """

    session_id: str
    status: SessionStatus
    output: OutputT | None = None
    error: str | None = None
    state: dict[str, Any] = {}
    step_count: int = 0
    problems: list[RunProblem] = []

    def unwrap(self) -> OutputT:
        """The output of a completed run; :class:`AgentRunError` for any other ending."""
        if self.status != "completed":
            raise AgentRunError(self.session_id, self.status, self.error)
        return self.output  # type: ignore[return-value]  # None only for an agent typed so


class AgentHandle(Generic[OutputT]):
    """A started or resumed run: wait for it, stream it, stop it."""

    def __init__(
        self,
        runs: SessionRuns,
        service: ExecutorService,
        session_id: str,
        run_id: str,
        start_seq: int,
    ):
        self.runs = runs
        """The sessions running where this run does (``wait_idle``, ``state``)."""
        self.service = service
        """The protocol over them: answers, interrupts and aborts go through it."""
        self.session_id = session_id
        self.run_id = run_id
        self.start_seq = start_seq
        """The seq of this run's ``run_started`` event."""

    def __repr__(self) -> str:
        return (
            f"<AgentHandle session={self.session_id!r} run={self.run_id!r} "
            f"from seq {self.start_seq}>"
        )

    async def result(self) -> AgentResult[OutputT]:
        """Wait until this run ends (completed, failed, interrupted or paused) and report it.

        Never raises for how the run ended: look at ``status``. A completed
        agent's output is validated into its ``output_schema`` class (an
        ``AgentServerError`` ``INTERNAL_ERROR`` if the recorded JSON no longer
        fits it, as after a schema change).
        """
        await self.runs.wait_idle(self.session_id)
        state = await self.runs.state(self.session_id)
        output = state.output
        agent = self.runs.registry.get(state.agent_type)
        schema = agent.output_schema if agent is not None else None
        if state.status == "completed" and schema is not None and output is not None:
            try:
                output = schema.model_validate(output)
            except ValueError as exc:
                raise AgentServerError(
                    "INTERNAL_ERROR",
                    f"session {self.session_id!r}: its recorded output does not fit "
                    f"{schema.__name__}: {exc}",
                ) from exc
        return AgentResult(
            session_id=self.session_id,
            status=state.status,
            output=output,
            error=state.error,
            state=state.custom_state,
            step_count=state.step_count,
            problems=list(state.problems),
        )

    async def stream(self, from_sequence: int | None = None) -> AsyncIterator[StreamItem]:
        """Yield this run's stream items (nested children flattened) until the run ends.

        ``from_sequence`` defaults to where this run started.
        """
        cursor = self.start_seq if from_sequence is None else from_sequence
        store = self.runs.store
        async with closing_iter(store.tail(self.session_id, cursor)) as events:
            async for event in events:
                item = stream_item(event)
                if item is not None:
                    yield item
                elif isinstance(event, (*RUN_ENDING_EVENTS, Suspended)):
                    return

    async def pending_inputs(self) -> list[PendingInput]:
        """The open entries (client tools, approvals) of this session's whole tree."""
        return pending_inputs(await self.runs.state(self.session_id))

    async def submit_tool_result(
        self, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool call anywhere in this session's tree."""
        return await self.service.submit_tool_result(self.session_id, tool_call_id, result, error)

    async def approve(
        self, tool_call_id: str, reason: str | None = None, *, decided_by: str | None = None
    ) -> SubmitResponse:
        """Approve a gated call anywhere in this session's tree (``decided_by``: who)."""
        return await self.service.submit_approval(
            self.session_id, tool_call_id, True, reason, decided_by=decided_by
        )

    async def deny(
        self, tool_call_id: str, reason: str | None = None, *, decided_by: str | None = None
    ) -> SubmitResponse:
        """Deny a gated call; the LLM gets an error result with ``reason`` (``decided_by``: who)."""
        return await self.service.submit_approval(
            self.session_id, tool_call_id, False, reason, decided_by=decided_by
        )

    async def interrupt(self, reason: str | None = None) -> None:
        """Ask the run to stop softly; it can be resumed."""
        await self.service.interrupt(self.session_id, reason)

    async def abort(self, reason: str | None = None) -> None:
        """Ask the run to stop for good."""
        await self.service.abort(self.session_id, reason)


async def handle_of(
    runs: SessionRuns, service: ExecutorService, response: RemoteStartResponse
) -> AgentHandle:
    """The handle of the run a start (resume, follow-up message) response names."""
    session_id = response.session_id
    active = runs.active(session_id)
    if active is not None and active.run_id == response.run_id:
        return AgentHandle(runs, service, session_id, response.run_id, active.start_seq)
    # A run this executor did not launch (an idempotent start of a session
    # begun elsewhere): find where it started in the log.
    start_seq = 0
    for event in reversed(await runs.store.read(session_id)):
        if isinstance(event, RunStarted) and event.run_id == response.run_id:
            start_seq = event.seq
            break
    return AgentHandle(runs, service, session_id, response.run_id, start_seq)
