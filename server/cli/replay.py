"""The replay view of a session log: its timeline, a blank line, then its folded state.

Shared by ``helix-agents replay`` and ``helix-agents demo``.
"""

from __future__ import annotations

from collections.abc import Sequence

from helix_agents.agents.tools import is_sub_agent_tool
from helix_agents.events import ChildChunkForwarded, ChunkBase, Event, ToolStart
from helix_agents.log.projections import project_state
from helix_agents.log.state import SessionState
from helix_agents.messages import Message
from helix_agents.server.cli.timeline import (
    format_event,
    json_text,
    one_line,
    quoted,
    tag_of,
    tag_of_message,
)
from helix_agents.server.streams.tree import is_finish_call

__all__ = ["format_state", "replay_lines", "tree_tool_calls"]


def format_state(state: SessionState, *, total_seq: int | None = None) -> list[str]:
    """The folded state as readable lines (``total_seq``: the log's length, for ``--at``)."""
    of = f" of {total_seq}" if total_seq is not None and total_seq != state.last_seq else ""
    lines = [f"state at seq {state.last_seq}{of}"]

    def row(name: str, value: str) -> None:
        lines.append(f"  {name:<20} {value}")

    row("session", f"{state.session_id} (agent {state.agent_type})")
    if state.parent_session_id:
        row("parent / root", f"{state.parent_session_id} / {state.root_session_id}")
    status = state.status + (f" ({state.suspension})" if state.suspension else "")
    if state.interrupt_requested:
        status += ", interrupt requested"
    if state.abort_requested:
        status += ", abort requested"
    row("status", status)
    row("steps", f"{state.step_count} (this run: {state.run_step_count})")
    row("run id", state.run_id)
    row("output", "-" if state.output is None else json_text(state.output, None))
    error = "-" if state.error is None else quoted(state.error, 200)
    row("error", error + (" (recoverable)" if state.recoverable else ""))
    row("custom state", json_text(state.custom_state, None))
    row("messages", _message_counts(state.messages))
    if state.host_id:
        row("host", state.host_id)
    row("sub-sessions", "none" if not state.sub_sessions else str(len(state.sub_sessions)))
    for ref in state.sub_sessions.values():
        delivered = "n/a" if ref.mode == "ephemeral" else "no"
        delivered = "yes" if ref.completion_delivered else delivered
        lines.append(
            f"    {ref.sub_session_id}  {ref.agent_type} ({ref.mode})  {ref.status}  "
            f"last child seq {ref.last_child_seq}  completion delivered: {delivered}"
        )
    pending = state.pending_client_tools
    row("pending client tools", "none" if not pending else str(len(pending)))
    for tool in pending.values():
        done = "result submitted" if tool.submitted else "waiting"
        lines.append(f"    {tool.tool_call_id}  {tool.tool_name}  {done}")
    if state.pending_approvals:
        row("pending approvals", str(len(state.pending_approvals)))
        for approval in state.pending_approvals.values():
            verdict = {None: "waiting", True: "approved", False: "denied"}[approval.approved]
            lines.append(f"    {approval.tool_call_id}  {approval.tool_name}  {verdict}")
    owners = state.client_tool_ownership
    row("ownership", "none" if not owners else str(len(owners)))
    for call_id, owner in owners.items():
        where = f" (remote {owner.remote.transport})" if owner.remote else ""
        lines.append(f"    {call_id} -> {owner.owner_session_id}{where}")
    if state.workspace_session_id:
        row("workspaces of", state.workspace_session_id)
    files = [file for by_path in state.workspace_files.values() for file in by_path.values()]
    if files:
        row("workspace files", str(len(files)))
    for file in files:
        lines.append(
            f"    {file.workspace}: {quoted(file.path, 80)}  {file.size} B  "
            f"sha256={file.sha256[:12]}  (seq {file.seq})"
        )
    usage = state.usage
    row(
        "usage (own)",
        f"tokens in {usage.input_tokens} / out {usage.output_tokens}"
        + (f" (cached in {usage.cached_input_tokens})" if usage.cached_input_tokens else "")
        + (f" (reasoning {usage.reasoning_tokens})" if usage.reasoning_tokens else "")
        + f", llm calls {usage.llm_calls}, tool calls {usage.tool_calls}, "
        f"sub-agent calls {usage.sub_agent_calls}"
        + "".join(f", {name} {value:g}" for name, value in sorted(usage.custom.items()))
        + " (this session's; its sub-agents' are in their own logs)",
    )
    return [one_line(line) for line in lines]


def tree_tool_calls(events: Sequence[Event]) -> dict[str, int]:
    """Tool calls per agent of the whole tree, from the chunks in one log (children's forwarded).

    Counts each ``tool_start`` of a regular tool (not a sub-agent call, not an
    agent's ``__finish__``), by agent name; every agent seen on the stream
    is listed, with 0 if it called none.
    """
    counts: dict[str, int] = {}
    for event in events:
        chunk = event.chunk if isinstance(event, ChildChunkForwarded) else event
        if not isinstance(chunk, ChunkBase):
            continue
        counts.setdefault(chunk.agent_type, 0)
        if (
            isinstance(chunk, ToolStart)
            and not is_finish_call(chunk)
            and not is_sub_agent_tool(chunk.tool_name)
        ):
            counts[chunk.agent_type] += 1
    return counts


def _message_counts(messages: Sequence[Message]) -> str:
    counts: dict[str, int] = {}
    for message in messages:
        role = tag_of_message(message)
        counts[role] = counts.get(role, 0) + 1
    detail = ", ".join(f"{role} {count}" for role, count in counts.items())
    return f"{len(messages)} ({detail})" if detail else "0"


def replay_lines(events: Sequence[Event], *, total_seq: int | None = None) -> list[str]:
    """The timeline of ``events``, a blank line, then their folded state.

    Raises :class:`~helix_agents.errors.CorruptLogError` if they are not a valid log.
    """
    state = project_state(events)
    width = max((len(tag_of(event)) for event in events), default=0)
    timeline = [format_event(event, tag_width=width) for event in events]
    counts = tree_tool_calls(events)
    by_agent = ", ".join(f"{name} {count}" for name, count in counts.items()) or "none"
    tree = f"  {'tool calls by agent':<20} {by_agent} (the whole tree, from this log's stream)"
    return [*timeline, "", *format_state(state, total_seq=total_seq), one_line(tree)]
