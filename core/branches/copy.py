"""A branch's log from its origin's: the prefix copied, ids mapped, edits applied.

Pure functions over events: :func:`branch_log` is what a fork writes for one
session of a tree. The copy is made in one pass over the prefix, each field
that names a session mapped to the branch's id (:func:`map_ids`), then each
edit rewrites the events it names.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ApprovalGiven,
    ApprovalRequested,
    ClientToolOwnershipRecorded,
    DecideApproval,
    Event,
    ForkEdit,
    MessageAppended,
    MessageQueued,
    ReplaceToolResult,
    ReplaceUserMessage,
    RunStarted,
    SessionCreated,
    SessionForked,
    ToolEnd,
)
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.runtime.tool_runner import ToolOutcome, encode_result

__all__ = ["FORKED_AT_KEY", "FORKED_FROM_KEY", "branch_log", "map_ids"]

FORKED_FROM_KEY = "forked_from"
"""The metadata key a branch's ``session_created`` carries: the origin session's id.

A session's forks are the sessions whose ``metadata.forked_from`` names it
(``GET /sessions?metadata.forked_from=S``); the origin's log is never written.
"""

FORKED_AT_KEY = "forked_at"
"""The metadata key with the origin's sequence the branch was forked at (decimal)."""

_ID_FIELDS = frozenset(
    {
        "session_id",
        "agent_id",
        "sub_agent_id",
        "parent_session_id",
        "root_session_id",
        "workspace_session_id",
        "sub_session_id",
        "child_session_id",
        "owner_session_id",
        "via_session_id",
    }
)
"""The fields of the catalog that name a session (a chunk's ``agent_id`` included)."""

_ID_LISTS = frozenset({"ancestors", "path"})
"""The fields that list sessions (a session's ancestors, a pending input's path)."""


def _mapped(value: Any, ids: Mapping[str, str]) -> Any:
    changes: dict[str, Any] = {}
    for name in value.__struct_fields__:
        field = getattr(value, name)
        if name in _ID_FIELDS:
            if isinstance(field, str) and field in ids:
                changes[name] = ids[field]
        elif name in _ID_LISTS:
            if any(item in ids for item in field):
                changes[name] = [ids.get(item, item) for item in field]
        elif name == "chunk":
            new = _mapped(field, ids)
            if new is not field:
                changes[name] = new
        elif name == "pending" and field:
            changes[name] = [_mapped(item, ids) for item in field]
    return msgspec.structs.replace(value, **changes) if changes else value


def map_ids(events: Sequence[Event], ids: Mapping[str, str]) -> list[Event]:
    """``events`` with each field that names a session of ``ids`` naming its branch instead.

    Only the fields that hold session ids change (envelopes, a chunk's agent,
    parents, ancestors, children, owners, paths): text that happens to equal
    an id, and an earlier fork's own marker, stay as recorded.
    """
    return [_mapped(event, ids) for event in events]


def branch_log(
    prefix: Sequence[Event],
    ids: Mapping[str, str],
    edits: Sequence[ForkEdit],
    marker: SessionForked,
) -> list[Event]:
    """The branch's log: ``prefix`` (the origin's events 1..N) mapped and edited, then the marker.

    ``ids`` maps the origin's session ids (this one, and the forked ones of
    its tree) to the branch's; ``edits`` are this session's. The result's
    ``session_forked`` is stamped at N + 1, now; tool results an edit gives
    for calls the prefix left unanswered follow it.

    Raises:
        AgentServerError: ``INVALID_REQUEST``, an edit that names nothing in
            the prefix, or asks what the prefix cannot give (the message says
            which edit and why).
    """
    if not prefix or type(prefix[0]) is not SessionCreated:
        raise AgentServerError(
            "INVALID_REQUEST", "a fork needs the origin's log from its session_created"
        )
    origin = prefix[0].session_id
    branch = ids.get(origin, origin)
    events = map_ids(prefix, ids)
    first = events[0]
    assert isinstance(first, SessionCreated)
    events[0] = msgspec.structs.replace(
        first,
        metadata={
            **first.metadata,
            FORKED_FROM_KEY: origin,
            FORKED_AT_KEY: str(marker.origin_seq),
        },
        webhook=msgspec.UNSET,  # the origin's caller asked for it, not the branch's
    )
    after: list[Event] = []
    for edit in edits:
        if isinstance(edit, ReplaceUserMessage):
            _replace_user_message(events, edit)
        elif isinstance(edit, ReplaceToolResult):
            after.extend(_replace_tool_result(events, edit, branch))
        elif isinstance(edit, DecideApproval):
            _check_approval(events, edit)
    seq, now = len(events), time.time()
    stamped: list[Event] = [msgspec.structs.replace(marker, session_id=branch, seq=seq + 1, ts=now)]
    for i, event in enumerate(after, start=seq + 2):
        stamped.append(msgspec.structs.replace(event, session_id=branch, seq=i, ts=now))
    return events + stamped


def _replace_user_message(events: list[Event], edit: ReplaceUserMessage) -> None:
    if not 1 <= edit.seq <= len(events):
        raise AgentServerError(
            "INVALID_REQUEST",
            f"user_message edit: seq {edit.seq} is not in the prefix (1..{len(events)})",
        )
    event = events[edit.seq - 1]
    new: Event
    if isinstance(event, SessionCreated | RunStarted | MessageQueued) and event.messages:
        new = msgspec.structs.replace(event, messages=[edit.message])
    elif isinstance(event, MessageAppended) and isinstance(event.message, UserMessage):
        new = msgspec.structs.replace(event, message=edit.message)
    else:
        raise AgentServerError(
            "INVALID_REQUEST",
            f"user_message edit: the event at seq {edit.seq} ({type(event).__name__}) "
            "carries no user message",
        )
    events[edit.seq - 1] = new


def _replace_tool_result(events: list[Event], edit: ReplaceToolResult, branch: str) -> list[Event]:
    outcome = ToolOutcome(result=edit.result, error=edit.error)
    found = False
    name: str | None = None
    for i, event in enumerate(events):
        if isinstance(event, MessageAppended):
            message = event.message
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    if call.id == edit.tool_call_id:
                        name = call.name
            elif (
                isinstance(message, ToolResultMessage) and message.tool_call_id == edit.tool_call_id
            ):
                found = True
                events[i] = msgspec.structs.replace(
                    event,
                    message=msgspec.structs.replace(
                        message, content=encode_result(outcome), is_error=edit.error is not None
                    ),
                )
        elif isinstance(event, ToolEnd) and event.tool_call_id == edit.tool_call_id:
            events[i] = msgspec.structs.replace(event, result=edit.result, error=edit.error)
    if found:
        return []
    if name is None:
        raise AgentServerError(
            "INVALID_REQUEST",
            f"tool_result edit: no call {edit.tool_call_id!r} in the prefix to give a result to",
        )
    # A call the prefix left unanswered (the fork is between the call and its
    # result): the edit answers it, so the branch never runs it.
    first = events[0]
    assert isinstance(first, SessionCreated)
    return [
        MessageAppended(
            message=ToolResultMessage(
                tool_call_id=edit.tool_call_id,
                tool_name=name,
                content=encode_result(outcome),
                is_error=edit.error is not None,
            )
        ),
        ToolEnd(
            agent_id=branch,
            agent_type=first.agent_type,
            tool_call_id=edit.tool_call_id,
            tool_name=name,
            result=edit.result,
            error=edit.error,
        ),
    ]


def _check_approval(events: list[Event], edit: DecideApproval) -> None:
    asked = given = None
    for event in events:
        if isinstance(event, ApprovalRequested | ClientToolOwnershipRecorded):
            if event.tool_call_id == edit.tool_call_id:
                asked = event.seq
        elif isinstance(event, ApprovalGiven) and event.tool_call_id == edit.tool_call_id:
            given = event.seq
    if asked is None:
        raise AgentServerError(
            "INVALID_REQUEST", f"approval edit: no approval of {edit.tool_call_id!r} in the prefix"
        )
    if given is not None:
        raise AgentServerError(
            "INVALID_REQUEST",
            f"approval edit: {edit.tool_call_id!r} was decided at seq {given}; fork before it "
            f"(at {given - 1}) to decide it again",
        )
