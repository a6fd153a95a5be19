"""A fake of OpenAI's Responses API (``POST /v1/responses``) for tests, on real uvicorn.

:class:`Turn` builds one streamed response the way OpenAI's API reference
documents it: ``response.created``, ``response.in_progress``, then per output
item ``response.output_item.added``, its parts and deltas
(``response.reasoning_summary_text.delta``, ``response.output_text.delta``,
``response.function_call_arguments.delta``...), ``response.output_item.done``,
and ``response.completed`` with the usage, each as ``event: TYPE`` and
``data: JSON`` with a growing ``sequence_number``. Every event is checked
against the official ``openai`` SDK's own model of it (its types are generated
from OpenAI's OpenAPI spec): a fake that drifts from the wire format fails
here, not in the adapter's tests.

:class:`FakeResponses` plays replies in order (the last one repeats), records
each request's JSON body and headers, and the client address of each request
(so a test counts the TCP connections the adapter opened).
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import uvicorn
from openai.types.responses import Response as SdkResponse, ResponseStreamEvent
from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

__all__ = ["FakeResponses", "Recorded", "Turn", "error_reply", "serve_in_thread", "usage"]

_EVENT = TypeAdapter(ResponseStreamEvent)
_RESPONSE = TypeAdapter(SdkResponse)

Reply = Callable[[], Response]


def usage(
    input_tokens: int = 10, output_tokens: int = 5, *, cached: int = 0, reasoning: int = 0
) -> dict[str, Any]:
    """A ``usage`` object as ``response.completed`` carries it."""
    return {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": input_tokens + output_tokens,
    }


class Turn:
    """One streamed response, built item by item; :meth:`reply` serves it."""

    def __init__(self, model: str = "gpt-fake-2025", response_id: str = "resp_1") -> None:
        self.model = model
        self.id = response_id
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []
        self._emit("response.created", response=self._response("in_progress", []))
        self._emit("response.in_progress", response=self._response("in_progress", []))

    def _emit(self, kind: str, **fields: Any) -> None:
        event = {"type": kind, "sequence_number": len(self.events), **fields}
        _EVENT.validate_python(event)  # the SDK's model of this event accepts it
        self.events.append(event)

    def _response(self, status: str, output: list[dict[str, Any]], **more: Any) -> dict[str, Any]:
        response = {
            "id": self.id,
            "object": "response",
            "created_at": 1_760_000_000,
            "status": status,
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "error": None,
            "incomplete_details": None,
            "usage": None,
            **more,
        }
        _RESPONSE.validate_python(response)
        return response

    def reasoning(
        self, pieces: list[str], *, encrypted: str = "gAAAA-opaque", item_id: str = "rs_1"
    ) -> Turn:
        """A reasoning item: its summary streamed in ``pieces``, its encrypted content at done."""
        index = len(self.output)
        where = {"item_id": item_id, "output_index": index, "summary_index": 0}
        added = {"id": item_id, "type": "reasoning", "summary": []}
        self._emit("response.output_item.added", output_index=index, item=added)
        self._emit("response.reasoning_summary_part.added", **where, part=_summary(""))
        for piece in pieces:
            self._emit("response.reasoning_summary_text.delta", **where, delta=piece)
        text = "".join(pieces)
        self._emit("response.reasoning_summary_text.done", **where, text=text)
        self._emit("response.reasoning_summary_part.done", **where, part=_summary(text))
        done = {**added, "summary": [_summary(text)], "encrypted_content": encrypted}
        self._emit("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def message(self, pieces: list[str], *, item_id: str = "msg_1") -> Turn:
        """An assistant message whose text streams in ``pieces``."""
        index = len(self.output)
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress"}
        self._emit("response.output_item.added", output_index=index, item={**item, "content": []})
        self._emit("response.content_part.added", **where, part=_text(""))
        for piece in pieces:
            self._emit("response.output_text.delta", **where, delta=piece, logprobs=[])
        text = "".join(pieces)
        self._emit("response.output_text.done", **where, text=text, logprobs=[])
        self._emit("response.content_part.done", **where, part=_text(text))
        done = {**item, "status": "completed", "content": [_text(text)]}
        self._emit("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def refusal(self, text: str, *, item_id: str = "msg_r") -> Turn:
        """An assistant message that is a refusal."""
        index = len(self.output)
        where = {"item_id": item_id, "output_index": index, "content_index": 0}
        item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress"}
        self._emit("response.output_item.added", output_index=index, item={**item, "content": []})
        self._emit("response.refusal.delta", **where, delta=text)
        self._emit("response.refusal.done", **where, refusal=text)
        part = {"type": "refusal", "refusal": text}
        done = {**item, "status": "completed", "content": [part]}
        self._emit("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def call(
        self, call_id: str, name: str, pieces: list[str], *, item_id: str | None = None
    ) -> Turn:
        """A function call whose JSON arguments stream in ``pieces``."""
        index = len(self.output)
        item_id = item_id or f"fc_{call_id}"
        item = {
            "id": item_id,
            "type": "function_call",
            "call_id": call_id,
            "name": name,
            "arguments": "",
            "status": "in_progress",
        }
        self._emit("response.output_item.added", output_index=index, item=item)
        where = {"item_id": item_id, "output_index": index}
        for piece in pieces:
            self._emit("response.function_call_arguments.delta", **where, delta=piece)
        arguments = "".join(pieces)
        self._emit("response.function_call_arguments.done", **where, arguments=arguments, name=name)
        done = {**item, "arguments": arguments, "status": "completed"}
        self._emit("response.output_item.done", output_index=index, item=done)
        self.output.append(done)
        return self

    def completed(self, used: dict[str, Any] | None = None) -> Turn:
        """End with ``response.completed``: the whole output and the usage."""
        response = self._response("completed", self.output, usage=used or usage())
        self._emit("response.completed", response=response)
        return self

    def incomplete(self, reason: str, used: dict[str, Any] | None = None) -> Turn:
        """End with ``response.incomplete`` (``max_output_tokens``, ``content_filter``)."""
        response = self._response(
            "incomplete",
            self.output,
            usage=used or usage(),
            incomplete_details={"reason": reason},
        )
        self._emit("response.incomplete", response=response)
        return self

    def failed(self, code: str, message: str) -> Turn:
        """End with ``response.failed`` carrying ``{code, message}``."""
        error = {"code": code, "message": message}
        self._emit("response.failed", response=self._response("failed", self.output, error=error))
        return self

    def error(self, code: str | None, message: str) -> Turn:
        """An ``error`` event (the stream's own failure)."""
        self._emit("error", code=code, message=message, param=None)
        return self

    def body(self) -> bytes:
        """The event stream as bytes: ``event:`` and ``data:`` per event."""
        return b"".join(
            f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()
            for event in self.events
        )

    def reply(self, *, piece: int = 0, cut_after: int | None = None) -> Reply:
        """Serve the stream (in ``piece``-byte writes if given; only the first ``cut_after``
        events, then the connection closes, if given)."""
        events = self.events if cut_after is None else self.events[:cut_after]
        body = b"".join(
            f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode() for event in events
        )

        async def parts() -> AsyncIterator[bytes]:
            if not piece:
                yield body
                return
            for start in range(0, len(body), piece):
                yield body[start : start + piece]
                await anyio.lowlevel.checkpoint()

        return lambda: StreamingResponse(parts(), media_type="text/event-stream")


def _summary(text: str) -> dict[str, Any]:
    return {"type": "summary_text", "text": text}


def _text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": []}


def error_reply(
    status: int,
    message: str,
    *,
    code: str | None = None,
    kind: str = "invalid_request_error",
    headers: dict[str, str] | None = None,
) -> Reply:
    """An HTTP error in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return lambda: JSONResponse(body, status_code=status, headers=headers)


@dataclass
class Recorded:
    """One request the fake received: its JSON body, its headers, the client's address."""

    body: dict[str, Any]
    headers: dict[str, str]
    client: tuple[str, int] | None


@dataclass
class FakeResponses:
    """A scripted ``POST /v1/responses``: ``replies`` in order, the last one repeating."""

    replies: list[Reply] = field(default_factory=list)
    answer: Callable[[dict[str, Any]], Response] | None = None
    """Instead of ``replies``: the reply to a request's JSON body."""
    requests: list[Recorded] = field(default_factory=list)
    delay: float = 0.0
    """Seconds each reply waits before it starts (a slow model)."""
    in_flight: int = 0
    most_in_flight: int = 0

    def app(self) -> Starlette:
        """The ASGI app to serve."""
        return Starlette(routes=[Route("/v1/responses", self._respond, methods=["POST"])])

    async def _respond(self, request: Request) -> Response:
        client = (request.client.host, request.client.port) if request.client else None
        body = await request.json()
        self.requests.append(Recorded(body, dict(request.headers), client))
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.delay:
                await anyio.sleep(self.delay)  # a model thinking: the calls overlap here
            if self.answer is not None:
                return self.answer(body)
            return self.replies[min(len(self.requests), len(self.replies)) - 1]()
        finally:
            self.in_flight -= 1

    @property
    def connections(self) -> int:
        """How many TCP connections the requests came on (distinct client addresses)."""
        return len({recorded.client for recorded in self.requests})


class _Uvicorn(uvicorn.Server):
    """uvicorn that says, through a ``threading.Event``, when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield  # leave SIGINT to the test runner

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        finally:
            self.ready.set()


@contextlib.contextmanager
def serve_in_thread(app: Starlette) -> Iterator[str]:
    """Serve ``app`` on uvicorn in a thread (for synchronous callers: ``run_sync``); its URL."""
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    server = _Uvicorn(config)
    thread = threading.Thread(target=server.run, name="fake-responses")
    thread.start()
    try:
        if not server.ready.wait(10) or not server.started:
            raise RuntimeError("uvicorn did not start")
        host, port = server.servers[0].sockets[0].getsockname()[:2]
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
