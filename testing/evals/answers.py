"""An eval case's tools and remote children, answered from the recording where the call matches.

The branch's model is live, so its calls have new ids; a call is matched to
the recording by what it asks, not by id: the calling agent's type, the
tool's name and its arguments (as canonical JSON). Each recorded call answers
one matching call, first recorded first. A remote child is matched the same
way by its agent type and its input, and answered by replaying the chunks
and the end its parent recorded. A tool named in ``live`` runs for real; a
call that matches nothing recorded fails as a tool error (the model sees it)
and is noted in :attr:`RecordedCalls.misses`: nothing runs by surprise.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from helix_agents import AgentConfig, Tool, ToolContext
from helix_agents.agents import RemoteSubAgentTool, SubAgentTool
from helix_agents.errors import HelixError, TransportError
from helix_agents.events import (
    ChildChunkForwarded,
    Event,
    MessageAppended,
    SessionCreated,
    SubSessionFinished,
    SubSessionStarted,
)
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
)
from helix_agents.runtime.tool_runner import InvalidArguments, validate_arguments

__all__ = [
    "RecordedCalls",
    "RecordedChild",
    "RecordedChildren",
    "answer_from_recording",
    "canonical",
]


def canonical(value: Any) -> str:
    """``value`` as JSON with sorted keys: two equal arguments give the same text."""
    return msgspec.json.encode(msgspec.to_builtins(value), order="sorted").decode()


@dataclass
class RecordedChild:
    """A child as its parent's log recorded it: its forwarded chunks (child seq, chunk), its end."""

    chunks: list[tuple[int, Any]] = field(default_factory=list)
    end: SubSessionFinished | None = None


class RecordedCalls:
    """What a recorded tree answers: its tool results and remote children, by what was asked."""

    def __init__(self, logs: Mapping[str, Sequence[Event]]) -> None:
        self.results: dict[tuple[str, str], list[tuple[Any, ToolResultMessage]]] = {}
        self.children: dict[tuple[str, str], deque[str]] = {}
        self.recorded_children: dict[str, RecordedChild] = {}
        self.misses: list[str] = []
        """Calls the recording could not answer, as ``agent: tool(arguments)``, in order."""
        for log in logs.values():
            self._add(log)

    def _add(self, log: Sequence[Event]) -> None:
        if not log or not isinstance(log[0], SessionCreated):
            return
        agent = log[0].agent_type
        asked: dict[str, tuple[str, Any]] = {}
        for event in log:
            if isinstance(event, MessageAppended):
                message = event.message
                if isinstance(message, AssistantMessage):
                    for call in message.tool_calls:
                        asked[call.id] = (call.name, call.arguments)
                elif isinstance(message, ToolResultMessage) and message.tool_call_id in asked:
                    name, arguments = asked[message.tool_call_id]
                    self.results.setdefault((agent, name), []).append((arguments, message))
            elif isinstance(event, SubSessionStarted) and event.remote is not None:
                key = (event.agent_type, canonical(event.input))
                self.children.setdefault(key, deque()).append(event.sub_session_id)
                self.recorded_children.setdefault(event.sub_session_id, RecordedChild())
            elif isinstance(event, ChildChunkForwarded):
                child = self.recorded_children.setdefault(event.child_session_id, RecordedChild())
                child.chunks.append((event.child_seq, event.chunk))
            elif isinstance(event, SubSessionFinished):
                self.recorded_children.setdefault(event.sub_session_id, RecordedChild()).end = event

    def answer(
        self, agent: str, name: str, arguments: Any, same: Callable[[Any], str] = canonical
    ) -> Any:
        """The recorded result of this call (decoded JSON); raises if the recording has none.

        ``same`` turns recorded arguments into the form ``arguments`` is in
        (the tool's validated input, as canonical JSON).
        """
        wanted = canonical(arguments)
        recorded = self.results.get((agent, name), [])
        index = next((i for i, (raw, _) in enumerate(recorded) if same(raw) == wanted), None)
        if index is None:
            shown = wanted
            self.misses.append(f"{agent}: {name}({shown[:200]})")
            raise HelixError(
                f"no recorded call of {name} with these arguments (the branch left its "
                f"recording here); run the eval with --live {name} to run it"
            )
        _, message = recorded.pop(index)
        if message.is_error:
            raise HelixError(message.content)
        try:
            return msgspec.json.decode(message.content)
        except msgspec.DecodeError:
            return message.content  # recorded as plain text

    def child(self, request: RemoteStartRequest) -> str:
        """The recorded remote child this start matches; raises if none is left."""
        found = self.children.get((request.agent_type, canonical(request.input)))
        if not found:
            self.misses.append(f"remote child {request.agent_type}({canonical(request.input)})")
            raise TransportError(
                f"no recorded remote child {request.agent_type!r} with this input (the branch "
                "left its recording here); run the eval with --live to call it"
            )
        return found.popleft()


class RecordedChildren:
    """A :class:`~helix_agents.RemoteAgentTransport` replaying remote children from a recording.

    ``children``: the recorded children by their recorded session id.
    ``match``: which recorded child a start is (an eval's branch starts its
    children under new ids: matched by what they are asked); None: a child
    is started under its recorded id (a rerun). ``stream`` yields the
    recorded chunks after the seq asked for, then the recorded end;
    ``get_status`` says how it ended. Nothing is sent anywhere.
    """

    def __init__(
        self,
        children: Mapping[str, RecordedChild],
        match: Callable[[RemoteStartRequest], str] | None = None,
    ) -> None:
        self.children = children
        self.match = match
        self.started: dict[str, str] = {}  # a started child's id -> its recorded id

    def _recorded(self, session_id: str) -> RecordedChild:
        return self.children.get(self.started.get(session_id, session_id), RecordedChild())

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Take the start: its recorded child (matched, when a matcher was given)."""
        sid = request.session_id
        if self.match is not None and sid not in self.started:
            self.started[sid] = self.match(request)
        return RemoteStartResponse(session_id=sid, stream_id=sid, run_id="recorded")

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Accept the resume (the recording holds what followed)."""
        sid = request.session_id
        return RemoteStartResponse(session_id=sid, stream_id=sid, run_id="recorded")

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """Accept the message (the recording holds what followed)."""
        sid = request.session_id
        return RemoteMessageResponse(session_id=sid, stream_id=sid, run_id="recorded")

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The recorded chunks after ``from_sequence``, then the recorded end."""
        child = self._recorded(session_id)
        for seq, chunk in child.chunks:
            if seq > from_sequence:
                yield ChunkEvent(chunk=chunk, sequence=seq)
        if child.end is not None and child.end.status == "completed":
            yield EndEvent(output=child.end.output)
        else:
            error = child.end.error if child.end is not None else None
            yield ErrorEvent(error=error or "not in the recording")

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """How the recorded child ended."""
        child = self._recorded(session_id)
        end = child.end
        return RemoteStatusResponse(
            session_id=session_id,
            run_id="recorded",
            status="completed" if end is not None and end.status == "completed" else "failed",
            step_count=0,
            is_executing=False,
            stream_id=session_id,
            latest_sequence=child.chunks[-1][0] if child.chunks else 0,
            output=end.output if end is not None else None,
            error=end.error if end is not None else "not in the recording",
        )

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Nothing to stop."""

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Nothing to stop."""

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Recorded children need no answers."""
        return SubmitResponse(resumed=False)

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Recorded children need no answers."""
        return SubmitResponse(resumed=False)


def _answered(tool: Tool[Any], calls: RecordedCalls) -> Tool[Any]:
    def same(raw: Any) -> str:
        try:
            return canonical(validate_arguments(tool.input_schema, raw).model_dump(mode="json"))
        except InvalidArguments:
            return canonical(raw)

    async def recorded(value: Any, ctx: ToolContext) -> Any:
        arguments = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
        return calls.answer(ctx.agent_type, tool.name, arguments, same)

    # No gate, no client, no output check: the recorded result is the answer.
    return replace(
        tool, execute=recorded, requires_approval=False, output_schema=None, expires_in=None
    )


def answer_from_recording(
    agents: Iterable[AgentConfig], calls: RecordedCalls, live: Collection[str]
) -> list[AgentConfig]:
    """``agents`` (and their local children) with tools and remote children answered by ``calls``.

    A tool named in ``live`` (``subagent__x`` for a remote sub-agent, the
    companion type for a remote companion) is kept as it is. Local children
    run like their parents. One agent shared by several parents is rewritten once.
    """
    transport = RecordedChildren(calls.recorded_children, calls.child)
    done: dict[int, AgentConfig] = {}

    def rewrite(config: AgentConfig) -> AgentConfig:
        if id(config) in done:
            return done[id(config)]
        tools: list[Any] = []
        for tool in config.tools:
            if isinstance(tool, SubAgentTool):
                tools.append(replace(tool, agent=rewrite(tool.agent)))
            elif tool.name in live:
                tools.append(tool)
            elif isinstance(tool, RemoteSubAgentTool):
                tools.append(replace(tool, transport=transport, requires_approval=False))
            else:
                tools.append(_answered(tool, calls))
        companions = [
            replace(entry, agent=rewrite(entry.agent))
            if entry.transport is None
            else entry
            if entry.agent.name in live
            else replace(entry, transport=transport)
            for entry in config.persistent_agents
        ]
        done[id(config)] = new = replace(
            config, tools=tuple(tools), persistent_agents=tuple(companions)
        )
        return new

    return [rewrite(agent) for agent in agents]
