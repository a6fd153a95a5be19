"""Fake Anthropic, Gemini and OpenAI chat-completions servers in each API's own wire format.

Each fake records every request (path, query, JSON body, lower-cased headers)
and plays its ``replies`` in order, the last one repeating, or, given an
``answer``, replies with what that makes of the request's body (a fake that
answers by conversation: ``conversation_fakes.py``). The builders below
write the bodies as the providers' API references document them:

- Anthropic's Messages API, ``POST /v1/messages`` with ``stream: true``:
  server-sent events ``event: NAME`` / ``data: JSON``: ``message_start``,
  ``content_block_start``, ``content_block_delta`` (``text_delta``,
  ``input_json_delta``, ``thinking_delta``, ``signature_delta``),
  ``content_block_stop``, ``message_delta`` (``stop_reason`` and ``usage``),
  ``message_stop``, ``ping`` and ``error``; an error reply is
  ``{"type": "error", "error": {"type": ..., "message": ...}}``.
- Gemini's ``POST /{version}/models/{model}:streamGenerateContent?alt=sse``:
  ``data: JSON`` events, each a ``GenerateContentResponse`` (``candidates``
  with ``content.parts``, ``finishReason`` on the last, ``usageMetadata``,
  ``modelVersion``, ``responseId``); an error reply is Google's
  ``{"error": {"code", "message", "status", "details"}}``.
- OpenAI's ``POST /v1/chat/completions`` with ``stream: true`` (what
  ``openai-chat:`` and ``openai-compatible:`` speak): ``data: JSON`` events,
  each a ``chat.completion.chunk`` (``choices[0].delta`` with ``content`` or
  ``tool_calls`` fragments, ``finish_reason`` on the last), then the usage
  chunk ``stream_options.include_usage`` asks for, then ``data: [DONE]``.

Use them with ``servers.serve``::

    fake = FakeAnthropic()
    fake.replies = [anthropic_stream(*anthropic_text_turn("Hi"))]
    async with serve(fake.app) as url:
        llm = AnthropicLLM("claude-x", base_url=url, api_key="k")

Shared with other tests (a cross-runtime run on each provider's fake).
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

__all__ = [
    "FakeAnthropic",
    "FakeChat",
    "FakeGemini",
    "MESSAGE_STOP",
    "Recorded",
    "Reply",
    "SSE",
    "anthropic_bytes",
    "anthropic_error",
    "anthropic_error_event",
    "anthropic_event",
    "anthropic_stream",
    "anthropic_text_turn",
    "anthropic_tool_turn",
    "anthropic_turn",
    "chat_chunk",
    "chat_stream",
    "chat_turn",
    "cut_stream",
    "endless_stream",
    "gemini_bytes",
    "gemini_chunk",
    "gemini_error",
    "gemini_event",
    "gemini_stream",
    "gemini_turn",
    "gemini_usage",
    "message_delta",
    "message_start",
    "redacted_thinking_block",
    "retry_info",
    "signature",
    "text_block",
    "thinking_block",
    "tool_use_block",
]

Reply = Callable[[], Response]
"""Makes one HTTP reply (a fresh response each time it is played)."""

SSE = "text/event-stream"


@dataclass
class Recorded:
    """One request a fake received."""

    path: str
    query: dict[str, str]
    body: dict[str, Any]
    headers: dict[str, str]


@dataclass
class _Fake:
    """Records requests and plays ``replies`` in order, the last one repeating."""

    replies: list[Reply] = field(default_factory=list)
    requests: list[Recorded] = field(default_factory=list)
    url: str = ""  # where it is served, once the test has served it
    answer: Callable[[dict[str, Any]], Response] | None = None
    """Instead of ``replies``: the reply to a request's JSON body."""

    async def _answer(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(
            Recorded(request.url.path, dict(request.query_params), body, dict(request.headers))
        )
        if self.answer is not None:
            return self.answer(body)
        if not self.replies:
            return JSONResponse({"error": "the test gave the fake no reply"}, status_code=500)
        return self.replies[min(len(self.requests), len(self.replies)) - 1]()


class FakeAnthropic(_Fake):
    """``POST /v1/messages`` as Anthropic's Messages API answers it."""

    def __init__(self) -> None:
        super().__init__()
        self.app = Starlette(routes=[Route("/v1/messages", self._answer, methods=["POST"])])


class FakeGemini(_Fake):
    """``POST /{version}/models/{model}:streamGenerateContent`` as the Gemini API answers it."""

    def __init__(self) -> None:
        super().__init__()
        self.app = Starlette(
            routes=[Route("/{version}/models/{action}", self._answer, methods=["POST"])]
        )


class FakeChat(_Fake):
    """``POST /v1/chat/completions`` as OpenAI (and servers compatible with it) answer."""

    def __init__(self) -> None:
        super().__init__()
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._answer, methods=["POST"])])


# --- the wire: server-sent events ---------------------------------------------


async def _parts(parts: Iterable[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part
        await (
            anyio.lowlevel.checkpoint()
        )  # one write per part: the client reads them as separate chunks


def _json(data: Any) -> str:
    return json.dumps(data, separators=(",", ":"))


class _Cut(Response):
    """Sends a 200 and ``parts`` of the body, then drops the connection (no end of body)."""

    def __init__(self, parts: list[bytes], media_type: str) -> None:
        super().__init__(media_type=media_type)
        self.parts = parts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", self.media_type.encode())]  # type: ignore[union-attr]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for part in self.parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        # Returning without the last body message: uvicorn closes the connection
        # mid-body (a chunked body with no last chunk), as a dropped network does.


def cut_stream(reply_parts: list[bytes], media_type: str = SSE) -> Reply:
    """A 200 stream that breaks off after ``reply_parts``: the connection drops mid-body."""
    return lambda: _Cut(reply_parts, media_type)


class _Endless(Response):
    """Sends ``head``, then ``tick`` every few milliseconds until the client leaves."""

    def __init__(self, head: list[bytes], tick: bytes, disconnected: anyio.Event) -> None:
        super().__init__(media_type=SSE)
        self.head, self.tick, self.disconnected = head, tick, disconnected

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def drip() -> None:
            headers = [(b"content-type", SSE.encode())]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            for part in self.head:
                await send({"type": "http.response.body", "body": part, "more_body": True})
            while True:
                await send({"type": "http.response.body", "body": self.tick, "more_body": True})
                await anyio.sleep(0.01)  # pacing, not synchronisation: "slowly, forever"

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(drip)
                while (await receive())["type"] != "http.disconnect":
                    pass
                tg.cancel_scope.cancel()
        finally:
            self.disconnected.set()


def endless_stream(head: list[bytes], tick: bytes, disconnected: anyio.Event) -> Reply:
    """A stream that never ends: ``head``, then ``tick`` forever; ``disconnected`` set when the
    client closes the connection."""
    return lambda: _Endless(head, tick, disconnected)


# --- Anthropic ------------------------------------------------------------------


def anthropic_event(data: dict[str, Any]) -> bytes:
    """One server-sent event as Anthropic writes it: ``event: TYPE`` then ``data: JSON``."""
    return f"event: {data['type']}\ndata: {_json(data)}\n\n".encode()


def anthropic_stream(*events: dict[str, Any], ping: bool = True) -> Reply:
    """A streamed Messages reply: the events, one write each (a ``ping`` after the first)."""
    body = [anthropic_event(event) for event in events]
    if ping and body:
        body.insert(1, anthropic_event({"type": "ping"}))
    return lambda: StreamingResponse(_parts(body), media_type=SSE)


def anthropic_bytes(*events: dict[str, Any]) -> list[bytes]:
    """The events' bytes, for :func:`cut_stream`."""
    return [anthropic_event(event) for event in events]


def message_start(
    model: str = "claude-fake-1",
    *,
    input_tokens: int = 10,
    cache_read: int | None = None,
    cache_creation: int | None = None,
) -> dict[str, Any]:
    """``message_start``: the message with no content yet, and the input usage."""
    usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": 1}
    if cache_read is not None or cache_creation is not None:
        usage["cache_read_input_tokens"] = cache_read or 0
        usage["cache_creation_input_tokens"] = cache_creation or 0
    message = {
        "id": "msg_fake01",
        "type": "message",
        "role": "assistant",
        "content": [],
        "model": model,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return {"type": "message_start", "message": message}


def _block(index: int, start: dict[str, Any], deltas: Iterable[dict[str, Any]]) -> list[Any]:
    return [
        {"type": "content_block_start", "index": index, "content_block": start},
        *({"type": "content_block_delta", "index": index, "delta": d} for d in deltas),
        {"type": "content_block_stop", "index": index},
    ]


def text_block(index: int, *pieces: str) -> list[dict[str, Any]]:
    """A text block: start, a ``text_delta`` per piece, stop."""
    return _block(
        index, {"type": "text", "text": ""}, ({"type": "text_delta", "text": p} for p in pieces)
    )


def tool_use_block(index: int, call_id: str, name: str, *pieces: str) -> list[dict[str, Any]]:
    """A tool_use block: start (``input: {}``), an ``input_json_delta`` per piece, stop."""
    start = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
    deltas = ({"type": "input_json_delta", "partial_json": p} for p in pieces)
    return _block(index, start, deltas)


def thinking_block(index: int, *pieces: str, signature: str) -> list[dict[str, Any]]:
    """A thinking block: a ``thinking_delta`` per piece, then its ``signature_delta``."""
    deltas = [
        *({"type": "thinking_delta", "thinking": p} for p in pieces),
        {"type": "signature_delta", "signature": signature},
    ]
    return _block(index, {"type": "thinking", "thinking": ""}, deltas)


def redacted_thinking_block(index: int, data: str) -> list[dict[str, Any]]:
    """A redacted_thinking block: its encrypted ``data`` whole at the start, no deltas."""
    return _block(index, {"type": "redacted_thinking", "data": data}, [])


def message_delta(
    stop_reason: str = "end_turn", output_tokens: int = 5, *, thinking_tokens: int | None = None
) -> dict[str, Any]:
    """``message_delta``: the stop reason and the cumulative output usage."""
    usage: dict[str, Any] = {"output_tokens": output_tokens}
    if thinking_tokens is not None:
        usage["output_tokens_details"] = {"thinking_tokens": thinking_tokens}
    delta = {"stop_reason": stop_reason, "stop_sequence": None}
    return {"type": "message_delta", "delta": delta, "usage": usage}


MESSAGE_STOP: dict[str, Any] = {"type": "message_stop"}


def anthropic_text_turn(*pieces: str, model: str = "claude-fake-1") -> list[dict[str, Any]]:
    """A whole text answer's events."""
    return [message_start(model), *text_block(0, *pieces), message_delta(), MESSAGE_STOP]


def anthropic_tool_turn(call_id: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    """A whole turn that calls one tool, its arguments split in two pieces."""
    raw = _json(arguments)
    half = len(raw) // 2
    return [
        message_start(),
        *tool_use_block(0, call_id, name, raw[:half], raw[half:]),
        message_delta("tool_use"),
        MESSAGE_STOP,
    ]


def anthropic_turn(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    *,
    thinking: Sequence[str] = (),
    signature: str = "sig-fake",
    model: str = "claude-fake-1",
) -> Reply:
    """A whole streamed turn: thinking (if any, then its ``signature``), text (if any), then
    each call ``(id, name, argument pieces)`` as a ``tool_use`` block."""
    made: list[list[dict[str, Any]]] = []  # each block's events, its index its place here
    if thinking:
        made.append(thinking_block(len(made), *thinking, signature=signature))
    if text:
        made.append(text_block(len(made), *text))
    for call_id, name, pieces in calls:
        made.append(tool_use_block(len(made), call_id, name, *pieces))
    blocks = [event for block in made for event in block]
    stop = "tool_use" if calls else "end_turn"
    return anthropic_stream(message_start(model), *blocks, message_delta(stop), MESSAGE_STOP)


def anthropic_error(
    status: int, error_type: str, message: str, headers: dict[str, str] | None = None
) -> Reply:
    """Anthropic's error reply: ``{"type": "error", "error": {...}, "request_id"}``."""
    body = {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_fake01",
    }
    return lambda: JSONResponse(body, status_code=status, headers=headers)


def anthropic_error_event(error_type: str, message: str) -> dict[str, Any]:
    """An ``error`` event in a stream that already began (``overloaded_error``...)."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


# --- Gemini -----------------------------------------------------------------------


def gemini_chunk(
    *parts: dict[str, Any],
    finish_reason: str | None = None,
    usage: dict[str, int] | None = None,
    model_version: str = "gemini-fake-1",
    response_id: str = "resp-fake-01",
) -> dict[str, Any]:
    """One ``GenerateContentResponse`` of a stream (parts, maybe a finish reason and usage)."""
    candidate: dict[str, Any] = {"content": {"parts": list(parts), "role": "model"}, "index": 0}
    if finish_reason is not None:
        candidate["finishReason"] = finish_reason
    chunk: dict[str, Any] = {
        "candidates": [candidate],
        "modelVersion": model_version,
        "responseId": response_id,
    }
    if usage is not None:
        chunk["usageMetadata"] = usage
    return chunk


def gemini_usage(
    prompt: int, candidates: int, *, cached: int | None = None, thoughts: int | None = None
) -> dict[str, int]:
    """``usageMetadata`` as Gemini counts it (``candidatesTokenCount`` excludes thoughts)."""
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + (thoughts or 0),
    }
    if cached is not None:
        usage["cachedContentTokenCount"] = cached
    if thoughts is not None:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def gemini_event(data: dict[str, Any]) -> bytes:
    """One ``alt=sse`` event as Gemini writes it (``data: JSON`` and CRLF line ends)."""
    return f"data: {_json(data)}\r\n\r\n".encode()


def gemini_stream(*chunks: dict[str, Any]) -> Reply:
    """A streamed ``streamGenerateContent?alt=sse`` reply: one write per chunk."""
    body = [gemini_event(chunk) for chunk in chunks]
    return lambda: StreamingResponse(_parts(body), media_type=SSE)


def gemini_bytes(*chunks: dict[str, Any]) -> list[bytes]:
    """The chunks' bytes, for :func:`cut_stream`."""
    return [gemini_event(chunk) for chunk in chunks]


def gemini_turn(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str | None, str, dict[str, Any]]] = (),
    *,
    thinking: Sequence[str] = (),
    thought_signature: str | None = None,
    model_version: str = "gemini-fake-1",
) -> Reply:
    """A whole streamed turn: a chunk per thought piece and per text piece, then the calls
    ``(id or None, name, args)`` whole in one chunk (as Gemini sends them), which ends the
    turn with ``STOP`` and the usage; ``thought_signature`` (plain text, sent base64) goes on
    the first call, else on the last text piece."""
    chunks: list[list[dict[str, Any]]] = [[{"text": p, "thought": True}] for p in thinking]
    chunks += [[{"text": piece}] for piece in text]
    if calls:
        chunks.append([])
        for call_id, name, args in calls:
            call: dict[str, Any] = {"name": name, "args": args}
            if call_id is not None:
                call["id"] = call_id
            chunks[-1].append({"functionCall": call})
    if not chunks:
        chunks.append([{"text": ""}])
    if thought_signature is not None:
        chunks[-1][0]["thoughtSignature"] = signature(thought_signature)
    *head, last = chunks
    used = gemini_usage(10, 5, thoughts=3 if thinking else None)
    return gemini_stream(
        *(gemini_chunk(*parts, model_version=model_version) for parts in head),
        gemini_chunk(*last, finish_reason="STOP", usage=used, model_version=model_version),
    )


def signature(text: str) -> str:
    """A thought signature as the wire carries it: base64 of opaque bytes."""
    return base64.b64encode(text.encode()).decode()


def gemini_error(
    code: int,
    status: str,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    """Google's error reply: ``{"error": {"code", "message", "status", "details"?}}``."""
    error: dict[str, Any] = {"code": code, "message": message, "status": status}
    if details is not None:
        error["details"] = details
    return lambda: JSONResponse({"error": error}, status_code=code, headers=headers)


def retry_info(delay: str) -> dict[str, Any]:
    """The ``google.rpc.RetryInfo`` detail a 429 carries (``"retryDelay": "7s"``)."""
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": delay}


# --- OpenAI chat completions -----------------------------------------------------


def chat_chunk(
    delta: dict[str, Any], finish_reason: str | None = None, *, model: str = "gpt-fake-chat"
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` as OpenAI streams it (``usage`` null until the last)."""
    choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion.chunk",
        "created": 1_760_000_000,
        "model": model,
        "system_fingerprint": "fp_fake",
        "choices": [choice],
        "usage": None,
    }


def chat_stream(*chunks: dict[str, Any]) -> Reply:
    """A streamed chat completion: ``data: JSON`` per chunk, one write each, then ``[DONE]``."""
    body = [f"data: {_json(chunk)}\n\n".encode() for chunk in chunks]
    body.append(b"data: [DONE]\n\n")
    return lambda: StreamingResponse(_parts(body), media_type=SSE)


def chat_turn(
    text: Sequence[str] = (),
    calls: Sequence[tuple[str, str, Sequence[str]]] = (),
    *,
    model: str = "gpt-fake-chat",
    prompt_tokens: int = 10,
    completion_tokens: int = 5,
) -> Reply:
    """A whole streamed turn: the role, a ``content`` delta per text piece, each call
    ``(id, name, argument pieces)`` as ``tool_calls`` fragments (id and name first), the
    ``finish_reason``, then the usage chunk."""
    chunks = [chat_chunk({"role": "assistant", "content": ""}, model=model)]
    chunks += [chat_chunk({"content": piece}, model=model) for piece in text]
    for index, (call_id, name, pieces) in enumerate(calls):
        function = {"name": name, "arguments": ""}
        start = {"index": index, "id": call_id, "type": "function", "function": function}
        chunks.append(chat_chunk({"tool_calls": [start]}, model=model))
        for piece in pieces:
            more = {"index": index, "function": {"arguments": piece}}
            chunks.append(chat_chunk({"tool_calls": [more]}, model=model))
    chunks.append(chat_chunk({}, "tool_calls" if calls else "stop", model=model))
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }
    chunks.append({**chat_chunk({}, model=model), "choices": [], "usage": usage})
    return chat_stream(*chunks)
