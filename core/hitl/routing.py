"""Answers to pending inputs: checked, routed hop by hop to the owner, recorded, resumed.

At each session on the path from the root to the owner (``specs/hitl.md``):
the owner checks the answer and records it (compare-and-append), then resumes
if all of its own entries are answered; an ancestor forwards the answer to
the child its ownership record names, through that child's transport, then
records the answer it forwarded and resumes itself if the owner resumed or
if nothing is left open in its subtree (the owner had taken the answer in
already: answered below first, or a retry after a crash).
Forward first, record second, so a crash in between loses nothing: the
client's retry is an identical repeat downstream.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal

import msgspec
from pydantic import ValidationError

from helix_agents.agents.config import RemoteSubAgentTool, SubAgentTool
from helix_agents.agents.tools import Tool
from helix_agents.children.target import child_target, companion_target
from helix_agents.errors import AgentServerError, ConcurrencyConflict, HelixError
from helix_agents.events import (
    ApprovalGiven,
    ClientToolResultSubmitted,
    Event,
    PendingInput,
    Suspended,
)
from helix_agents.hitl.gates import expiry_message
from helix_agents.ids import SessionId
from helix_agents.log.projections import pending_inputs, project_state
from helix_agents.log.state import SessionState, SubSessionRef, UsageTotals
from helix_agents.messages import AssistantMessage
from helix_agents.protocol import SubmitResponse
from helix_agents.runtime.runs import SessionRuns
from helix_agents.runtime.tool_runner import validation_message
from helix_agents.runtime.writer import stamp
from helix_agents.transport import RemoteAgentTransport

__all__ = ["Answer", "Resume", "remote_usage", "route_answer", "send_approval", "watch_expiry"]

Resume = Callable[[str], Awaitable[bool]]
"""``resume(session_id)``: resume a paused session whose answers came in (the service's)."""

log = logging.getLogger("helix_agents")


class Answer(msgspec.Struct, frozen=True, kw_only=True):
    """An answer to one pending entry: a client tool's result/error, or a decision.

    ``decided_by`` (who decided) travels with a decision and is recorded with
    it, but is not part of what is decided: a repeat of the same verdict and
    reason by someone else is an identical repeat, and the first decider stays.
    """

    kind: Literal["client_tool", "approval"]
    result: Any = None
    error: str | None = None
    approved: bool = False
    reason: str | None = None
    expired: bool = False
    decided_by: str | None = None

    def event(self, tool_call_id: str) -> Event:
        """The event that records this answer."""
        if self.kind == "client_tool":
            return ClientToolResultSubmitted(
                tool_call_id=tool_call_id,
                result=self.result,
                error=self.error,
                expired=self.expired,
            )
        return ApprovalGiven(
            tool_call_id=tool_call_id,
            approved=self.approved,
            reason=self.reason,
            expired=self.expired,
            decided_by=self.decided_by,
        )

    def same_as(self, recorded: Any) -> bool:
        """True when ``recorded`` (an own entry or an ownership record) holds this answer."""
        if self.kind == "client_tool":
            return bool(recorded.result == self.result and recorded.error == self.error)
        return bool(recorded.approved == self.approved and recorded.reason == self.reason)

    async def send(
        self, transport: RemoteAgentTransport, session_id: str, tool_call_id: str
    ) -> SubmitResponse:
        """Forward this answer to ``session_id`` through ``transport``."""
        if self.kind == "client_tool":
            return await transport.submit_tool_result(
                session_id, tool_call_id, self.result, self.error
            )
        return await send_approval(
            transport, session_id, tool_call_id, self.approved, self.reason, self.decided_by
        )


async def send_approval(
    transport: RemoteAgentTransport,
    session_id: str,
    tool_call_id: str,
    approved: bool,
    reason: str | None,
    decided_by: str | None,
) -> SubmitResponse:
    """``transport.submit_approval``, naming ``decided_by`` only when there is a decider.

    So a transport written before ``decided_by`` existed still takes every
    decision that names nobody.
    """
    if decided_by is None:
        return await transport.submit_approval(session_id, tool_call_id, approved, reason)
    return await transport.submit_approval(
        session_id, tool_call_id, approved, reason, decided_by=decided_by
    )


def _not_found(session_id: str, tool_call_id: str) -> AgentServerError:
    return AgentServerError(
        "NOT_FOUND", f"session {session_id!r} waits for no input {tool_call_id!r}"
    )


def _wrong_kind(tool_call_id: str, kind: str) -> AgentServerError:
    wanted = "a tool result" if kind == "client_tool" else "an approval decision"
    return AgentServerError("INVALID_REQUEST", f"input {tool_call_id!r} needs {wanted}")


def _conflict(tool_call_id: str) -> AgentServerError:
    return AgentServerError(
        "ALREADY_ANSWERED", f"input {tool_call_id!r} was already answered differently"
    )


def _ended(state: SessionState, tool_call_id: str) -> AgentServerError:
    """A new answer into a tree whose session ended (aborted, failed): nothing would run."""
    return AgentServerError(
        "ALREADY_COMPLETED",
        f"session {state.session_id!r} is {state.status}: input {tool_call_id!r} "
        "can no longer be answered",
    )


def _consumed_answer(log_: list[Event], tool_call_id: str) -> Answer | None:
    """The answer this session recorded for an entry it no longer lists (its run took it in)."""
    for event in reversed(log_):
        if isinstance(event, ClientToolResultSubmitted) and event.tool_call_id == tool_call_id:
            return Answer(
                kind="client_tool", result=event.result, error=event.error, expired=event.expired
            )
        if isinstance(event, ApprovalGiven) and event.tool_call_id == tool_call_id:
            return Answer(
                kind="approval",
                approved=event.approved,
                reason=event.reason,
                expired=event.expired,
                decided_by=event.decided_by,
            )
    return None


def _own_entry(state: SessionState, tool_call_id: str) -> tuple[str, Any] | None:
    if tool_call_id in state.pending_client_tools:
        return "client_tool", state.pending_client_tools[tool_call_id]
    if tool_call_id in state.pending_approvals:
        return "approval", state.pending_approvals[tool_call_id]
    return None


def _answered(kind: str, entry: Any) -> bool:
    return bool(entry.submitted) if kind == "client_tool" else entry.approved is not None


def _taken_in(log_: Sequence[Event], tool_call_id: str) -> bool:
    """True if the session suspended again after recording its answer to ``tool_call_id``.

    Its run then saw the answer (an approved delegation waits on its child
    with its entry still listed): a repeat of that answer has nothing to resume.
    """
    answered = suspended = 0
    for event in log_:
        if isinstance(event, Suspended):
            suspended = event.seq
        elif (
            isinstance(event, ClientToolResultSubmitted | ApprovalGiven)
            and event.tool_call_id == tool_call_id
        ):
            answered = event.seq
    return suspended > answered


def _own_entries_answered(state: SessionState) -> bool:
    return all(p.submitted for p in state.pending_client_tools.values()) and all(
        p.approved is not None for p in state.pending_approvals.values()
    )


async def route_answer(
    runs: SessionRuns, resume: Resume, session_id: SessionId, tool_call_id: str, answer: Answer
) -> SubmitResponse:
    """Apply ``answer`` to entry ``tool_call_id`` on ``session_id``'s path (see the module)."""
    while True:
        log_ = await runs.store.read(session_id)
        if not log_:
            raise AgentServerError("NOT_FOUND", f"session {session_id!r} not found")
        state = project_state(log_)
        own = _own_entry(state, tool_call_id)
        if own is not None:
            kind, entry = own
            if kind != answer.kind:
                raise _wrong_kind(tool_call_id, kind)
            if _answered(kind, entry):
                if not answer.same_as(entry):
                    raise _conflict(tool_call_id)
                # An identical repeat: nothing to record (it may follow a crash
                # between recording and resuming: resume if that is due).
                if _taken_in(log_, tool_call_id):
                    return SubmitResponse(resumed=False)
                return SubmitResponse(resumed=await _resume_if_due(runs, resume, session_id))
            if state.is_terminal:
                raise _ended(state, tool_call_id)
            if kind == "client_tool":
                _check_result(runs, state, entry.tool_name, answer)
            if not await _record(runs, state, answer.event(tool_call_id)):
                continue  # the log moved: decide again
            return SubmitResponse(resumed=await _resume_if_due(runs, resume, session_id))
        mirror = state.client_tool_ownership.get(tool_call_id)
        if mirror is None or mirror.via_session_id is None:
            earlier = _consumed_answer(log_, tool_call_id)
            if earlier is None:
                raise _not_found(session_id, tool_call_id)
            # Answered, and its result already taken in by the run.
            if earlier.kind != answer.kind:
                raise _wrong_kind(tool_call_id, earlier.kind)
            same = msgspec.structs.replace(
                answer, expired=earlier.expired, decided_by=earlier.decided_by
            )
            if earlier != same:
                raise _conflict(tool_call_id)
            return SubmitResponse(resumed=False)
        if mirror.kind != answer.kind:
            raise _wrong_kind(tool_call_id, mirror.kind)
        if mirror.answered and not answer.same_as(mirror):
            raise _conflict(tool_call_id)
        if not mirror.answered and state.is_terminal:
            raise _ended(state, tool_call_id)
        transport = child_transport(runs, state, mirror.via_session_id)
        response = await answer.send(transport, mirror.via_session_id, tool_call_id)
        if not mirror.answered:
            await _record_once(runs, session_id, tool_call_id, answer)
        if response.resumed:
            await _resume_paused(resume, session_id)
            return SubmitResponse(resumed=True)
        # The owner did not resume on this answer: it had taken it in already
        # (answered at a session below, or a retry after a crash between
        # forward and record). If nothing is left open here, go on anyway.
        return SubmitResponse(resumed=await _resume_if_settled(runs, resume, session_id))


def _check_result(runs: SessionRuns, state: SessionState, tool_name: str, answer: Answer) -> None:
    if answer.error is not None:
        return
    agent = runs.registry.get(state.agent_type)
    tool = agent.tool(tool_name) if agent is not None else None
    if isinstance(tool, Tool) and tool.output_schema is not None:
        try:
            tool.output_schema.model_validate(answer.result)
        except ValidationError as exc:
            message = validation_message(exc).replace("invalid arguments", "invalid result", 1)
            raise AgentServerError("INVALID_REQUEST", message) from exc


async def _record(runs: SessionRuns, state: SessionState, event: Event) -> bool:
    try:
        await runs.store.append(
            state.session_id, stamp(state.session_id, state.last_seq, [event]), state.last_seq
        )
    except ConcurrencyConflict:
        return False
    return True


async def _record_once(
    runs: SessionRuns, session_id: str, tool_call_id: str, answer: Answer
) -> None:
    """Record on an ancestor the answer it forwarded, unless its log already has one."""
    while True:
        state = project_state(await runs.store.read(session_id))
        mirror = state.client_tool_ownership.get(tool_call_id)
        if mirror is None or mirror.answered:
            return
        if await _record(runs, state, answer.event(tool_call_id)):
            return


async def _resume_if_due(runs: SessionRuns, resume: Resume, session_id: str) -> bool:
    """Resume the owner if every entry of its own is answered; True if it goes on."""
    state = await runs.state(session_id)
    if state.is_terminal or not _own_entries_answered(state):
        return False
    await _resume_paused(resume, session_id)
    return True


async def _resume_if_settled(runs: SessionRuns, resume: Resume, session_id: str) -> bool:
    """Resume an ancestor left paused with no open entry in its subtree; True if it goes on."""
    state = await runs.state(session_id)
    if state.status != "paused" or pending_inputs(state):
        return False
    return await _resume_paused(resume, session_id)


async def _resume_paused(resume: Resume, session_id: str) -> bool:
    # Only a paused session: a running one takes the answer in, and one a
    # person stopped (interrupted, even just now) stays stopped.
    try:
        return await resume(session_id)
    except AgentServerError as exc:
        if exc.code not in ("ALREADY_COMPLETED", "ALREADY_RUNNING"):
            raise
        return False


def child_transport(
    runs: SessionRuns, state: SessionState, child_session_id: str
) -> RemoteAgentTransport:
    """The transport that reaches child ``child_session_id`` of ``state``'s session."""
    ref = state.sub_sessions.get(child_session_id)
    agent = runs.registry.get(state.agent_type)
    if ref is None or agent is None:
        raise AgentServerError(
            "INTERNAL_ERROR", f"no route to child {child_session_id!r} of {state.session_id!r}"
        )
    if ref.mode == "persistent":
        entry = agent.persistent(ref.agent_type)
        if entry is None:
            raise AgentServerError(
                "INTERNAL_ERROR", f"no persistent agent reaches child {child_session_id!r}"
            )
        return companion_target(entry, child_session_id, runs.env.local_transport).transport
    tool_name = next(
        (
            call.name
            for message in state.messages
            if isinstance(message, AssistantMessage)
            for call in message.tool_calls
            if call.id == ref.tool_call_id
        ),
        None,
    )
    tool = agent.tool(tool_name) if tool_name is not None else None
    if not isinstance(tool, SubAgentTool | RemoteSubAgentTool):
        raise AgentServerError(
            "INTERNAL_ERROR", f"no sub-agent tool reaches child {child_session_id!r}"
        )
    return child_target(
        tool, state.session_id, ref.tool_call_id, runs.env.local_transport
    ).transport


async def watch_expiry(
    runs: SessionRuns,
    resume: Resume,
    session_id: SessionId,
    entry: PendingInput,
    sleep: Callable[[float], Awaitable[None]],
) -> None:
    """At ``entry.expires_at``, answer it at the root as expired (a person's answer may win)."""
    assert entry.expires_at is not None
    await sleep(max(0.0, entry.expires_at - time.time()))
    message = expiry_message(entry.expires_in)
    answer = (
        Answer(kind="client_tool", error=message, expired=True)
        if entry.kind == "client_tool"
        else Answer(kind="approval", approved=False, reason=message, expired=True)
    )
    try:
        await route_answer(runs, resume, session_id, entry.tool_call_id, answer)
    except AgentServerError as exc:
        if exc.code not in ("ALREADY_ANSWERED", "NOT_FOUND"):
            log.warning("expiry of %s on %s failed: %s", entry.tool_call_id, session_id, exc)


def expiring(state: SessionState) -> list[PendingInput]:
    """The open entries of a paused root that expire."""
    if state.parent_session_id is not None or state.status != "paused":
        return []
    return [entry for entry in pending_inputs(state) if entry.expires_at is not None]


async def remote_usage(
    runs: SessionRuns, state: SessionState, ref: SubSessionRef
) -> dict[str, UsageTotals]:
    """A remote child's usage and its descendants' there, asked of its server (its status).

    A child or descendant that cannot be reached is left out (logged).
    """
    found: dict[str, UsageTotals] = {}
    queue = [ref.sub_session_id]
    try:
        transport = child_transport(runs, state, ref.sub_session_id)
    except HelixError as exc:
        log.warning("usage of remote child %s left out: %s", ref.sub_session_id, exc)
        return found
    while queue:
        sid = queue.pop(0)
        if sid in found:
            continue
        try:
            status = await transport.get_status(sid)
        except (HelixError, OSError) as exc:
            log.warning("usage of remote session %s left out: %s", sid, exc)
            continue
        if status.usage is not None:
            found[sid] = status.usage
        queue.extend(status.local_sub_session_ids)
    return found
