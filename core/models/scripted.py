"""``ScriptedLLM``: a deterministic model for tests, examples and demos.

A list script is indexed by the number of assistant messages already in the
conversation, not consumed globally: the k-th model call of a session gets
response k. So many sessions can share one adapter, and a session resumed
after a crash gets the same answers again (replay-safe).
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
import msgspec

from helix_agents.messages import AssistantMessage, ReasoningPart, ToolCall
from helix_agents.models.base import (
    FINISH_TOOL_NAME,
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
    TokenUsage,
)

__all__ = ["ScriptStep", "ScriptedLLM"]


class ScriptStep(msgspec.Struct, frozen=True, kw_only=True):
    """One scripted model turn: text, tool calls, or an error; optionally slow.

    ``reasoning``: what the model thinks first, streamed as reasoning pieces
    and kept with the turn. ``stream_arguments``: stream each tool call's
    arguments JSON in that many pieces (0: none, the calls come whole).
    """

    text: str = ""
    tool_calls: list[ToolCall] = []
    error: str | None = None
    retryable: bool = False
    delay: float = 0.0
    usage: TokenUsage | None = None
    reasoning: str = ""
    stream_arguments: int = 0


ScriptItem = ScriptStep | str | ToolCall | list[ToolCall]
Script = Sequence[ScriptItem] | Callable[[LLMRequest], ScriptItem | Awaitable[ScriptItem]]


def _as_step(item: ScriptItem) -> ScriptStep:
    if isinstance(item, ScriptStep):
        return item
    if isinstance(item, str):
        return ScriptStep(text=item)
    if isinstance(item, ToolCall):
        return ScriptStep(tool_calls=[item])
    return ScriptStep(tool_calls=list(item))


class ScriptedLLM:
    """An :class:`~helix_agents.LLMAdapter` that plays a script.

    Args:
        script: a list of turns (each a :class:`ScriptStep`, a string, a
            :class:`ToolCall` or a list of them), or a function of the
            :class:`LLMRequest` returning one (sync or async).
        chunk_words: how many words each streamed text delta carries.
        delta_delay: seconds to wait between deltas (to watch streaming live).
    """

    def __init__(self, script: Script, *, chunk_words: int = 3, delta_delay: float = 0.0):
        self._script = script
        self._chunk_words = max(1, chunk_words)
        self._delta_delay = delta_delay
        self.calls = 0
        """How many model calls this adapter has answered (for tests)."""

    def __repr__(self) -> str:
        script = self._script
        what = (
            f"{len(script)} turns"
            if isinstance(script, Sequence)
            else f"turns from {getattr(script, '__qualname__', type(script).__name__)}()"
        )
        return f"<ScriptedLLM {what}, {self.calls} calls answered>"

    @staticmethod
    def reply(text: str, *, delay: float = 0.0, reasoning: str = "") -> ScriptStep:
        """A turn that answers with ``text`` (after thinking ``reasoning``) and calls no tool."""
        return ScriptStep(text=text, delay=delay, reasoning=reasoning)

    @staticmethod
    def call(name: str, arguments: Any = None, *, id: str | None = None) -> ToolCall:
        """A tool call for :func:`ScriptStep` (``id`` defaults to a deterministic one)."""
        return ToolCall(id=id or "", name=name, arguments={} if arguments is None else arguments)

    @staticmethod
    def finish(
        output: Any,
        *,
        text: str = "",
        id: str | None = None,
        reasoning: str = "",
        stream_arguments: int = 0,
    ) -> ScriptStep:
        """A turn that finishes with structured ``output`` (a ``__finish__`` call).

        ``stream_arguments``: write the output's JSON in that many pieces, as a
        model streams a call's arguments (each piece a partial output on the stream).
        """
        return ScriptStep(
            text=text,
            tool_calls=[ScriptedLLM.call(FINISH_TOOL_NAME, output, id=id)],
            reasoning=reasoning,
            stream_arguments=stream_arguments,
        )

    @staticmethod
    def fail(message: str, *, retryable: bool = False) -> ScriptStep:
        """A turn where the model call itself fails with :class:`LLMError`."""
        return ScriptStep(error=message, retryable=retryable)

    async def _next(self, request: LLMRequest) -> tuple[int, ScriptStep]:
        turn = sum(1 for message in request.messages if isinstance(message, AssistantMessage))
        script = self._script
        if callable(script):
            produced = script(request)
            if inspect.isawaitable(produced):
                produced = await produced
            return turn, _as_step(produced)
        if turn >= len(script):
            raise LLMError(f"script exhausted: no response {turn + 1} (it has {len(script)})")
        return turn, _as_step(script[turn])

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Stream the scripted turn for this point of the conversation."""
        self.calls += 1
        turn, step = await self._next(request)
        if step.delay:
            await anyio.sleep(step.delay)
        if step.error is not None:
            raise LLMError(step.error, retryable=step.retryable)
        for piece in self._pieces(step.reasoning):
            if self._delta_delay:
                await anyio.sleep(self._delta_delay)
            yield LLMReasoningDelta(text=piece)
        for piece in self._pieces(step.text):
            if self._delta_delay:
                await anyio.sleep(self._delta_delay)
            yield LLMTextDelta(text=piece)
        calls = [
            tool_call if tool_call.id else msgspec.structs.replace(tool_call, id=f"call_{turn}_{i}")
            for i, tool_call in enumerate(step.tool_calls)
        ]
        for index, tool_call in enumerate(calls if step.stream_arguments > 0 else []):
            text = msgspec.json.encode(tool_call.arguments).decode()
            size = -(-len(text) // step.stream_arguments)  # ceiling: at most that many pieces
            for start in range(0, len(text), max(size, 1)):
                if self._delta_delay:
                    await anyio.sleep(self._delta_delay)
                first = start == 0
                yield LLMToolCallDelta(
                    index=index,
                    arguments=text[start : start + size],
                    id=tool_call.id if first else None,
                    name=tool_call.name if first else None,
                )
        prompt = sum(len(_text_of(message)) for message in request.messages) // 4 + 1
        words = len(step.text.split(" ")) if step.text else 0
        thought = len(step.reasoning.split(" ")) if step.reasoning else 0
        usage = step.usage or TokenUsage(
            input_tokens=prompt, output_tokens=max(words, 1) + thought, reasoning_tokens=thought
        )
        kept = [ReasoningPart(text=step.reasoning, provider="scripted")] if step.reasoning else []
        yield LLMResponse(
            content=step.text,
            tool_calls=calls,
            usage=usage,
            finish_reason="stop",
            model="scripted",
            reasoning=kept,
        )

    def _pieces(self, text: str) -> list[str]:
        """``text`` in pieces of ``chunk_words`` words (each but the last ends with a space)."""
        words = text.split(" ")
        pieces = []
        for start in range(0, len(words) if text else 0, self._chunk_words):
            piece = " ".join(words[start : start + self._chunk_words])
            if start + self._chunk_words < len(words):
                piece += " "
            pieces.append(piece)
        return pieces


def _text_of(message: Any) -> str:
    content = getattr(message, "content", "")
    return content if isinstance(content, str) else ""


reply = ScriptedLLM.reply
call = ScriptedLLM.call
finish = ScriptedLLM.finish
fail = ScriptedLLM.fail
