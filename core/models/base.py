"""The ``LLMAdapter`` seam: how the run loop talks to a language model.

An adapter turns an :class:`LLMRequest` (system prompt, conversation, tool
specs) into a stream of pieces (:class:`LLMTextDelta` for the answer's text,
:class:`LLMReasoningDelta` for reasoning shown as it is thought,
:class:`LLMToolCallDelta` for a tool call's arguments as they are written)
ended by exactly one :class:`LLMResponse` (the whole assistant turn: text,
tool calls, kept reasoning, usage). Pieces are optional: an adapter that
streams none still ends with the whole response.
Structured output is a tool call to ``__finish__`` whose parameters are the
agent's output schema, so adapters need no special case for it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, Protocol

import msgspec

from helix_agents.errors import HelixError
from helix_agents.messages import (
    FINISH_TOOL_NAME as FINISH_TOOL_NAME,
    Message,
    ReasoningPart,
    ToolCall,
)

__all__ = [
    "FINISH_TOOL_NAME",
    "LLMAdapter",
    "LLMError",
    "LLMErrorKind",
    "LLMReasoningDelta",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamEvent",
    "LLMTextDelta",
    "LLMToolCallDelta",
    "TokenUsage",
    "ToolSpec",
]


class ToolSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A tool as the LLM sees it: name, description, JSON Schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = {}


class LLMRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One call to the model: the conversation so far and the tools it may call."""

    messages: list[Message]
    system_prompt: str | None = None
    tools: list[ToolSpec] = []
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    agent_type: str | None = None
    session_id: str | None = None


class TokenUsage(msgspec.Struct, frozen=True, kw_only=True):
    """Tokens one model call used.

    ``input_tokens`` counts every input token, the cached ones included;
    ``cached_input_tokens`` is how many of them were read from the provider's
    prompt cache (priced lower). ``output_tokens`` counts every output token,
    the reasoning ones included; ``reasoning_tokens`` is how many of them
    were reasoning (thinking).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    reasoning_tokens: int = 0


class LLMTextDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of streamed assistant text."""

    text: str


class LLMReasoningDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of the model's reasoning (thinking) as it streams: never part of the answer."""

    text: str


class LLMToolCallDelta(msgspec.Struct, frozen=True, kw_only=True):
    """A piece of a tool call's JSON arguments as the model writes them.

    ``index`` is the call's position in the turn; ``id`` and ``name`` are set
    once known (the first piece of a call usually carries them). The
    concatenated ``arguments`` pieces of a call are its arguments' JSON text.
    """

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


class LLMResponse(msgspec.Struct, frozen=True, kw_only=True):
    """The model's whole turn; always the last item of a stream."""

    content: str = ""
    tool_calls: list[ToolCall] = []
    usage: TokenUsage | None = None
    finish_reason: str | None = None
    model: str | None = None
    reasoning: list[ReasoningPart] = []
    """The turn's reasoning to keep in the conversation (the provider needs it back)."""


LLMStreamEvent = LLMTextDelta | LLMReasoningDelta | LLMToolCallDelta | LLMResponse
"""What an adapter's stream yields: pieces (text, reasoning, tool-call arguments), then one
response."""

LLMErrorKind = Literal[
    "auth",
    "rate_limit",
    "overloaded",
    "server",
    "connection",
    "timeout",
    "context_length",
    "refused",
    "bad_request",
    "not_found",
    "bad_reply",
]
"""What kind of failure an :class:`LLMError` is (specs/llm.md "Errors"): ``rate_limit``,
``overloaded``, ``server``, ``connection`` and ``timeout`` may pass with a retry."""


class LLMError(HelixError):
    """The model call failed; ``retryable`` says whether trying again may help.

    ``status`` is the HTTP status, if any. When the adapter knows them, ``model``
    and ``endpoint`` say which model was called where, and ``hint`` says what
    to check (``"check the API key in OPENAI_API_KEY"``). It prints as one line:
    ``LLM call failed (HTTP 401) for model 'gpt-4o-mini' at URL: MESSAGE; HINT``.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool = False,
        status: int | None = None,
        model: str | None = None,
        endpoint: str | None = None,
        hint: str | None = None,
        kind: LLMErrorKind | None = None,
        retry_after: float | None = None,
    ):
        self.message = message
        self.retryable = retryable
        self.status = status
        self.model = model
        self.endpoint = endpoint
        self.hint = hint
        self.kind = kind
        """What kind of failure it is, when the adapter knows (``rate_limit``...)."""
        self.retry_after = retry_after
        """Seconds the provider asked to wait before trying again (``Retry-After``)."""
        super().__init__(message)

    def __str__(self) -> str:
        code = f" (HTTP {self.status})" if self.status is not None else ""
        where = f" for model {self.model!r}" if self.model is not None else ""
        where += f" at {self.endpoint}" if self.endpoint is not None else ""
        hint = f"; {self.hint}" if self.hint else ""
        return f"LLM call failed{code}{where}: {self.message}{hint}"


class LLMAdapter(Protocol):
    """A language model the run loop can call."""

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        """Yield the pieces as they arrive, then exactly one :class:`LLMResponse`.

        Raises :class:`LLMError` when the call fails for good (after any
        retries the adapter does itself). Cancellation must close the
        underlying connection.
        """
        ...
