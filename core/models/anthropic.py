"""An ``LLMAdapter`` on Anthropic's Messages API, on Anthropic's SDK (the ``anthropic`` extra).

:class:`AnthropicLLM` streams ``POST /v1/messages`` through ``AsyncAnthropic``
(its own retries off: the shared retry layer retries by an ``LLMError``'s
``kind`` and ``retry_after``): text deltas, thinking as reasoning deltas (kept
with its signature and sent back, as Anthropic requires for tool use with
thinking), tool calls with their arguments as they are written, and the usage
with the prompt-cache reads. Failures are one ``LLMError`` line each
(``native_errors.py``). specs/llm.md has the mapping tables.
"""

from __future__ import annotations

import os
from collections.abc import AsyncGenerator, Mapping
from typing import Any, Self, assert_never

import anthropic
import msgspec
from anthropic.types import (
    InputJSONDelta,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    RawMessageStopEvent,
    RedactedThinkingBlock,
    SignatureDelta,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolUseBlock,
)

from helix_agents.errors import UsageError
from helix_agents.messages import (
    AssistantMessage,
    Message,
    ReasoningPart,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.base import (
    LLMError,
    LLMReasoningDelta,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    LLMToolCallDelta,
    TokenUsage,
)
from helix_agents.models.native_errors import Where, anthropic_error

__all__ = ["ANTHROPIC_URL", "API_KEY_ENV", "BASE_URL_ENV", "DEFAULT_MAX_TOKENS", "AnthropicLLM"]

API_KEY_ENV = "ANTHROPIC_API_KEY"
"""The environment variable the API key is read from when none is given."""
BASE_URL_ENV = "ANTHROPIC_BASE_URL"
"""The environment variable the API root is read from when none is given."""
ANTHROPIC_URL = "https://api.anthropic.com"
"""The API root when neither ``base_url`` nor ``ANTHROPIC_BASE_URL`` is given."""

PROVIDER = "anthropic"
# the ReasoningPart.provider of the reasoning this adapter keeps (and sends back)
DEFAULT_MAX_TOKENS = 8192
"""The output limit sent when neither request nor adapter names one (Anthropic requires one)."""
MIN_THINKING_BUDGET = 1024
"""Anthropic's smallest thinking budget."""

_EPHEMERAL = {"type": "ephemeral"}
_USAGE = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
_FINISH = dict.fromkeys(("end_turn", "stop_sequence", "pause_turn"), "stop") | {
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
}
"""Anthropic's ``stop_reason`` -> our ``finish_reason`` (OpenAI's words); others pass as is."""


class AnthropicLLM:
    """A Claude model on Anthropic's Messages API, streamed through the official SDK.

    One SDK client (one connection pool) per adapter, reused by every call;
    use the adapter as an async context manager, or call :meth:`aclose`, to close it.

    Args:
        model: The model sent when a request names none (``"claude-sonnet-4-5"``).
        api_key: The key; defaults to ``ANTHROPIC_API_KEY`` (else the SDK's
            other credentials: ``ANTHROPIC_AUTH_TOKEN``, a profile).
        base_url: The API root (``/v1/messages`` is appended); defaults to
            ``ANTHROPIC_BASE_URL``, else Anthropic's.
        max_tokens: The output limit when a request names none (Anthropic requires one).
        thinking_budget: Turn extended thinking on with this many tokens for it
            (at least 1024, below the output limit); ``None`` leaves it off.
        cache: Mark cache breakpoints (``cache_control``) on the tools, the
            system prompt and the conversation's last block: an agent resends
            them every step, so each step reads what the steps before wrote
            (a cache read is billed at a tenth of the input price, a write at
            1.25 times it). A prefix under the model's minimum is not cached,
            at no cost.
        timeout: Seconds for the whole call (the SDK's default when ``None``).
        headers: Extra headers sent with every request.

    Raises:
        UsageError: a ``base_url`` that is not an http(s) URL, a ``max_tokens``
            under 1, or a ``thinking_budget`` under 1024 or not below ``max_tokens``.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        thinking_budget: int | None = None,
        cache: bool = True,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if max_tokens < 1:
            raise UsageError(f"max_tokens must be >= 1, not {max_tokens}")
        if thinking_budget is not None and not (
            MIN_THINKING_BUDGET <= thinking_budget < max_tokens
        ):
            raise UsageError(
                f"thinking_budget must be >= {MIN_THINKING_BUDGET} and below max_tokens "
                f"({max_tokens}), not {thinking_budget}"
            )
        url_from: str | None = "base_url" if base_url is not None else None
        if base_url is None and os.environ.get(BASE_URL_ENV):
            base_url, url_from = os.environ[BASE_URL_ENV], BASE_URL_ENV
        root = (base_url or ANTHROPIC_URL).rstrip("/")
        if not root.startswith(("http://", "https://")) or root.endswith("://"):
            raise UsageError(f"{url_from or 'base_url'} must be an http(s) URL, not {base_url!r}")
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV) or None
        key_from = ("api_key" if api_key is not None else API_KEY_ENV) if key else None
        self.model = model
        self._where = Where(
            provider="Anthropic",
            endpoint=f"{root}/v1/messages",
            root=root,
            key_envs=(API_KEY_ENV,),
            url_from=url_from,
            key_from=key_from,
        )
        self._max_tokens = max_tokens
        self._thinking_budget = thinking_budget
        self._cache = cache
        options: dict[str, Any] = {"base_url": root, "max_retries": 0}  # the shared layer retries
        if key is not None:
            options["api_key"] = key
        if timeout is not None:
            options["timeout"] = timeout
        if headers:
            options["default_headers"] = dict(headers)
        self._client = anthropic.AsyncAnthropic(**options)

    def __repr__(self) -> str:
        # never the key
        return f"<AnthropicLLM model={self.model!r} endpoint={self._where.endpoint!r}>"

    async def aclose(self) -> None:
        """Close the SDK client (its connections); idempotent."""
        await self._client.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """Call the model: yield text, reasoning and tool-argument pieces, then one response.

        Raises:
            LLMError: the call failed, the stream broke off or held an error
                event, or the model refused (``kind`` says which; ``model``,
                ``endpoint`` and ``hint`` are set). Not retried here.
        """
        return self._stream(request)

    async def _stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        model = request.model or self.model
        turn = _Turn(model)
        try:
            events = await self._client.messages.create(**self.params(request), stream=True)
            async with events:
                async for event in events:
                    for piece in turn.feed(event):
                        yield piece
            yield turn.response()
        except LLMError as exc:
            exc.model, exc.endpoint = exc.model or model, exc.endpoint or self._where.endpoint
            raise
        except Exception as exc:
            failure = anthropic_error(exc, self._where, model, started=turn.started)
            if failure is None:
                raise
            raise failure from exc

    def params(self, request: LLMRequest) -> dict[str, Any]:
        """The Messages API parameters for ``request`` (what is sent, ``stream`` aside)."""
        system, messages = _conversation(request)
        params: dict[str, Any] = {
            "model": request.model or self.model,
            "max_tokens": request.max_tokens or self._max_tokens,
            "messages": messages,
        }
        if system:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": text} for text in system]
            if self._cache:
                blocks[-1]["cache_control"] = _EPHEMERAL
            params["system"] = blocks
        if request.tools:
            tools: list[dict[str, Any]] = [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "input_schema": tool.parameters or {"type": "object", "properties": {}},
                }
                for tool in request.tools
            ]
            if self._cache:
                tools[-1]["cache_control"] = _EPHEMERAL
            params["tools"] = tools
        if self._thinking_budget is not None:
            params["thinking"] = {"type": "enabled", "budget_tokens": self._thinking_budget}
        if self._cache and messages:
            last = messages[-1]["content"][-1]
            if last["type"] in ("text", "tool_result", "tool_use"):  # never a thinking block
                last["cache_control"] = _EPHEMERAL
        # No temperature: API version 2026-10-21 (the SDK's 2.x) refuses sampling parameters.
        return params


# --- our conversation -> Anthropic's ------------------------------------------------------


def _conversation(request: LLMRequest) -> tuple[list[str], list[dict[str, Any]]]:
    """(the system texts, the messages): consecutive turns of one role merged into one."""
    system = [request.system_prompt] if request.system_prompt else []
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, SystemMessage):
            if message.content:
                system.append(message.content)
            continue
        role, blocks = _blocks(message)
        if not blocks:
            continue
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].extend(blocks)
        else:
            messages.append({"role": role, "content": blocks})
    return system, messages


def _blocks(message: Message) -> tuple[str, list[dict[str, Any]]]:
    match message:
        case UserMessage():
            return "user", [{"type": "text", "text": message.content}] if message.content else []
        case ToolResultMessage():
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
            if message.is_error:
                block["is_error"] = True
            return "user", [block]
        case AssistantMessage():
            blocks = _kept_reasoning(message)
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {
                    "type": "tool_use",
                    "id": call.id,
                    "name": call.name,
                    "input": _input(call.arguments),
                }
                for call in message.tool_calls
            )
            return "assistant", blocks
        case SystemMessage():  # taken into `system` by _conversation
            return "user", []
        case _:
            assert_never(message)


def _kept_reasoning(message: AssistantMessage) -> list[dict[str, Any]]:
    """The turn's own thinking blocks, as they came (another provider's parts are left out)."""
    if isinstance(message.reasoning, msgspec.UnsetType):
        return []
    blocks: list[dict[str, Any]] = []
    for part in message.reasoning:
        if part.provider != PROVIDER:
            continue
        if "redacted" in part.data:
            blocks.append({"type": "redacted_thinking", "data": part.data["redacted"]})
        elif "signature" in part.data:  # unsigned thinking is refused: never sent
            blocks.append(
                {"type": "thinking", "thinking": part.text, "signature": part.data["signature"]}
            )
    return blocks


def _input(arguments: Any) -> dict[str, Any]:
    # A tool_use input must be an object: the model's own invalid JSON (a string, which the
    # tool result quoted back to it) goes back as {}.
    return arguments if isinstance(arguments, dict) else {}


# --- Anthropic's stream -> our pieces ------------------------------------------------------


class _Block:
    """One content block being streamed."""

    def __init__(self, kind: str, *, call: int | None = None) -> None:
        self.kind = kind
        self.call = call  # a tool_use block's position among the turn's calls
        self.text: list[str] = []
        self.signature = ""
        self.data = ""  # a redacted_thinking block's encrypted data
        self.id = ""
        self.name = ""


class _Turn:
    """Folds the stream's events into pieces as they come and one response at the end."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.blocks: dict[int, _Block] = {}
        self.calls = 0
        self.stop_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.thinking_tokens = 0
        self.stopped = False
        self.started = False  # a piece was yielded: the caller saw output

    def feed(self, event: Any) -> list[LLMStreamEvent]:
        """The pieces ``event`` carries, folding it into the turn."""
        pieces: list[LLMStreamEvent] = []
        if isinstance(event, RawMessageStartEvent):
            self.model = event.message.model or self.model
            self._count(event.message.usage)
        elif isinstance(event, RawContentBlockStartEvent):
            pieces = self._start(event)
        elif isinstance(event, RawContentBlockDeltaEvent):
            pieces = self._delta(event)
        elif isinstance(event, RawMessageDeltaEvent):
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._count(event.usage)
        elif isinstance(event, RawMessageStopEvent):
            self.stopped = True
        self.started = self.started or bool(pieces)
        return pieces

    def _count(self, usage: Any) -> None:
        for name in _USAGE:
            value = getattr(usage, name, None)
            if isinstance(value, int):
                self.usage[name] = value  # message_delta's counts are cumulative
        thinking = getattr(getattr(usage, "output_tokens_details", None), "thinking_tokens", None)
        self.thinking_tokens = thinking if isinstance(thinking, int) else self.thinking_tokens

    def _start(self, event: RawContentBlockStartEvent) -> list[LLMStreamEvent]:
        start = event.content_block
        if isinstance(start, ToolUseBlock):
            block = self.blocks[event.index] = _Block("tool_use", call=self.calls)
            self.calls += 1
            block.id, block.name = start.id, start.name
            # Streamed input starts as {} and comes in input_json_delta pieces; a whole one is
            # its own first piece.
            whole = msgspec.json.encode(start.input).decode() if start.input else ""
            block.text.append(whole)
            return [
                LLMToolCallDelta(
                    index=self.calls - 1, id=start.id, name=start.name, arguments=whole
                )
            ]
        if isinstance(start, TextBlock):
            block = self.blocks[event.index] = _Block("text")
            block.text.append(start.text)
            return [LLMTextDelta(text=start.text)] if start.text else []
        if isinstance(start, ThinkingBlock):
            block = self.blocks[event.index] = _Block("thinking")
            block.text.append(start.thinking)
            block.signature = start.signature or ""
            return [LLMReasoningDelta(text=start.thinking)] if start.thinking else []
        if isinstance(start, RedactedThinkingBlock):
            block = self.blocks[event.index] = _Block("redacted_thinking")
            block.data = start.data
            return []
        self.blocks[event.index] = _Block(str(getattr(start, "type", "other")))
        return []  # server tools and other blocks: not ours to show

    def _delta(self, event: RawContentBlockDeltaEvent) -> list[LLMStreamEvent]:
        block = self.blocks.get(event.index)
        if block is None:
            raise LLMError(
                f"the stream sent a delta for block {event.index} before its start",
                kind="bad_reply",
            )
        delta = event.delta
        if isinstance(delta, TextDelta):
            block.text.append(delta.text)
            return [LLMTextDelta(text=delta.text)] if delta.text else []
        if isinstance(delta, InputJSONDelta):
            block.text.append(delta.partial_json)
            if not delta.partial_json:
                return []
            return [LLMToolCallDelta(index=block.call or 0, arguments=delta.partial_json)]
        if isinstance(delta, ThinkingDelta):
            block.text.append(delta.thinking)
            return [LLMReasoningDelta(text=delta.thinking)] if delta.thinking else []
        if isinstance(delta, SignatureDelta):
            block.signature += delta.signature
        return []  # citations

    def response(self) -> LLMResponse:
        """The whole turn.

        Raises:
            LLMError: the stream ended before ``message_stop`` (``connection``),
                the model refused (``refused``), or the turn holds neither
                text nor a tool call (``bad_reply``).
        """
        if not self.stopped:
            raise LLMError(
                "the stream ended before message_stop: the reply is cut short",
                kind="connection",
                retryable=True,
            )
        if self.stop_reason == "refusal":
            raise LLMError(
                "the model refused to answer (stop_reason 'refusal')",
                kind="refused",
                hint="the request was declined by Anthropic's safety systems",
            )
        text: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ReasoningPart] = []
        for _, block in sorted(self.blocks.items()):
            if block.kind == "text":
                text.append("".join(block.text))
            elif block.kind == "tool_use":
                calls.append(ToolCall(id=block.id, name=block.name, arguments=_arguments(block)))
            elif block.kind == "thinking":
                data = {"signature": block.signature} if block.signature else {}
                reasoning.append(
                    ReasoningPart(text="".join(block.text), provider=PROVIDER, data=data)
                )
            elif block.kind == "redacted_thinking":
                reasoning.append(ReasoningPart(provider=PROVIDER, data={"redacted": block.data}))
        content = "".join(text)
        if not content and not calls:
            limit = self.stop_reason == "max_tokens"
            raise LLMError(
                f"the reply holds no text and no tool call (stop_reason {self.stop_reason!r})",
                kind="bad_reply",
                retryable=not limit,
                hint="the output limit came first: raise max_tokens" if limit else None,
            )
        finish = _FINISH.get(self.stop_reason or "", self.stop_reason)
        return LLMResponse(
            content=content,
            tool_calls=calls,
            usage=self._usage(),
            finish_reason=finish,
            model=self.model,
            reasoning=reasoning,
        )

    def _usage(self) -> TokenUsage | None:
        if not self.usage:
            return None
        cached = self.usage.get("cache_read_input_tokens", 0)
        written = self.usage.get("cache_creation_input_tokens", 0)
        return TokenUsage(
            # Anthropic counts the cached and the cache-written input apart from the rest.
            input_tokens=self.usage.get("input_tokens", 0) + cached + written,
            output_tokens=self.usage.get("output_tokens", 0),
            cached_input_tokens=cached,
            reasoning_tokens=self.thinking_tokens,
        )


def _arguments(block: _Block) -> Any:
    """A tool_use block's input: its streamed JSON decoded; invalid JSON stays the raw string."""
    raw = "".join(block.text)
    if not raw.strip():
        return {}
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw
