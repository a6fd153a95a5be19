"""What a test answers a person's entry with: an approval, a denial, a client tool's result."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from helix_agents.events import PendingInput
from helix_agents.runtime.handle import AgentHandle

__all__ = ["Answer", "Answers", "answer_for", "approve", "deny", "give", "tool_result"]


@dataclass(frozen=True)
class Answer:
    """An answer to a pending input: ``approve``/``deny`` an approval, or a client tool's result."""

    kind: Literal["approve", "deny", "result"]
    reason: str | None = None
    value: Any = None
    error: str | None = None
    decided_by: str | None = None


def approve(reason: str | None = None, *, decided_by: str | None = None) -> Answer:
    """Approve the gated call (``decided_by``: who, as the log records it)."""
    return Answer("approve", reason=reason, decided_by=decided_by)


def deny(reason: str | None = None, *, decided_by: str | None = None) -> Answer:
    """Deny the gated call: the model is told ``denied by a person: <reason>``."""
    return Answer("deny", reason=reason, decided_by=decided_by)


def tool_result(value: Any = None, *, error: str | None = None) -> Answer:
    """A client tool's result (or its ``error``), as a browser would submit it."""
    return Answer("result", value=value, error=error)


Answers = Mapping[str, Answer | Callable[[PendingInput], Answer]]
"""Answers keyed by call id or tool name; a callable gets the entry and returns the answer."""


def answer_for(answers: Answers, entry: PendingInput) -> Answer | None:
    """The answer ``answers`` holds for ``entry`` (its call id first, then its tool name)."""
    given = answers.get(entry.tool_call_id)
    if given is None:
        given = answers.get(entry.tool_name)
    if given is None:
        return None
    answer = given(entry) if callable(given) else given
    if entry.kind == "approval" and answer.kind == "result":
        raise AssertionError(
            f"{entry.tool_name!r} ({entry.tool_call_id}) waits for an approval: "
            "answer it with approve() or deny(), not tool_result()"
        )
    if entry.kind == "client_tool" and answer.kind != "result":
        raise AssertionError(
            f"{entry.tool_name!r} ({entry.tool_call_id}) is a client tool: "
            "answer it with tool_result(...), not approve() or deny()"
        )
    return answer


async def give(handle: AgentHandle[Any], entry: PendingInput, answer: Answer) -> None:
    """Submit ``answer`` to ``entry`` at the root of ``handle``'s tree."""
    if answer.kind == "approve":
        await handle.approve(entry.tool_call_id, answer.reason, decided_by=answer.decided_by)
    elif answer.kind == "deny":
        await handle.deny(entry.tool_call_id, answer.reason, decided_by=answer.decided_by)
    else:
        await handle.submit_tool_result(entry.tool_call_id, answer.value, answer.error)
