"""An :class:`~helix_agents.models.base.LLMAdapter` for OpenAI-compatible chat completions.

:class:`OpenAIChatLLM` speaks ``POST {base_url}/chat/completions`` as OpenAI,
vLLM, Ollama and llama.cpp's server implement it: it streams server-sent
events, yields the text as it arrives, and folds the chunks into one
:class:`~helix_agents.models.base.LLMResponse`. httpx errors never leave this module:
every failure is an :class:`~helix_agents.models.base.LLMError` naming the model
and the endpoint (``openai_errors.py`` words them), and so is a ``200`` that
holds no model reply (no ``choices``, an empty turn, a body that is not JSON).
"""

from __future__ import annotations

import math
import os
import uuid
from collections.abc import AsyncGenerator, Mapping
from contextlib import aclosing
from typing import Any, Self, assert_never

import httpx
import msgspec

from helix_agents.errors import UsageError
from helix_agents.messages import (
    AssistantMessage,
    Message,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from helix_agents.models.base import (
    LLMError,
    LLMRequest,
    LLMResponse,
    LLMStreamEvent,
    LLMTextDelta,
    TokenUsage,
)
from helix_agents.models.openai_errors import (
    API_KEY_ENV,
    BASE_URL_ENV,
    OPENAI_URL,
    Origin,
    error_text,
    status_error,
    transport_error,
    trimmed,
)
from helix_agents.retry import retrying_stream

__all__ = ["OpenAIChatLLM"]


# What servers send. Unknown fields (logprobs, reasoning_content, ...) are
# ignored, so each server's extras pass through harmlessly.
class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | dict[str, Any] | None = None


class _ToolCallDelta(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCallDelta] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    message: _Delta | None = None  # a non-streamed reply carries the whole turn here
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    model: str | None = None
    usage: _Usage | None = None
    error: Any = None


_chunk_decoder = msgspec.json.Decoder(_Chunk)
_encoder = msgspec.json.Encoder()


class _PendingCall(msgspec.Struct):
    id: str | None = None
    name: str = ""
    arguments: list[str] = []


class _Turn:
    """Folds chunks (or one non-streamed reply) into one assistant turn."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: dict[int, _PendingCall] = {}
        self.finish_reason: str | None = None
        self.model: str | None = None
        self.usage: TokenUsage | None = None
        self.chunks = 0
        self.choices = 0  # chunks that carried a choice
        self.sample = ""  # the first chunk's text, trimmed: what a bad reply held

    def feed(self, data: str | bytes) -> str:
        """Decode one chunk (or a whole non-streamed reply), fold it in, return its new text."""
        self.chunks += 1
        try:
            chunk = _chunk_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise LLMError(f"the reply is not a chat completion ({exc}): {trimmed(data)}") from exc
        self.sample = self.sample or trimmed(data)
        if chunk.error is not None:
            raise LLMError(error_text(chunk.error) or "the server sent an error event")
        self.model = self.model or chunk.model
        if chunk.usage is not None:
            tokens = (chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            self.usage = TokenUsage(input_tokens=tokens[0], output_tokens=tokens[1])
        if not chunk.choices:
            return ""
        self.choices += 1
        choice = chunk.choices[0]
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta or choice.message
        if delta is None:
            return ""
        for position, fragment in enumerate(delta.tool_calls or []):
            # Non-streamed replies carry no index: their list position is it.
            index = fragment.index if fragment.index is not None else position
            call = self.calls.setdefault(index, _PendingCall())
            call.id = call.id or fragment.id
            function = fragment.function or _Function()
            call.name = call.name or function.name or ""
            if isinstance(function.arguments, str):
                call.arguments.append(function.arguments)
            elif function.arguments is not None:
                call.arguments.append(_encoder.encode(function.arguments).decode())
        if delta.content:
            self.text.append(delta.content)
            return delta.content
        return ""

    def response(self) -> LLMResponse:
        """The whole turn, tool-call arguments decoded.

        Raises:
            LLMError: the reply held no choice, or a choice with neither text
                nor a tool call: no model reply to give (never an empty turn).
        """
        if not self.choices:
            raise LLMError(f"the reply has no choices: {self.sample or 'nothing'}")
        if not self.calls and not any(self.text):
            why = _EMPTY_BECAUSE.get(self.finish_reason or "", "")
            raise LLMError(
                f"the reply holds no text and no tool call (finish_reason "
                f"{self.finish_reason!r}{why}): {self.sample}",
                retryable=True,
            )
        calls = [
            ToolCall(
                id=call.id or f"call_{uuid.uuid4().hex}",
                name=call.name,
                arguments=_decode_arguments("".join(call.arguments)),
            )
            for _, call in sorted(self.calls.items())
        ]
        return LLMResponse(
            content="".join(self.text),
            tool_calls=calls,
            usage=self.usage,
            finish_reason=self.finish_reason,
            model=self.model,
        )


_EMPTY_BECAUSE = {
    "length": ": the token limit came first; raise max_tokens",
    "content_filter": ": the server's content filter removed it",
}


class OpenAIChatLLM:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Works with OpenAI, vLLM, Ollama (``http://localhost:11434/v1``) and
    llama.cpp's server. A failure is an :class:`LLMError` naming the model,
    the endpoint and, where there is one, the fix. Tool-call arguments are
    decoded from the JSON string the model produced; when that string is not
    valid JSON, the raw string is kept as ``ToolCall.arguments`` so the run
    loop can report the error to the model instead of failing the run (an
    empty string decodes to ``{}``).

    Use it as an async context manager, or call :meth:`aclose`, to close the
    HTTP client it created; a client passed in stays open (its owner closes it).

    Args:
        model: The model name sent when a request names none.
        base_url: The API root; ``/chat/completions`` is appended. Defaults to
            the ``OPENAI_BASE_URL`` environment variable, else OpenAI's.
        api_key: Sent as ``Authorization: Bearer``; defaults to the
            ``OPENAI_API_KEY`` environment variable; no header when neither is set.
        headers: Extra headers sent with every request (they win over ours).
        timeout: Seconds for connecting and for each read, not for the whole call.
        max_retries: Retries after the first attempt, for HTTP 429, 5xx and
            network errors, only while nothing has been yielded.
        retry_base_delay: Retry ``n`` (from 0) waits ``retry_base_delay * 2**n``
            seconds, or the server's numeric ``Retry-After`` (capped at 30 s).
        temperature: Default sampling temperature; a request's own wins.
        max_tokens: Default completion limit; a request's own wins.
        client: An ``httpx.AsyncClient`` to use instead of creating one.

    Raises:
        UsageError: If ``base_url`` (or ``OPENAI_BASE_URL``) is not an http(s)
            URL, or ``max_retries`` is negative.
    """

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        retry_base_delay: float = 0.5,
        temperature: float | None = None,
        max_tokens: int | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        url_from: str | None = "base_url"
        if base_url is None:
            base_url = os.environ.get(BASE_URL_ENV) or None
            url_from = BASE_URL_ENV if base_url is not None else None
        base_url = base_url or OPENAI_URL
        try:
            self._url = httpx.URL(base_url.rstrip("/") + "/chat/completions")
        except httpx.InvalidURL as exc:
            raise UsageError(f"invalid {url_from or 'base_url'} {base_url!r}: {exc}") from exc
        if self._url.scheme not in ("http", "https") or not self._url.host:
            raise UsageError(f"{url_from} must be an http(s) URL, not {base_url!r}")
        if max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, not {max_retries}")
        self.model = model
        key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        key_from = ("api_key" if api_key is not None else API_KEY_ENV) if key else None
        self._origin = Origin(base_url=base_url, url_from=url_from, key_from=key_from)
        self._headers = {"Content-Type": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self._headers.update(headers or {})
        self._timeout = httpx.Timeout(timeout)
        self._max_retries = max_retries
        self._retry_base_delay = retry_base_delay
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._owns_client = client is None
        self._client = client if client is not None else httpx.AsyncClient(timeout=self._timeout)

    def __repr__(self) -> str:
        # never the API key: the headers are left out on purpose
        url = str(self._url).removesuffix("/chat/completions")
        return f"<OpenAIChatLLM model={self.model!r} base_url={url!r}>"

    async def aclose(self) -> None:
        """Close the HTTP client if this adapter created it; idempotent."""
        if self._owns_client:
            await self._client.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def stream(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """Call the model: yield text deltas as they arrive, then one :class:`LLMResponse`.

        To leave the loop early, cancel, or iterate under ``contextlib.aclosing``
        (hence the ``AsyncGenerator`` type): either closes the HTTP response at
        once, where a plain ``break`` leaves it to garbage collection.

        Raises:
            LLMError: The server refused (``status`` set; ``retryable`` for 429
                and 5xx once retries are spent), could not be reached, broke off
                mid-stream (``retryable``), or sent something that is not a model
                reply (not JSON, no ``choices``, a turn with neither text nor a
                tool call). Its ``model``, ``endpoint`` and ``hint`` are set.
        """
        return retrying_stream(
            lambda: self._call(request),
            retries=self._max_retries,
            base_delay=self._retry_base_delay,
            retry_if=_worth_retrying,
            wait=_server_wait,
        )

    async def _call(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """One try: the events of one response; an httpx failure is the ``LLMError``'s cause."""
        body = self._body(request)
        model = request.model or self.model
        try:
            try:
                async with self._client.stream(
                    "POST", self._url, content=body, headers=self._headers, timeout=self._timeout
                ) as response:
                    try:
                        response.raise_for_status()
                    except httpx.HTTPStatusError as exc:
                        await response.aread()
                        raise status_error(response, self._origin, model) from exc
                    async with aclosing(_read(response, self._origin)) as events:
                        async for event in events:
                            yield event
            except httpx.TransportError as exc:
                raise transport_error(exc, self._origin, self._timeout) from exc
            except httpx.HTTPError as exc:
                raise LLMError(f"{type(exc).__name__}: {exc}") from exc
        except LLMError as exc:
            # Every failure names what was called, where (the server's own words stay the message).
            exc.model, exc.endpoint = exc.model or model, exc.endpoint or str(self._url)
            raise

    def _body(self, request: LLMRequest) -> bytes:
        messages: list[dict[str, Any]] = []
        if request.system_prompt:
            messages.append({"role": "system", "content": request.system_prompt})
        messages.extend(_message(message) for message in request.messages)
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": messages,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        # Some servers reject a bare {}; this is its meaning.
                        "parameters": tool.parameters or {"type": "object", "properties": {}},
                    },
                }
                for tool in request.tools
            ]
        temperature = request.temperature if request.temperature is not None else self._temperature
        if temperature is not None:
            body["temperature"] = temperature
        max_tokens = request.max_tokens if request.max_tokens is not None else self._max_tokens
        if max_tokens is not None:
            body["max_tokens"] = max_tokens
        return _encoder.encode(body)


def _message(message: Message) -> dict[str, Any]:
    match message:
        case SystemMessage():
            return {"role": "system", "content": message.content}
        case UserMessage():
            return {"role": "user", "content": message.content}
        case AssistantMessage():
            out: dict[str, Any] = {
                "role": "assistant",
                "content": message.content or (None if message.tool_calls else ""),
            }
            if message.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": _encode_arguments(call.arguments),
                        },
                    }
                    for call in message.tool_calls
                ]
            return out
        case ToolResultMessage():
            content = message.content
            return {"role": "tool", "tool_call_id": message.tool_call_id, "content": content}
        case _:
            assert_never(message)


def _encode_arguments(arguments: Any) -> str:
    # A string is the model's own invalid JSON (see _decode_arguments): send it back verbatim.
    if isinstance(arguments, str):
        return arguments
    return _encoder.encode(arguments if arguments is not None else {}).decode()


def _decode_arguments(raw: str) -> Any:
    # Invalid JSON stays the raw string: the run loop tells the model what is wrong with it.
    if not raw.strip():
        return {}
    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return raw


async def _read(response: httpx.Response, origin: Origin) -> AsyncGenerator[LLMStreamEvent, None]:
    """Yield the events of a successful response, streamed (SSE) or not (JSON).

    A reply that holds no model reply is an :class:`LLMError`; one that holds no
    chat completion at all (no choices, not JSON, no events) asks whether the
    API root is right.
    """
    turn = _Turn()
    try:
        async with aclosing(_fold(response, turn)) as events:
            async for event in events:
                yield event
    except LLMError as exc:
        if exc.status is None and not turn.choices:
            exc.hint = exc.hint or origin.root_hint()
        raise


async def _fold(response: httpx.Response, turn: _Turn) -> AsyncGenerator[LLMStreamEvent, None]:
    kind = response.headers.get("content-type", "")
    if kind.startswith("application/json"):
        text = turn.feed(await response.aread())
        if text:
            yield LLMTextDelta(text=text)
        yield turn.response()
        return
    done = False
    other: list[str] = []  # lines that are not events: what a body that is no stream held
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            if len(other) < 5 and line.strip() and not line.startswith(":"):
                other.append(line)
            continue  # blank separators, ": comments", and fields we do not use
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            break
        text = turn.feed(data)
        if text:
            yield LLMTextDelta(text=text)
    if not turn.chunks:
        held = f"{kind or 'no content-type'}, {trimmed(' '.join(other))}" if other else "nothing"
        where = "before [DONE]" if done else f"(it held {held})"
        # Nothing at all looks like a connection dropped early: a new try may do better.
        raise LLMError(f"the reply holds no chat completion chunk {where}", retryable=not other)
    if not done and turn.finish_reason is None:
        raise LLMError("the stream ended before the model finished its turn", retryable=True)
    yield turn.response()


def _worth_retrying(exc: Exception) -> bool:
    """A network failure, or a refusal that says to try again (HTTP 429 or 5xx)."""
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return isinstance(exc, LLMError) and exc.retryable
    return isinstance(cause, httpx.TransportError)


def _server_wait(exc: Exception) -> float | None:
    """The seconds a refusal's ``Retry-After`` asks for; ``None`` for our own backoff."""
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return _retry_after(cause.response.headers.get("retry-after"))
    return None


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else math.nan
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
    return None if math.isnan(seconds) else min(max(seconds, 0.0), 30.0)
