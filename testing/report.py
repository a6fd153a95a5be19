"""What a test looks at after a run: the result, and each agent's trajectory from the logs."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Generic

from helix_agents.agents.config import OutputT
from helix_agents.events import PendingInput, SubAgentStart, ToolEnd
from helix_agents.log.projections import project_state
from helix_agents.log.state import RunProblem, SessionStatus
from helix_agents.log.store import EventStore
from helix_agents.messages import FINISH_TOOL_NAME, AssistantMessage
from helix_agents.runtime.handle import AgentResult

__all__ = ["RunReport", "ToolCallRecord", "Trajectory", "trajectory_of"]


@dataclass
class ToolCallRecord:
    """One tool call of a session as its log recorded it; ``child``: the sub-agent it ran."""

    name: str
    call_id: str
    arguments: Any = None
    result: Any = None
    error: str | None = None
    child: Trajectory | None = None


@dataclass
class Trajectory:
    """What one session did, from its log: its tool calls, its children, its end.

    ``calls`` are in the order the model asked for them (a round may run them
    in another), without ``__finish__`` (its arguments are ``output``); a call
    still waiting has no result;
    ``children`` are the sub-agent sessions this store holds, in the order
    they started (a remote child on another server is a call without a
    ``child``).
    """

    session_id: str
    agent_type: str
    status: SessionStatus
    output: Any = None
    error: str | None = None
    calls: list[ToolCallRecord] = field(default_factory=list)
    children: list[Trajectory] = field(default_factory=list)
    problems: list[RunProblem] = field(default_factory=list)

    @property
    def tool_names(self) -> list[str]:
        """The names of this session's tool calls, in order."""
        return [call.name for call in self.calls]

    def walk(self) -> Iterator[Trajectory]:
        """This session, then its descendants, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()

    def find(self, agent_type: str) -> Trajectory:
        """The first session of ``agent_type`` in this tree (this one included)."""
        for session in self.walk():
            if session.agent_type == agent_type:
                return session
        held = sorted({session.agent_type for session in self.walk()})
        raise KeyError(f"no session of agent {agent_type!r} in this tree; it holds {held}")


async def trajectory_of(store: EventStore, session_id: str) -> Trajectory:
    """The trajectory of ``session_id`` and the children ``store`` holds, read from their logs."""
    log_ = await store.read(session_id)
    if not log_:
        raise KeyError(f"session {session_id!r} is not in the store")
    state = project_state(log_)
    # In the order the model asked for them (a round may run them in another).
    calls: dict[str, ToolCallRecord] = {
        call.id: ToolCallRecord(name=call.name, call_id=call.id, arguments=call.arguments)
        for message in state.messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
        if call.name != FINISH_TOOL_NAME
    }
    child_ids: dict[str, str] = {}  # call id -> child session id
    for event in log_:
        if isinstance(event, ToolEnd) and event.tool_call_id in calls:
            record = calls[event.tool_call_id]
            record.result, record.error = event.result, event.error
        elif isinstance(event, SubAgentStart) and event.agent_id == session_id:
            child_ids.setdefault(event.tool_call_id, event.sub_agent_id)
    children: list[Trajectory] = []
    for call_id, child_id in child_ids.items():
        try:
            child = await trajectory_of(store, child_id)
        except KeyError:
            continue  # a remote child: its log is on its own server
        children.append(child)
        if call_id in calls:
            calls[call_id].child = child
    return Trajectory(
        session_id=session_id,
        agent_type=state.agent_type,
        status=state.status,
        output=state.output,
        error=state.error,
        calls=list(calls.values()),
        children=children,
        problems=list(state.problems),
    )


@dataclass
class RunReport(Generic[OutputT]):
    """A test's run: its ``result`` (as ``handle.result()`` gives it) and its ``trajectory``.

    ``pending`` is what still waits for a person anywhere in the tree (a run
    left ``paused`` because no answer was given for it).
    """

    result: AgentResult[OutputT]
    trajectory: Trajectory
    pending: list[PendingInput] = field(default_factory=list)

    @property
    def session_id(self) -> str:
        """The root session's id."""
        return self.result.session_id

    @property
    def status(self) -> SessionStatus:
        """How the run ended."""
        return self.result.status

    @property
    def output(self) -> OutputT | None:
        """The output (an ``output_schema`` instance, or the final text)."""
        return self.result.output

    @property
    def problems(self) -> list[RunProblem]:
        """The root's problems this turn (each session's are on its trajectory)."""
        return self.result.problems
