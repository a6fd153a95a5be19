"""Human-readable lines for a session log: one per event, one per stream item.

Used by ``helix-agents replay`` and ``helix-agents demo``; ``server/cli/replay.py`` adds the
folded state. Everything here is a pure function of events.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, assert_never

import msgspec

from helix_agents.events import (
    Aborted,
    AbortRequested,
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    Chunk,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Completed,
    CompletionDelivered,
    CustomChunk,
    ErrorChunk,
    Event,
    EventBase,
    Failed,
    HostClaimed,
    InputRequired,
    Interrupted,
    InterruptRequested,
    MemoryRead,
    MemoryWritten,
    MessageAppended,
    MessageQueued,
    OutputChunk,
    PartialOutput,
    Principal,
    ReasoningDelta,
    RequestMade,
    RunStarted,
    RunSuperseded,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleResumed,
    SessionCreated,
    SessionForked,
    StateUpdated,
    StepRestarted,
    StepStarted,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    SubSessionSuspended,
    Suspended,
    TextDelta,
    ToolEnd,
    ToolStart,
    UsageRecorded,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
    WorkspaceDeleted,
    WorkspaceWritten,
)
from helix_agents.log.state import StreamItem
from helix_agents.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.base import FINISH_TOOL_NAME
from helix_agents.server.streams.tree import is_finish_call

__all__ = [
    "StreamPrinter",
    "format_event",
    "json_text",
    "one_line",
    "principal_text",
    "quoted",
    "format_time",
    "summarize_chunk",
    "summarize_event",
    "tag_of",
    "tag_of_message",
]

_TEXT_LIMIT = 48
_VALUE_LIMIT = 60


def tag_of(event: EventBase) -> str:
    """The wire ``type`` tag of an event or chunk (``text_delta``, ``tool_start`` ...)."""
    return str(type(event).__struct_config__.tag)


def format_time(ts: float) -> str:
    """A Unix timestamp as UTC ``HH:MM:SS.mmm`` (``??:??:??.???`` if it is out of range)."""
    try:
        return datetime.fromtimestamp(ts, tz=UTC).strftime("%H:%M:%S.%f")[:-3]
    except (OverflowError, OSError, ValueError):
        return "??:??:??.???"


def one_line(text: str) -> str:
    """``text`` with every unprintable character (newline, tab, control) escaped."""
    if text.isprintable():
        return text
    return "".join(char if char.isprintable() else ascii(char)[1:-1] for char in text)


def quoted(text: str, limit: int = _TEXT_LIMIT) -> str:
    """A string quoted on one line (control characters escaped), cut at ``limit``."""
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def json_text(value: Any, limit: int | None = _VALUE_LIMIT) -> str:
    """A JSON value on one line, cut at ``limit`` characters (never cut when None)."""
    try:
        text = msgspec.json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    if limit is not None and len(text) > limit:
        return text[: limit - 3] + "..."
    return text


def _reason(reason: str | None) -> str:
    return f"reason={quoted(reason)}" if reason else "(no reason)"


def summarize_chunk(chunk: Chunk) -> str:
    """A one-line summary of a stream chunk, without its type tag."""
    match chunk:
        case TextDelta():
            return quoted(chunk.delta)
        case ReasoningDelta():
            return f"thinks {quoted(chunk.delta)}"
        case PartialOutput():
            return f"so far {json_text(chunk.output)}"
        case ToolStart() if is_finish_call(chunk):
            return f"output ({chunk.tool_call_id}) {json_text(chunk.arguments)}"
        case ToolEnd() if is_finish_call(chunk):
            verdict = f"refused error={quoted(chunk.error)}" if chunk.error else "accepted"
            return f"output ({chunk.tool_call_id}) {verdict}"
        case ToolStart():
            return f"{chunk.tool_name} ({chunk.tool_call_id}) args={json_text(chunk.arguments)}"
        case ToolEnd():
            outcome = f"error={quoted(chunk.error)}" if chunk.error else json_text(chunk.result)
            return f"{chunk.tool_name} ({chunk.tool_call_id}) -> {outcome}"
        case SubAgentStart():
            return f"{chunk.sub_agent_type} {chunk.sub_agent_id} ({chunk.tool_call_id})"
        case SubAgentEnd():
            outcome = "ok" if chunk.success else f"failed error={quoted(chunk.error or '')}"
            return f"{chunk.sub_agent_type} {chunk.sub_agent_id} {outcome}"
        case OutputChunk():
            return json_text(chunk.output)
        case ErrorChunk():
            return quoted(chunk.error) + (" (recoverable)" if chunk.recoverable else "")
        case CustomChunk():
            return f"{chunk.name} {json_text(chunk.data)}"
        case StepRestarted():
            return (
                f"step {chunk.step} runs again: its {chunk.discard_deltas} text delta(s) "
                f"after #{chunk.discard_from} ({chunk.discard_chars} chars) are void"
            )
        case InputRequired():
            waits = ", ".join(
                f"{entry.kind} {entry.tool_name} ({entry.tool_call_id}) at {entry.owner_session_id}"
                for entry in chunk.pending
            )
            return f"waiting for: {waits or 'nothing'}"
        case _:
            assert_never(chunk)


def _message(message: Message) -> str:
    match message:
        case AssistantMessage():
            calls = ", ".join(f"{_call_name(call.name)} ({call.id})" for call in message.tool_calls)
            parts = ["assistant", quoted(message.content) if message.content else ""]
            return " ".join(part for part in [*parts, calls and f"calls {calls}"] if part)
        case ToolResultMessage():
            error = " error" if message.is_error else ""
            call = f"{_call_name(message.tool_name)} ({message.tool_call_id})"
            return f"tool {call}{error} {quoted(message.content)}"
        case SystemMessage() | UserMessage():
            return f"{tag_of_message(message)} {quoted(message.content)}"
        case _:
            assert_never(message)


def _call_name(name: str) -> str:
    """A call's name as a person reads it: an agent's ``__finish__`` call is its output."""
    return "output" if name == FINISH_TOOL_NAME else name


def tag_of_message(message: Message) -> str:
    """The wire ``role`` tag of a message (``user``, ``assistant`` ...)."""
    return str(type(message).__struct_config__.tag)


def summarize_event(event: Event) -> str:
    """A one-line summary of an event, without its seq, time or type tag."""
    match event:
        case SessionCreated():
            parent = f" parent={event.parent_session_id}" if event.parent_session_id else ""
            if event.workspace_session_id:
                parent += f" workspaces-of={event.workspace_session_id}"
            if event.owner is not None:
                parent += f" owner={principal_text(event.owner)}"
            run = f"agent={event.agent_type} run={event.run_id}{parent}"
            return f"{run} input={json_text(event.input)}"
        case RunStarted():
            extra = f" +{len(event.messages)} message(s)" if event.messages else ""
            if event.message_id:
                extra += f" id={event.message_id}"
            return f"{event.mode} run={event.run_id}{extra}"
        case StepStarted():
            taken = f" (+{event.taken} queued message(s))" if event.taken else ""
            return f"step {event.step}{taken}"
        case MessageQueued():
            texts = " ".join(quoted(message.content) for message in event.messages)
            ident = f" id={event.message_id}" if event.message_id else ""
            if event.multitask is not None:
                ident += f" multitask={event.multitask}"
            return f"queued {texts}{ident}"
        case InterruptRequested() | AbortRequested() | Interrupted() | Aborted():
            return _reason(event.reason)
        case Suspended():
            return f"waiting for {event.reason} {' '.join(event.tool_call_ids)}".rstrip()
        case Completed():
            return f"output={json_text(event.output)}"
        case Failed():
            return f"error={quoted(event.error)}" + (" (recoverable)" if event.recoverable else "")
        case HostClaimed():
            previous = f" (was {event.previous_host_id})" if event.previous_host_id else ""
            return f"host={event.host_id}{previous}"
        case MessageAppended():
            return _message(event.message)
        case StateUpdated():
            return f"state={json_text(event.state)}"
        case UsageRecorded():
            return _usage(event)
        case (
            TextDelta()
            | ReasoningDelta()
            | PartialOutput()
            | ToolStart()
            | ToolEnd()
            | SubAgentStart()
            | SubAgentEnd()
            | OutputChunk()
            | ErrorChunk()
            | CustomChunk()
            | InputRequired()
            | StepRestarted()
        ):
            return summarize_chunk(event)
        case SubSessionStarted():
            where = f" remote={event.remote.transport}" if event.remote else ""
            return (
                f"{event.sub_session_id} {event.agent_type} {event.mode} "
                f"({event.tool_call_id}){where}"
            )
        case SubSessionResumed():
            return event.sub_session_id
        case SubSessionSuspended():
            return f"{event.sub_session_id} waiting for {event.reason}"
        case ChildChunkForwarded():
            chunk = event.chunk
            return (
                f"{chunk.agent_id} {tag_of(chunk)} {summarize_chunk(chunk)} "
                f"[child seq {event.child_seq}]"
            )
        case SubSessionFinished():
            outcome = f"error={quoted(event.error)}" if event.error else json_text(event.output)
            return f"{event.sub_session_id} {event.status} {outcome}"
        case CompletionDelivered():
            return f"{event.sub_session_id} via {event.via}"
        case ClientToolPending() | ApprovalRequested():
            return f"{event.tool_name} ({event.tool_call_id}) args={json_text(event.arguments)}"
        case ClientToolResultSubmitted():
            outcome = f"error={quoted(event.error)}" if event.error else json_text(event.result)
            return f"({event.tool_call_id}) -> {outcome}"
        case ClientToolOwnershipRecorded():
            where = f" remote={event.remote.transport}" if event.remote else ""
            via = f" via {event.via_session_id}" if event.via_session_id else ""
            owner = event.owner_session_id
            return f"{event.kind} ({event.tool_call_id}) owned by {owner}{via}{where}"
        case ApprovalGiven():
            verdict = "approved" if event.approved else "expired" if event.expired else "denied"
            reason = f" {_reason(event.reason)}" if event.reason else ""
            by = f" by {quoted(event.decided_by)}" if event.decided_by else ""
            return f"({event.tool_call_id}) {verdict}{by}{reason}"
        case WorkspaceWritten():
            owner = f" (workspace of {event.owner_session_id})" if event.owner_session_id else ""
            return (
                f"{event.workspace}: {quoted(event.path)} {event.size} B "
                f"sha256={event.sha256[:12]}{owner}"
            )
        case WorkspaceDeleted():
            owner = f" (workspace of {event.owner_session_id})" if event.owner_session_id else ""
            return f"{event.workspace}: {quoted(event.path)}{owner}"
        case SessionForked():
            kinds = ",".join(str(edit.__struct_config__.tag) for edit in event.edits)
            edited = f" edits={kinds}" if kinds else ""
            return f"from {event.origin_session_id} at seq {event.origin_seq}{edited}"
        case RequestMade():
            ref = f" ({event.ref})" if event.ref else ""
            return f"{event.action}{ref} by {principal_text(event.by)}"
        case WebhookAttempted():
            return f"{event.delivery_id} attempt {event.attempt}"
        case WebhookDelivered():
            return f"{event.delivery_id} attempt {event.attempt} -> {event.status_code}"
        case WebhookFailed():
            final = " (final)" if event.final else ""
            return f"{event.delivery_id} attempt {event.attempt} -> {quoted(event.error)}{final}"
        case MemoryWritten():
            where = f"{quoted('/'.join(event.namespace))} {quoted(event.key)} v{event.version}"
            return (
                f"{where} deleted" if event.value is None else f"{where} {json_text(event.value)}"
            )
        case MemoryRead():
            asked = (
                quoted(event.key or "")
                if event.op == "get"
                else f"query={quoted(event.query or '')}"
            )
            where = quoted("/".join(event.namespace))
            return f"{event.op} {where} {asked} -> {len(event.items)} item(s)"
        case ScheduleFired():  # the schedules' log (helix_agents.schedules)
            return f"{event.schedule_id} tick {int(event.tick)} -> {event.run_session_id}"
        case ScheduleCreated() | SchedulePaused() | ScheduleResumed() | ScheduleDeleted():
            return event.schedule_id
        case RunSuperseded():
            return f"run={event.run_id} seqs {event.from_seq}..{event.to_seq} rolled back"
        case _:
            assert_never(event)


def principal_text(who: Principal) -> str:
    """``user@tenant`` (a part that is absent is left out)."""
    user, tenant = who.user or "", who.tenant
    return f"{user}@{tenant}" if tenant is not None else user or "?"


def _usage(event: UsageRecorded) -> str:
    if event.kind == "tokens":
        cached = f" cached={event.cached_input_tokens}" if event.cached_input_tokens else ""
        reasoning = f" reasoning={event.reasoning_tokens}" if event.reasoning_tokens else ""
        return f"tokens in={event.input_tokens} out={event.output_tokens}{cached}{reasoning}"
    if event.kind == "subagent":
        return f"subagent {event.sub_session_id or event.name or ''}".rstrip()
    if event.kind == "tool":
        return f"tool {event.name or ''}".rstrip()
    return f"{event.name or 'custom'}={event.value:g}"


def format_event(event: Event, *, tag_width: int = 21) -> str:
    """One timeline line: seq, UTC time, type tag (padded to ``tag_width``) and summary."""
    tag = tag_of(event).ljust(tag_width)
    return one_line(f"{event.seq:>5}  {format_time(event.ts)}  {tag}  {summarize_event(event)}")


class StreamPrinter:
    """Formats stream items, indenting each chunk by its agent's depth below the root.

    Depth is learned from the stream itself: a ``subagent_start`` chunk puts its
    ``sub_agent_id`` one level below the agent that emitted it, so forwarded
    grandchild chunks nest too.
    """

    def __init__(self, root_agent_id: str) -> None:
        self._depths = {root_agent_id: 0}

    def format(self, item: StreamItem) -> str | None:
        """One line for a stream item: indent, sequence, agent type, chunk type, summary.

        None for an agent's ``__finish__`` call: its ``output`` line shows it.
        """
        chunk = item.chunk
        if is_finish_call(chunk):
            return None
        depth = self._depths.get(chunk.agent_id, 1)
        if isinstance(chunk, SubAgentStart):
            self._depths.setdefault(chunk.sub_agent_id, depth + 1)
        indent = "    " * depth
        return one_line(
            f"  {indent}#{item.sequence:<4} {chunk.agent_type:<12} {tag_of(chunk):<14} "
            f"{summarize_chunk(chunk)}"
        )
