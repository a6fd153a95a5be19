"""``ReplayLLM``: answers from recorded session logs, to re-run sessions offline.

The k-th model call of a session gets the k-th assistant turn recorded for
that session (same text, same tool call ids, same token usage), so a re-run
with the same session ids makes the same decisions, and its children get the
same ids (``{parent}-sub-{tool call id}``) and replay their own recordings.
Where the re-run's conversation differs from the recording (a changed tool
returned something else), the difference is noted in :attr:`divergences`;
the recorded answer is still given, so the re-run can be compared end to end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence

import msgspec

from helix_agents.events import (
    Event,
    MessageAppended,
    RunStarted,
    SessionCreated,
    SubSessionStarted,
    UsageRecorded,
)
from helix_agents.log.store import EventStore
from helix_agents.messages import AssistantMessage, Message
from helix_agents.models.base import (
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    TokenUsage,
)

__all__ = ["Divergence", "ReplayLLM"]


class Divergence(msgspec.Struct, frozen=True, kw_only=True):
    """The re-run's conversation differs from the recording at this point."""

    session_id: str
    turn: int
    index: int
    recorded: str
    actual: str


class _Recording(msgspec.Struct, kw_only=True):
    turns: list[LLMResponse]
    conversation: list[Message]


def _summary(message: Message | None) -> str:
    if message is None:
        return "(nothing)"
    return msgspec.json.encode(message).decode()[:300]


def _record(events: Sequence[Event]) -> _Recording:
    turns: list[LLMResponse] = []
    conversation: list[Message] = []
    for event in events:
        if isinstance(event, SessionCreated):
            conversation.extend(event.messages)
        elif isinstance(event, RunStarted):
            conversation.extend(event.messages)  # a follow-up turn's or a resume's input
        elif isinstance(event, MessageAppended):
            conversation.append(event.message)
            if isinstance(event.message, AssistantMessage):
                turns.append(
                    LLMResponse(
                        content=event.message.content,
                        tool_calls=list(event.message.tool_calls),
                        model="replay",
                        reasoning=list(event.message.reasoning or []),
                    )
                )
        elif isinstance(event, UsageRecorded) and event.kind == "tokens" and turns:
            turns[-1] = msgspec.structs.replace(
                turns[-1],
                usage=TokenUsage(
                    input_tokens=event.input_tokens,
                    output_tokens=event.output_tokens,
                    cached_input_tokens=event.cached_input_tokens,
                    reasoning_tokens=event.reasoning_tokens,
                ),
            )
    return _Recording(turns=turns, conversation=conversation)


class ReplayLLM:
    """An :class:`~helix_agents.LLMAdapter` that replays recorded assistant turns.

    Args:
        logs: each recorded session's log, by session id.
    """

    def __init__(self, logs: dict[str, Sequence[Event]]) -> None:
        self._recordings = {session_id: _record(log) for session_id, log in logs.items()}
        self.divergences: list[Divergence] = []
        """Where re-run conversations left their recordings, in the order noticed."""

    def __repr__(self) -> str:
        sessions = len(self._recordings)
        return f"<ReplayLLM {sessions} recorded sessions, {len(self.divergences)} divergences>"

    @classmethod
    async def from_store(cls, store: EventStore, session_id: str) -> ReplayLLM:
        """Load the recordings of ``session_id`` and, recursively, of its local children."""
        logs: dict[str, Sequence[Event]] = {}
        queue = [session_id]
        while queue:
            current = queue.pop()
            if current in logs:
                continue
            log = await store.read(current)
            if not log:
                continue
            logs[current] = log
            queue.extend(_children(log))
        return cls(logs)

    @property
    def session_ids(self) -> list[str]:
        """The recorded sessions, sorted."""
        return sorted(self._recordings)

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Replay the recorded turn for this point of the session's conversation."""
        session_id = request.session_id or ""
        recording = self._recordings.get(session_id)
        if recording is None:
            raise LLMError(f"no recording for session {session_id!r}")
        turn = sum(1 for message in request.messages if isinstance(message, AssistantMessage))
        if turn >= len(recording.turns):
            raise LLMError(
                f"the recording of {session_id!r} has {len(recording.turns)} turns, "
                f"not a turn {turn + 1}"
            )
        self._compare(session_id, turn, recording, request.messages)
        response = recording.turns[turn]
        thought = "".join(part.text for part in response.reasoning)
        if thought:
            yield LLMReasoningDelta(text=thought)
        if response.content:
            yield LLMTextDelta(text=response.content)
        yield response

    def _compare(
        self, session_id: str, turn: int, recording: _Recording, messages: Sequence[Message]
    ) -> None:
        recorded = recording.conversation
        for index, actual in enumerate(messages):
            expected = recorded[index] if index < len(recorded) else None
            if expected != actual:
                if any(
                    seen.session_id == session_id and seen.index == index
                    for seen in self.divergences
                ):
                    return  # already noted at an earlier turn
                self.divergences.append(
                    Divergence(
                        session_id=session_id,
                        turn=turn,
                        index=index,
                        recorded=_summary(expected),
                        actual=_summary(actual),
                    )
                )
                return


def _children(log: Iterable[Event]) -> list[str]:
    return [
        event.sub_session_id
        for event in log
        if isinstance(event, SubSessionStarted) and event.remote is None
    ]
