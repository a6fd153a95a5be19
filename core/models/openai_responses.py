"""An :class:`~helix_agents.models.base.LLMAdapter` for OpenAI's Responses API (``openai:MODEL``).

:class:`OpenAIResponsesLLM` speaks ``POST {base_url}/responses`` with
``stream: true`` and ``store: false``: the conversation goes as input items
every call (no state kept at OpenAI), and a reasoning model's reasoning items
come back with their ``encrypted_content`` (``include``), are kept on the
assistant turn (``ReasoningPart(provider="openai-responses")``) and are sent
back as input items on the next call, so the model picks up its own thinking
after a tool call. Built on httpx, as ``openai.py`` is (specs/llm.md says
why): one client per event loop, the same error lines (``openai_errors.py``).

The stream's events map onto ours: ``response.output_text.delta`` to
:class:`~helix_agents.models.base.LLMTextDelta`,
``response.reasoning_summary_text.delta`` (and ``response.reasoning_text.delta``)
to :class:`~helix_agents.models.base.LLMReasoningDelta`,
``response.output_item.added`` of a function call and
``response.function_call_arguments.delta`` to
:class:`~helix_agents.models.base.LLMToolCallDelta`; the items of
``response.output_item.done`` (or the output of ``response.completed``) and
its usage make the :class:`~helix_agents.models.base.LLMResponse`.
"""

from __future__ import annotations

import re
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any, Literal, Self, assert_never

import httpx
import msgspec

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
from helix_agents.models.connections import CallLimit, ClientPool, http_pool, limited
from helix_agents.models.openai import decode_arguments, encode_arguments
from helix_agents.models.openai_errors import Origin, Sent, code_kind, endpoint, posted, trimmed
from helix_agents.models.retrying import RETRY_KINDS

__all__ = ["PROVIDER", "OpenAIResponsesLLM", "is_reasoning_model"]

PROVIDER = "openai-responses"
"""``ReasoningPart.provider`` of the reasoning items this adapter keeps and sends back."""

ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "xhigh"]
"""How hard a reasoning model thinks (``reasoning.effort``)."""

_REASONING = re.compile(r"^(o\d|gpt-5|codex)")


def is_reasoning_model(model: str) -> bool:
    """Whether ``model`` is an OpenAI reasoning model (``o3``, ``gpt-5``..., not ``-chat``)."""
    return bool(_REASONING.match(model)) and "-chat" not in model


# What the server sends. Unknown fields and event types are ignored.
class _InputDetails(msgspec.Struct):
    cached_tokens: int = 0


class _OutputDetails(msgspec.Struct):
    reasoning_tokens: int = 0


class _Usage(msgspec.Struct):
    input_tokens: int = 0
    output_tokens: int = 0
    input_tokens_details: _InputDetails | None = None
    output_tokens_details: _OutputDetails | None = None


class _Response(msgspec.Struct):
    model: str | None = None
    output: list[dict[str, Any]] | None = None
    usage: _Usage | None = None
    error: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None


class _Event(msgspec.Struct):
    type: str = ""
    delta: str | None = None
    output_index: int = 0
    item: dict[str, Any] | None = None
    arguments: str | None = None
    response: _Response | None = None
    code: str | None = None
    message: str | None = None


_event_decoder = msgspec.json.Decoder(_Event)
_response_decoder = msgspec.json.Decoder(_Response)
_encoder = msgspec.json.Encoder()


class _Call:
    """A function call as it streams: its ids and its argument pieces."""

    __slots__ = ("arguments", "call_id", "name", "ordinal")

    def __init__(self, ordinal: int, call_id: str | None, name: str | None) -> None:
        self.ordinal = ordinal
        self.call_id = call_id
        self.name = name
        self.arguments: list[str] = []


class _Turn:
    """Folds the stream's events into the pieces to yield and, at the end, one response."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _Call] = {}  # by output index
        self.items: dict[int, dict[str, Any]] = {}  # output items done, by output index
        self.model: str | None = None
        self.usage: TokenUsage | None = None
        self.incomplete: str | None = None
        self.ended = False
        self.events = 0

    def feed(self, data: str | bytes) -> LLMStreamEvent | None:
        """Decode one event, fold it in; the piece to yield, if it makes one."""
        self.events += 1
        try:
            event = _event_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise LLMError(
                f"the reply is not a Responses API event ({exc}): {trimmed(data)}",
                kind="bad_reply",
            ) from exc
        kind = event.type
        if kind == "response.output_text.delta":
            if event.delta:
                self.text.append(event.delta)
                return LLMTextDelta(text=event.delta)
        elif kind == "response.function_call_arguments.delta":
            call = self.calls.get(event.output_index)
            if call is not None and event.delta:
                call.arguments.append(event.delta)
                return LLMToolCallDelta(index=call.ordinal, arguments=event.delta)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            if event.delta:
                return LLMReasoningDelta(text=event.delta)
        elif kind == "response.output_item.added":
            item = event.item or {}
            if item.get("type") == "function_call":
                call = _Call(len(self.calls), item.get("call_id"), item.get("name"))
                self.calls[event.output_index] = call
                first = item.get("arguments") or ""
                if first:
                    call.arguments.append(first)
                return LLMToolCallDelta(
                    index=call.ordinal, arguments=first, id=call.call_id, name=call.name
                )
        elif kind == "response.output_item.done":
            if event.item is not None:
                self.items[event.output_index] = event.item
        elif kind in ("response.created", "response.in_progress"):
            if event.response is not None:
                self.model = event.response.model or self.model
        elif kind in ("response.completed", "response.incomplete"):
            self.end(event.response)
        elif kind == "response.failed":
            error = (event.response.error if event.response is not None else None) or {}
            raise _failure(error.get("code"), error.get("message"))
        elif kind == "error":
            raise _failure(event.code, event.message)
        return None

    def end(self, response: _Response | None) -> None:
        """The response is done (completed or incomplete): its usage, model and output."""
        self.ended = True
        if response is None:
            return
        self.model = response.model or self.model
        if response.output:
            self.items = dict(enumerate(response.output))
        details = response.incomplete_details or {}
        self.incomplete = details.get("reason") or ("unknown" if details else None)
        if response.usage is not None:
            usage = response.usage
            cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else 0
            thought = (
                usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details else 0
            )
            self.usage = TokenUsage(
                input_tokens=usage.input_tokens,
                output_tokens=usage.output_tokens,
                cached_input_tokens=cached,
                reasoning_tokens=thought,
            )

    def response(self) -> LLMResponse:
        """The whole turn.

        Raises:
            LLMError: the turn holds neither text nor a tool call (``refused``
                when the model refused, ``bad_reply`` otherwise).
        """
        text: list[str] = []
        refusals: list[str] = []
        calls: list[ToolCall] = []
        reasoning: list[ReasoningPart] = []
        for _, item in sorted(self.items.items()):
            kind = item.get("type")
            if kind == "message":
                for part in item.get("content") or []:
                    if part.get("type") == "output_text":
                        text.append(part.get("text") or "")
                    elif part.get("type") == "refusal":
                        refusals.append(part.get("refusal") or "")
            elif kind == "function_call":
                calls.append(_tool_call(item))
            elif kind == "reasoning":
                reasoning.append(_reasoning_part(item))
        if not self.items:  # a server that sent no items: what streamed is the turn
            text = self.text
            calls = [
                ToolCall(
                    id=call.call_id or f"call_{index}",
                    name=call.name or "",
                    arguments=decode_arguments("".join(call.arguments)),
                )
                for index, call in sorted(self.calls.items())
            ]
        content = "".join(text)
        if not content and not calls:
            raise self._empty(refusals)
        finish = "tool_calls" if calls else "stop"
        if self.incomplete is not None:
            finish = "length" if self.incomplete == "max_output_tokens" else self.incomplete
        return LLMResponse(
            content=content,
            tool_calls=calls,
            usage=self.usage,
            finish_reason=finish,
            model=self.model,
            reasoning=reasoning,
        )

    def _empty(self, refusals: list[str]) -> LLMError:
        if refusals or self.incomplete == "content_filter":
            said = " ".join(" ".join(refusals).split()) or "the content filter stopped the reply"
            return LLMError(f"the model refused: {said}", kind="refused")
        why = ""
        if self.incomplete == "max_output_tokens":
            why = ": the token limit came first (reasoning included); raise max_tokens"
        text = f"the reply holds no text and no tool call{why}"
        return LLMError(text, kind="bad_reply", retryable=True)


def _failure(code: Any, message: Any) -> LLMError:
    """The error for a ``response.failed`` or an ``error`` event."""
    text = " ".join(message.split()) if isinstance(message, str) and message.strip() else None
    kind = code_kind(code, text) or "server"
    said = f"{text or 'the response failed'}" + (f" ({code})" if isinstance(code, str) else "")
    return LLMError(said, kind=kind, retryable=kind in RETRY_KINDS)


def _tool_call(item: dict[str, Any]) -> ToolCall:
    arguments = item.get("arguments")
    return ToolCall(
        id=item.get("call_id") or item.get("id") or "",
        name=item.get("name") or "",
        arguments=decode_arguments(arguments if isinstance(arguments, str) else ""),
    )


def _reasoning_part(item: dict[str, Any]) -> ReasoningPart:
    shown = [part.get("text") or "" for part in item.get("summary") or []]
    if not shown:  # open models send their reasoning as content
        shown = [part.get("text") or "" for part in item.get("content") or []]
    return ReasoningPart(text="\n\n".join(shown), provider=PROVIDER, data=item)


class OpenAIResponsesLLM:
    """A model behind OpenAI's Responses API (``POST {base_url}/responses``).

    The conversation is sent whole each call (``store: false``); a reasoning
    model's reasoning items (with ``include: ["reasoning.encrypted_content"]``)
    are kept on the turn and sent back, and its reasoning summary streams as
    reasoning. One HTTP client per event loop, reused across calls (see
    :class:`~helix_agents.models.openai.OpenAIChatLLM`, whose settings these
    are). The adapter makes one attempt per call: the run's retry policy
    (``LLMConfig.retry``) makes the retries.

    Args:
        model: The model name sent when a request names none.
        base_url: The API root; ``/responses`` is appended. Defaults to
            ``OPENAI_BASE_URL``, else ``https://api.openai.com/v1``.
        api_key: The bearer token; defaults to ``OPENAI_API_KEY``.
        headers: Extra headers sent with every request (they win over ours).
        timeout: Seconds for connecting and for each read.
        temperature: Default sampling temperature; a request's own wins.
        max_tokens: Default ``max_output_tokens`` (reasoning included).
        reasoning: Ask for reasoning summaries and encrypted reasoning items;
            None: when the model is a reasoning model (``o3``, ``gpt-5``...).
        reasoning_effort: ``reasoning.effort``; None leaves the model's default.
        reasoning_summary: ``reasoning.summary`` (``"auto"``, ``"concise"``,
            ``"detailed"``), or None for no summary.
        max_concurrency: At most this many calls in flight at once (per event loop).
        client: An ``httpx.AsyncClient`` to use instead of the adapter's own.

    Raises:
        UsageError: the API root is not an http(s) URL, or ``max_concurrency``
            is not a positive integer.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        reasoning: bool | None = None,
        reasoning_effort: ReasoningEffort | None = None,
        reasoning_summary: Literal["auto", "concise", "detailed"] | None = "auto",
        max_concurrency: int | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self._url, self._origin, self._headers = endpoint(base_url, api_key, headers, "/responses")
        self.model = model
        self._timeout = httpx.Timeout(timeout)
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._reasoning = reasoning
        self._effort = reasoning_effort
        self._summary = reasoning_summary
        self._limit = CallLimit(max_concurrency) if max_concurrency is not None else None
        self._client = client
        self._pool = http_pool(self._timeout) if client is None else None

    def __repr__(self) -> str:
        url = str(self._url).removesuffix("/responses")
        return f"<OpenAIResponsesLLM model={self.model!r} base_url={url!r}>"  # never the key

    def client_pools(self) -> list[ClientPool[httpx.AsyncClient]]:
        """The pool of the adapter's own clients (none when a client was passed in)."""
        return [self._pool] if self._pool is not None else []

    async def aclose(self) -> None:
        """Close this event loop's client if the adapter made it; idempotent."""
        if self._pool is not None:
            await self._pool.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """Call the model: yield text, reasoning and tool-call deltas, then one response.

        Raises:
            LLMError: one line naming the model, the endpoint and the fix, with
                its ``kind`` (specs/llm.md "The Responses API").
        """
        limit = self._limit
        if limit is None:
            return self._call(request)
        return limited(limit, lambda: self._call(request))

    def _call(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        client = self._client if self._pool is None else self._pool.client()
        assert client is not None
        sent = Sent(self._url, self._headers, self._timeout, self._origin)
        return posted(client, sent, self._body(request), request.model or self.model, _read)

    def _body(self, request: LLMRequest) -> bytes:
        model = request.model or self.model
        items: list[dict[str, Any]] = []
        for message in request.messages:
            _input_items(message, items)
        body: dict[str, Any] = {"model": model, "input": items, "stream": True, "store": False}
        if request.system_prompt:
            body["instructions"] = request.system_prompt
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters or {"type": "object", "properties": {}},
                    # Strict mode asks every schema to close and require all its fields.
                    "strict": False,
                }
                for tool in request.tools
            ]
        reasons = self._reasoning if self._reasoning is not None else is_reasoning_model(model)
        if reasons:
            body["include"] = ["reasoning.encrypted_content"]
            settings: dict[str, str] = {}
            if self._effort is not None:
                settings["effort"] = self._effort
            if self._summary is not None:
                settings["summary"] = self._summary
            if settings:
                body["reasoning"] = settings
        temperature = request.temperature if request.temperature is not None else self._temperature
        if temperature is not None:
            body["temperature"] = temperature
        max_tokens = request.max_tokens if request.max_tokens is not None else self._max_tokens
        if max_tokens is not None:
            body["max_output_tokens"] = max_tokens
        return _encoder.encode(body)


def _input_items(message: Message, items: list[dict[str, Any]]) -> None:
    """Add ``message`` to ``items`` as the Responses API's input items."""
    match message:
        case SystemMessage():
            items.append({"role": "system", "content": message.content})
        case UserMessage():
            items.append({"role": "user", "content": message.content})
        case AssistantMessage():
            for part in message.reasoning or ():
                # Only an item with its encrypted content can be sent back with store: false.
                if part.provider == PROVIDER and part.data.get("encrypted_content"):
                    items.append(part.data)
            if message.content:
                items.append({"role": "assistant", "content": message.content})
            for call in message.tool_calls:
                items.append(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.name,
                        "arguments": encode_arguments(call.arguments),
                    }
                )
        case ToolResultMessage():
            output = {"type": "function_call_output", "output": message.content}
            items.append({**output, "call_id": message.tool_call_id})
        case _:
            assert_never(message)


async def _read(response: httpx.Response, origin: Origin) -> AsyncGenerator[LLMStreamEvent, None]:
    """Yield the pieces of a successful response, then the turn; a body that holds no Responses
    API reply asks whether the API root is right."""
    turn = _Turn()
    try:
        async with aclosing(_fold(response, turn)) as events:
            async for event in events:
                yield event
    except LLMError as exc:
        if exc.kind == "bad_reply" and not turn.ended and turn.events <= 1:
            exc.hint = exc.hint or origin.root_hint()
        raise


async def _fold(response: httpx.Response, turn: _Turn) -> AsyncGenerator[LLMStreamEvent, None]:
    content_type = response.headers.get("content-type", "")
    if content_type.startswith("application/json"):  # a server that ignored ``stream``
        body = await response.aread()
        try:
            turn.end(_response_decoder.decode(body))
        except msgspec.DecodeError as exc:
            raise LLMError(
                f"the reply is not a Responses API response ({exc}): {trimmed(body)}",
                kind="bad_reply",
            ) from exc
        whole = turn.response()
        if whole.content:
            yield LLMTextDelta(text=whole.content)
        yield whole
        return
    other: list[str] = []  # lines that are not events: what a body that is no stream held
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            if len(other) < 5 and line.strip() and not line.startswith((":", "event:")):
                other.append(line)
            continue
        piece = turn.feed(line[5:])
        if piece is not None:
            yield piece
    if not turn.ended:
        if not turn.events and other:
            held = f"{content_type or 'no content-type'}, {trimmed(' '.join(other))}"
            text = f"the reply holds no Responses API event (it held {held})"
            raise LLMError(text, kind="bad_reply")
        raise LLMError(
            "the stream ended before the response completed", kind="connection", retryable=True
        )
    yield turn.response()
