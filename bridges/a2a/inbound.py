"""What an incoming A2A message asks of a session: checked before anything changes.

:func:`read_message` reads a message's parts (text and data; a part of an
unknown kind, a file part, or an empty message is refused with A2A's own
error). :func:`answers_of` reads a message sent to a session that waits for
people as answers to its pending inputs (specs/a2a.md, "Answering"): a data
part ``{"toolCallId", "result" | "error"}`` answers a client tool, ``{"toolCallId",
"approved", "reason"?, "decidedBy"?}`` an approval; with a single pending input the
``toolCallId`` may be left out, and a text answers it too (a client tool's
result; ``yes``/``no`` for an approval).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from a2a.types import Message, Role
from a2a.utils.errors import ContentTypeNotSupportedError, InvalidParamsError

from helix_agents import PendingInput
from helix_agents.errors import AgentServerError
from helix_agents.protocol import checked_decided_by

from .wire import part_value

__all__ = ["Answer", "Incoming", "answers_of", "read_message"]

_YES = frozenset({"yes", "y", "approve", "approved", "ok", "true", "allow"})
_NO = frozenset({"no", "n", "deny", "denied", "reject", "rejected", "false"})
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True)
class Incoming:
    """A user message's content: its text parts and its data parts, in order."""

    texts: list[str]
    data: list[Any]

    def text(self) -> str:
        """The message as text for the model: its texts, then its data as compact JSON."""
        return "\n".join([*self.texts, *(_encoder.encode(value).decode() for value in self.data)])

    def start_input(self) -> Any:
        """The structured input of a first message: its data part (a list of them if several)."""
        if not self.data:
            return None
        return self.data[0] if len(self.data) == 1 else list(self.data)


@dataclass(frozen=True)
class Answer:
    """One answer to a pending input, read from a message."""

    kind: Literal["client_tool", "approval"]
    tool_call_id: str
    result: Any = None
    error: str | None = None
    approved: bool = False
    reason: str | None = None
    decided_by: str | None = None


def read_message(message: Message) -> Incoming:
    """The content of a user message, or A2A's error for what this bridge cannot take.

    Raises:
        InvalidParamsError: not a user message, a part with no content (an
            unknown part kind), or no content at all.
        ContentTypeNotSupportedError: a file part (raw bytes or a URL).
    """
    if message.role == Role.ROLE_AGENT:
        raise InvalidParamsError("a message to an agent must have the user role")
    texts: list[str] = []
    data: list[Any] = []
    for index, part in enumerate(message.parts):
        kind = part.WhichOneof("content")
        if kind == "text":
            texts.append(part.text)
        elif kind == "data":
            data.append(part_value(part))
        elif kind in ("raw", "url"):
            raise ContentTypeNotSupportedError(
                f"part {index} is a file ({kind}); this agent takes text and data parts"
            )
        else:
            raise InvalidParamsError(
                f"part {index} has no content: an unknown part kind (text, data are taken)"
            )
    if not data and not any(text.strip() for text in texts):
        raise InvalidParamsError("the message has no content")
    return Incoming(texts=texts, data=data)


def answers_of(content: Incoming, pending: list[PendingInput]) -> list[Answer]:
    """The answers ``content`` gives to ``pending`` (the session's open inputs).

    Raises:
        InvalidParamsError: the message answers nothing, names no input where
            several are open, or an answer is ill-formed (what is missing is named).
    """
    answers = [_from_data(value, pending) for value in content.data]
    texts = [text for text in content.texts if text.strip()]
    if texts and not answers:
        answers.append(_from_text(" ".join(texts).strip(), pending))
    if not answers:
        raise InvalidParamsError("the message answers none of the pending inputs")
    return answers


def _only(pending: list[PendingInput]) -> PendingInput:
    if len(pending) != 1:
        listed = ", ".join(e.tool_call_id for e in pending) or "none"
        raise InvalidParamsError(
            f"name the input you answer with a data part {{'toolCallId': ...}} (open: {listed})"
        )
    return pending[0]


def _from_text(text: str, pending: list[PendingInput]) -> Answer:
    entry = _only(pending)
    if entry.kind == "client_tool":
        return Answer(kind="client_tool", tool_call_id=entry.tool_call_id, result=text)
    word = text.lower().rstrip(".!")
    if word in _YES or word in _NO:
        return Answer(kind="approval", tool_call_id=entry.tool_call_id, approved=word in _YES)
    raise InvalidParamsError(
        f"answer the approval of {entry.tool_name} with yes or no, or a data part "
        "{'approved': true|false, 'reason': ...}"
    )


def _from_data(value: Any, pending: list[PendingInput]) -> Answer:
    if not isinstance(value, dict):
        raise InvalidParamsError("an answer's data part must be an object")
    call_id = value.get("toolCallId")
    if call_id is None:
        entry = _only(pending)
        call_id, kind = entry.tool_call_id, entry.kind
    elif not isinstance(call_id, str) or not call_id:
        raise InvalidParamsError("toolCallId must be a non-empty string")
    else:
        known = next((e for e in pending if e.tool_call_id == call_id), None)
        # An input no longer open may be a retried answer: the session decides.
        kind = (
            known.kind
            if known is not None
            else ("approval" if "approved" in value else "client_tool")
        )
    if kind == "approval":
        approved = value.get("approved")
        reason = value.get("reason")
        if not isinstance(approved, bool):
            raise InvalidParamsError(f"the approval of {call_id!r} needs 'approved': true or false")
        if reason is not None and not isinstance(reason, str):
            raise InvalidParamsError("'reason' must be a string")
        try:
            decided_by = checked_decided_by(value.get("decidedBy"))
        except AgentServerError as exc:
            raise InvalidParamsError(exc.message) from exc
        return Answer(
            kind="approval",
            tool_call_id=call_id,
            approved=approved,
            reason=reason,
            decided_by=decided_by,
        )
    error = value.get("error")
    if error is not None and not isinstance(error, str):
        raise InvalidParamsError("'error' must be a string")
    if "result" not in value and error is None:
        raise InvalidParamsError(f"the answer to {call_id!r} needs 'result' (or 'error')")
    return Answer(kind="client_tool", tool_call_id=call_id, result=value.get("result"), error=error)
