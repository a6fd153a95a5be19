"""Aborting a paused tree: the abort reaches the children that wait with it.

A paused session has no run whose open sub-agent calls could pass an abort
on (a running parent's ``ChildCall.halt`` does that). Its children are
paused too, each waiting for people, so ``abort`` sends the abort to them
first (through each child's transport, local or remote; a paused child does
the same for its own children) and then records, in the parent's one
aborting batch, each acknowledged child's end as a halted call would
(``sub_session_finished`` and ``subagent_end``, then ``tool_end``). Forward
first, record second: if the parent's record is lost, the client's retry
finds the children already aborted and records them then.
"""

from __future__ import annotations

import logging

from helix_agents.errors import AgentServerError, HelixError
from helix_agents.events import Event, SubAgentEnd, SubSessionFinished, ToolEnd
from helix_agents.hitl.routing import child_transport
from helix_agents.ids import SessionId
from helix_agents.log.projections import project_state
from helix_agents.log.state import SessionState
from helix_agents.messages import AssistantMessage
from helix_agents.runtime.runs import SessionRuns

__all__ = ["abort_waiting_children", "waiting_children_ended"]

log = logging.getLogger("helix_agents")


def _waiting(state: SessionState) -> list[str]:
    if state.status != "paused":
        return []
    return [
        ref.sub_session_id
        for ref in state.sub_sessions.values()
        if ref.status == "paused_awaiting_client"
    ]


async def abort_waiting_children(
    runs: SessionRuns, session_id: SessionId, reason: str | None
) -> set[str]:
    """Abort the paused children of paused ``session_id``; the ids that are now ended."""
    log_ = await runs.store.read(session_id)
    if not log_:
        return set()
    state = project_state(log_)
    ended: set[str] = set()
    for child_id in _waiting(state):
        try:
            await child_transport(runs, state, child_id).abort(child_id, reason)
        except AgentServerError as exc:
            if exc.code != "ALREADY_COMPLETED":
                log.warning("could not abort child %s: %s", child_id, exc)
                continue
        except (HelixError, OSError) as exc:  # best effort: the parent aborts regardless
            log.warning("could not abort child %s: %s", child_id, exc)
            continue
        ended.add(child_id)
    return ended


def waiting_children_ended(state: SessionState, ended: set[str], error: str) -> list[Event]:
    """The parent's records of its aborted waiting children (those still open in ``state``)."""
    names = {
        call.id: call.name
        for message in state.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
    }
    events: list[Event] = []
    for child_id in _waiting(state):
        if child_id not in ended:
            continue
        ref = state.sub_sessions[child_id]
        events += [
            SubSessionFinished(sub_session_id=child_id, status="failed", error=error),
            SubAgentEnd(
                agent_id=state.session_id,
                agent_type=state.agent_type,
                sub_agent_id=child_id,
                sub_agent_type=ref.agent_type,
                tool_call_id=ref.tool_call_id,
                parent_session_id=state.session_id,
                success=False,
                error=error,
            ),
            ToolEnd(
                agent_id=state.session_id,
                agent_type=state.agent_type,
                tool_call_id=ref.tool_call_id,
                tool_name=names.get(ref.tool_call_id, ""),
                error=error,
            ),
        ]
    return events
