"""What ``replay --rerun`` answers from the recording: tools, remote children, later runs.

A re-run replays the model's answers (``ReplayLLM``). By default it also
answers, from the recording, every tool call (server tools, client tools,
approval gates: the recorded result is the call's result, so nothing runs
and no one is asked) and every remote child (a transport that streams the
chunks the parent recorded and ends as the child ended). A tool named in
``live`` runs for real instead (``subagent__x`` for a remote sub-agent, the
companion type for a remote companion). Local children are re-run like their
parents (their own recorded answers). See specs/cli.md.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

import msgspec

from helix_agents import AgentConfig, AgentExecutor, Tool, ToolContext
from helix_agents.agents import RemoteSubAgentTool, SubAgentTool
from helix_agents.errors import AgentServerError, HelixError
from helix_agents.events import ChildChunkForwarded, Event, RunStarted, SubSessionFinished
from helix_agents.log import project_state
from helix_agents.log.store import EventStore
from helix_agents.messages import ToolResultMessage
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteResumeRequest,
)
from helix_agents.testing.evals.answers import RecordedChild, RecordedChildren

__all__ = [
    "Recording",
    "answered_from",
    "read_recording",
    "rerun_later_runs",
]


class Recording:
    """What a recorded tree holds: every session's log of the store, tool results, child ends."""

    def __init__(self, logs: Mapping[str, list[Event]]) -> None:
        self.logs = dict(logs)
        self.results: dict[tuple[str, str], str] = {}
        self.children: dict[str, RecordedChild] = {}
        """What the parents recorded of their children, by child session id."""
        for session_id, log in self.logs.items():
            for message in project_state(log).messages:
                if isinstance(message, ToolResultMessage):
                    self.results[(session_id, message.tool_call_id)] = message.content
            for event in log:
                if isinstance(event, ChildChunkForwarded):
                    child = self.children.setdefault(event.child_session_id, RecordedChild())
                    child.chunks.append((event.child_seq, event.chunk))
                elif isinstance(event, SubSessionFinished):
                    self.children.setdefault(event.sub_session_id, RecordedChild()).end = event

    def result(self, session_id: str, tool_call_id: str) -> Any:
        """The recorded result of one call (its JSON, decoded); raises if none was recorded."""
        content = self.results.get((session_id, tool_call_id))
        if content is None:
            raise HelixError(
                f"no recorded result for call {tool_call_id!r} of {session_id!r} (the re-run "
                "left its recording here); pass --live with the tool's name to run it"
            )
        try:
            return msgspec.json.decode(content)
        except msgspec.DecodeError:
            return content  # recorded as plain text


async def read_recording(store: EventStore, session_id: str) -> Recording:
    """The recorded logs of ``session_id`` and of every descendant the store holds."""
    logs: dict[str, list[Event]] = {}
    queue = [session_id]
    while queue:
        current = queue.pop(0)
        if current in logs:
            continue
        log = list(await store.read(current))
        if not log:
            continue
        logs[current] = log
        queue.extend(project_state(log).sub_sessions)
    return Recording(logs)


def _recorded_tool(tool: Tool[Any], recording: Recording) -> Tool[Any]:
    async def recorded(value: Any, ctx: ToolContext) -> Any:
        return recording.result(ctx.session_id, ctx.tool_call_id)

    # No gate, no client, no output check: the recorded result is the answer.
    return replace(
        tool, execute=recorded, requires_approval=False, output_schema=None, expires_in=None
    )


def answered_from(
    agents: Iterable[AgentConfig], recording: Recording, live: Collection[str]
) -> list[AgentConfig]:
    """``agents`` (and, recursively, their local children) answered from ``recording``.

    One agent shared by several parents stays one agent (rewritten once).
    """
    transport = RecordedChildren(recording.children)  # started under their recorded ids
    done: dict[int, AgentConfig] = {}

    def rewrite(config: AgentConfig) -> AgentConfig:
        if id(config) in done:
            return done[id(config)]
        tools: list[Any] = []
        for tool in config.tools:
            if isinstance(tool, SubAgentTool):  # a local child is re-run, never live
                gate = tool.requires_approval if tool.name in live else False
                tools.append(replace(tool, agent=rewrite(tool.agent), requires_approval=gate))
            elif tool.name in live:
                tools.append(tool)
            elif isinstance(tool, RemoteSubAgentTool):
                tools.append(replace(tool, transport=transport, requires_approval=False))
            else:
                tools.append(_recorded_tool(tool, recording))
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


async def rerun_later_runs(executor: AgentExecutor, session_id: str, recorded: list[Event]) -> int:
    """Re-run the recording's runs after the first, in order; how many runs were re-run.

    A follow-up turn (``run_started(continue)``) is sent as the same message
    (same message id); a resume is resumed with its messages. A run the
    re-run cannot take (its session ended differently) is skipped: the
    comparison of outputs then shows it.
    """
    runs = 1
    for event in recorded[2:]:
        if not isinstance(event, RunStarted):
            continue
        try:
            if event.mode == "continue":
                await executor.service.send_message(
                    RemoteMessageRequest(
                        session_id=session_id,
                        message=list(event.messages),
                        message_id=event.message_id,
                    )
                )
            else:
                await executor.service.resume(
                    RemoteResumeRequest(session_id=session_id, message=list(event.messages) or None)
                )
        except AgentServerError:
            continue
        await executor.wait_idle(session_id)
        runs += 1
    return runs
