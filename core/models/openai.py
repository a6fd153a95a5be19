"""An :class:`~helix_agents.models.base.LLMAdapter` for OpenAI-compatible chat completions.

:class:`OpenAIChatLLM` speaks ``POST {base_url}/chat/completions`` as OpenAI,
vLLM, Ollama and llama.cpp's server implement it: it streams server-sent
events, yields the text as it arrives, and folds the chunks into one
:class:`~helix_agents.models.base.LLMResponse`. httpx errors never leave this module:
every failure is an :class:`~helix_agents.models.base.LLMError` naming the model
and the endpoint (``openai_errors.py`` words them), and so is a ``200`` that
holds no model reply (no ``choices``, an empty turn, a body that is not JSON).
Tool-call arguments stream as :class:`~helix_agents.models.base.LLMToolCallDelta`
pieces; the HTTP client is one per event loop, reused across calls
(``connections.py``).
"""

from __future__ import annotations

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
    LLMToolCallDelta,
    TokenUsage,
)
from helix_agents.models.connections import CallLimit, ClientPool, http_pool, limited
from helix_agents.models.openai_errors import (
    Origin,
    Sent,
    code_kind,
    endpoint,
    error_text,
    posted,
    trimmed,
)
from helix_agents.retry import retrying_stream

__all__ = ["OpenAIChatLLM", "decode_arguments", "encode_arguments"]

_MOST_RETRY_AFTER = 30.0
"""The longest ``Retry-After`` the adapter's own retries wait (seconds)."""


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

    def feed(self, data: str | bytes, out: list[LLMStreamEvent]) -> None:
        """Decode one chunk (or a whole non-streamed reply), fold it in, its pieces into ``out``."""
        self.chunks += 1
        try:
            chunk = _chunk_decoder.decode(data)
        except msgspec.DecodeError as exc:
            raise LLMError(
                f"the reply is not a chat completion ({exc}): {trimmed(data)}", kind="bad_reply"
            ) from exc
        self.sample = self.sample or trimmed(data)
        if chunk.error is not None:
            message = error_text(chunk.error) or "the server sent an error event"
            code = chunk.error.get("code") if isinstance(chunk.error, dict) else None
            kind = code_kind(code, message) or "server"
            raise LLMError(message, kind=kind, retryable=kind == "server")
        self.model = self.model or chunk.model
        if chunk.usage is not None:
            tokens = (chunk.usage.prompt_tokens or 0, chunk.usage.completion_tokens or 0)
            self.usage = TokenUsage(input_tokens=tokens[0], output_tokens=tokens[1])
        if not chunk.choices:
            return
        self.choices += 1
        choice = chunk.choices[0]
        self.finish_reason = choice.finish_reason or self.finish_reason
        delta = choice.delta or choice.message
        if delta is None:
            return
        if delta.content:
            self.text.append(delta.content)
            out.append(LLMTextDelta(text=delta.content))
        for position, fragment in enumerate(delta.tool_calls or []):
            # Non-streamed replies carry no index: their list position is it.
            index = fragment.index if fragment.index is not None else position
            call = self.calls.setdefault(index, _PendingCall())
            call.id = call.id or fragment.id
            function = fragment.function or _Function()
            call.name = call.name or function.name or ""
            piece = function.arguments
            if piece is not None and not isinstance(piece, str):
                piece = _encoder.encode(piece).decode()
            if piece:
                call.arguments.append(piece)
            if piece or fragment.id or function.name:
                out.append(
                    LLMToolCallDelta(
                        index=index, arguments=piece or "", id=fragment.id, name=function.name
                    )
                )

    def response(self) -> LLMResponse:
        """The whole turn, tool-call arguments decoded.

        Raises:
            LLMError: the reply held no choice, or a choice with neither text
                nor a tool call: no model reply to give (never an empty turn).
        """
        if not self.choices:
            sample = self.sample or "nothing"
            raise LLMError(f"the reply has no choices: {sample}", kind="bad_reply")
        if not self.calls and not any(self.text):
            why = _EMPTY_BECAUSE.get(self.finish_reason or "", "")
            raise LLMError(
                f"the reply holds no text and no tool call (finish_reason "
                f"{self.finish_reason!r}{why}): {self.sample}",
                retryable=True,
                kind="bad_reply",
            )
        calls = [
            ToolCall(
                id=call.id or f"call_{uuid.uuid4().hex}",
                name=call.name,
                arguments=decode_arguments("".join(call.arguments)),
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
    the endpoint and, where there is one, the fix, with its ``kind``. Tool-call
    arguments are decoded from the JSON string the model produced; when that
    string is not valid JSON, the raw string is kept as ``ToolCall.arguments``
    so the run loop can report the error to the model instead of failing the
    run (an empty string decodes to ``{}``).

    The HTTP client is one per event loop, made at the first call there and
    reused by every call after it; an executor whose runs used the adapter
    closes it when it closes. Outside an executor, use the adapter as an
    async context manager, or call :meth:`aclose`. A client passed in is used
    on every loop and stays open (its owner closes it).

    Args:
        model: The model name sent when a request names none.
        base_url: The API root; ``/chat/completions`` is appended. Defaults to
            the ``OPENAI_BASE_URL`` environment variable, else OpenAI's.
        api_key: Sent as ``Authorization: Bearer``; defaults to the
            ``OPENAI_API_KEY`` environment variable; no header when neither is set.
        headers: Extra headers sent with every request (they win over ours).
        timeout: Seconds for connecting and for each read, not for the whole call.
        max_retries: Retries after the first attempt, for HTTP 429, 5xx and
            network errors, only while nothing has been yielded. The error it
            gives up on is not retried again by the run's retry policy
            (``LLMConfig.retry``); ``0`` leaves retries to that policy alone.
        retry_base_delay: Retry ``n`` (from 0) waits ``retry_base_delay * 2**n``
            seconds, or the server's ``Retry-After`` (capped at 30 s).
        temperature: Default sampling temperature; a request's own wins.
        max_tokens: Default completion limit; a request's own wins.
        max_concurrency: At most this many calls in flight at once (per event
            loop); the others wait for a slot. None: no limit.
        client: An ``httpx.AsyncClient`` to use instead of the adapter's own.

    Raises:
        UsageError: If ``base_url`` (or ``OPENAI_BASE_URL``) is not an http(s)
            URL, ``max_retries`` is negative, or ``max_concurrency`` is not a
            positive integer.
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
        max_concurrency: int | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if max_retries < 0:
            raise UsageError(f"max_retries must be >= 0, not {max_retries}")
        url, origin, sent = endpoint(base_url, api_key, headers, "/chat/completions")
        self._url, self._origin, self._headers = url, origin, sent
        self.model = model
        self._timeout = httpx.Timeout(timeout)
        self._max_retries = max_retries
        self._retry_base_delay = retry_base_delay
        self._temperature = temperature
        self._max_tokens = max_tokens
        self._limit = CallLimit(max_concurrency) if max_concurrency is not None else None
        self._client = client
        self._pool = http_pool(self._timeout) if client is None else None

    def __repr__(self) -> str:
        # never the API key: the headers are left out on purpose
        url = str(self._url).removesuffix("/chat/completions")
        return f"<OpenAIChatLLM model={self.model!r} base_url={url!r}>"

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
        """Call the model: yield text and tool-call deltas as they arrive, then one
        :class:`LLMResponse`.

        To leave the loop early, cancel, or iterate under ``contextlib.aclosing``
        (hence the ``AsyncGenerator`` type): either closes the HTTP response at
        once, where a plain ``break`` leaves it to garbage collection.

        Raises:
            LLMError: The server refused (``status`` set; ``retryable`` for 429
                and 5xx once retries are spent), could not be reached, broke off
                mid-stream (``retryable``), or sent something that is not a model
                reply (not JSON, no ``choices``, a turn with neither text nor a
                tool call). Its ``model``, ``endpoint``, ``hint`` and ``kind`` are set.
        """
        limit = self._limit

        def attempt() -> AsyncGenerator[LLMStreamEvent, None]:
            if limit is None:
                return self._call(request)
            return limited(limit, lambda: self._call(request))

        if not self._max_retries:
            return attempt()
        return retrying_stream(
            attempt,
            retries=self._max_retries,
            base_delay=self._retry_base_delay,
            retry_if=_worth_retrying,
            wait=_server_wait,
        )

    def _call(self, request: LLMRequest) -> AsyncGenerator[LLMStreamEvent, None]:
        """One try: the events of one response; an httpx failure is the ``LLMError``'s cause."""
        client = self._client if self._pool is None else self._pool.client()
        assert client is not None
        sent = Sent(self._url, self._headers, self._timeout, self._origin)
        return posted(client, sent, self._body(request), request.model or self.model, _read)

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
                            "arguments": encode_arguments(call.arguments),
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


def encode_arguments(arguments: Any) -> str:
    """A call's arguments as the JSON text sent back; a ``str`` (the model's own invalid JSON,
    see :func:`decode_arguments`) verbatim."""
    if isinstance(arguments, str):
        return arguments
    return _encoder.encode(arguments if arguments is not None else {}).decode()


def decode_arguments(raw: str) -> Any:
    """A call's JSON arguments decoded; ``{}`` when empty; invalid JSON stays the raw string
    (the run loop tells the model what is wrong with it)."""
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
    pieces: list[LLMStreamEvent] = []
    if kind.startswith("application/json"):
        turn.feed(await response.aread(), pieces)
        for piece in pieces:
            yield piece
        yield turn.response()
        return
    done = False
    other: list[str] = []  # lines that are not events: what a body that is no stream held
    async for line in response.aiter_lines():
        if done:
            continue  # read to the end: a connection read to its end goes back to the pool
        if not line.startswith("data:"):
            if len(other) < 5 and line.strip() and not line.startswith(":"):
                other.append(line)
            continue  # blank separators, ": comments", and fields we do not use
        data = line[5:].strip()
        if data == "[DONE]":
            done = True
            continue
        turn.feed(data, pieces)
        for piece in pieces:
            yield piece
        pieces.clear()
    if not turn.chunks:
        held = f"{kind or 'no content-type'}, {trimmed(' '.join(other))}" if other else "nothing"
        where = "before [DONE]" if done else f"(it held {held})"
        # Nothing at all looks like a connection dropped early: a new try may do better.
        nothing = not other and not done
        raise LLMError(
            f"the reply holds no chat completion chunk {where}",
            retryable=not other,
            kind="connection" if nothing else "bad_reply",
        )
    if not done and turn.finish_reason is None:
        raise LLMError(
            "the stream ended before the model finished its turn", retryable=True, kind="connection"
        )
    yield turn.response()


def _worth_retrying(exc: Exception) -> bool:
    """A network failure, or a refusal that says to try again (HTTP 429 or 5xx)."""
    cause = exc.__cause__
    if isinstance(cause, httpx.HTTPStatusError):
        return isinstance(exc, LLMError) and exc.retryable
    return isinstance(cause, httpx.TransportError)


def _server_wait(exc: Exception) -> float | None:
    """The seconds a refusal's ``Retry-After`` asks for (capped); ``None`` for our own backoff."""
    wait = exc.retry_after if isinstance(exc, LLMError) else None
    return min(wait, _MOST_RETRY_AFTER) if wait is not None else None
