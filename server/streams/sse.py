"""Server-sent events in the protocol's own format: ``/sse``'s frames and its response.

``SSEResponse`` sends a finished session's stream in pages, and any other
through :func:`~helix_agents.server.streams.sse_writer.write_sse` (heartbeats, one
writer, disconnects), the machine every ``/sse`` format shares.
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator

import msgspec
from starlette.types import Receive, Scope, Send

from helix_agents.errors import HelixError
from helix_agents.log.streaming import EndedStream, PagedStream
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.server.edge import protocol_error
from helix_agents.server.streams.closing import SHUTDOWN_ERROR, OpenStreams
from helix_agents.server.streams.sse_writer import write_sse

__all__ = ["PAGE_BYTES", "SSEResponse", "encode_sse"]

PAGE_BYTES = 64 * 1024
"""Bytes of frames an ended stream hands the server at a time."""
CATCH_UP_BYTES = 16 * 1024
"""Bytes of frames a stream catching up on the log hands its writer at a time (the
writer's outbox holds as much: a reader that stops reading holds about one)."""

_encoder = msgspec.json.Encoder()

_HEADERS = [
    (b"content-type", b"text/event-stream; charset=utf-8"),
    (b"cache-control", b"no-cache"),
    (b"x-accel-buffering", b"no"),
]


def encode_sse(event: TransportEvent) -> bytes:
    """One protocol event as an SSE frame (``id:`` = the chunk's sequence)."""
    if isinstance(event, ChunkEvent):
        data = _encoder.encode({"chunk": event.chunk, "sequence": event.sequence})
        return b"id: %d\nevent: chunk\ndata: %s\n\n" % (event.sequence, data)
    if isinstance(event, EndEvent):
        data = _encoder.encode({"output": event.output, "state": event.state})
        return b"event: end\ndata: %s\n\n" % data
    if isinstance(event, ErrorEvent):
        data = _encoder.encode({"error": event.error, "recoverable": event.recoverable})
        return b"event: error\ndata: %s\n\n" % data
    raise TypeError(f"not a protocol event: {event!r}")  # pragma: no cover


class SSEResponse:
    """An ASGI response streaming protocol events as SSE, with heartbeats.

    Frames and heartbeats are queued in one outbox, without a task hop per
    frame, and a single writer sends whatever has queued up in one body
    message: a burst (a late client catching up on a long log, a batch of
    chunks committed together) costs one ``send``, not one per event, and
    frames never interleave.
    """

    def __init__(
        self,
        events: AsyncIterator[TransportEvent],
        *,
        heartbeat_interval: float = 15.0,
        open_streams: tuple[OpenStreams, str] | None = None,
    ) -> None:
        self._events = events
        self._heartbeat_interval = heartbeat_interval
        self._open_streams = open_streams
        """Where this stream is counted as open (a shutdown may end it), and its session."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        events = self._events
        if isinstance(events, EndedStream) and scope.get("method") != "HEAD":
            # Every item is at hand (the run had ended): no tasks, no heartbeat.
            with contextlib.suppress(OSError):  # the client went away
                await _send_ended(events, send)
            return
        with contextlib.ExitStack() as stack:
            ending = None
            if self._open_streams is not None:
                streams, session_id = self._open_streams
                ending = stack.enter_context(streams.track(session_id))
            await write_sse(
                scope,
                receive,
                send,
                _frames(events),
                headers=_HEADERS,
                heartbeat_interval=self._heartbeat_interval,
                release=lambda: _close(events),
                ending=ending,
                farewell=_FAREWELL,
            )


_FAREWELL = encode_sse(ErrorEvent(error=SHUTDOWN_ERROR, recoverable=True))


async def _send_ended(events: EndedStream, send: Send) -> None:
    """Send an ended stream's items in pages of about :data:`PAGE_BYTES`, each as it is taken.

    Each page is encoded when the one before it has been handed over, and
    ``send`` waits while the client is not taking them (uvicorn's flow
    control): a reader that stops reading holds one page and the items not
    yet sent, never the whole stream encoded; the items sent are let go.
    """
    pending = deque(events.items)
    events.items = []
    page: list[bytes] = []
    try:
        await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
        size = 0
        while pending:
            frame = encode_sse(pending.popleft())
            page.append(frame)
            size += len(frame)
            if size >= PAGE_BYTES or not pending:
                body = b"".join(page) if len(page) > 1 else page[0]
                page, size = [], 0
                more = bool(pending)
                await send({"type": "http.response.body", "body": body, "more_body": more})
    finally:
        # A client gone mid-stream: what was not sent goes now, not when a traceback
        # that holds this frame is collected.
        pending.clear()
        page.clear()


async def _frames(events: AsyncIterator[TransportEvent]) -> AsyncIterator[bytes]:
    """The protocol's frames; a failure of the stream behind them is an ``error`` frame.

    A :class:`~helix_agents.log.streaming.PagedStream` is taken a page at a time, and
    while it catches up on the log (its pages follow at once) its frames go out
    :data:`CATCH_UP_BYTES` at a time: a reader catching up on a long log costs a few
    operations a page and a ``send`` per body, not per item. Each page's items are
    let go once encoded; once the stream tails, each frame goes at once.
    """
    try:
        if isinstance(events, PagedStream):
            body: list[bytes] = []
            size = 0
            while (items := await events.page()) is not None:
                for event in items:
                    frame = encode_sse(event)
                    body.append(frame)
                    size += len(frame)
                items.clear()  # held by the stream's page too: let the events go now
                if body and (size >= CATCH_UP_BYTES or events.tailing):
                    joined = b"".join(body) if len(body) > 1 else body[0]
                    body, size = [], 0  # only the joined body is held while it waits
                    yield joined
            if body:
                yield b"".join(body)
            return
        async for event in events:
            yield encode_sse(event)
    except (HelixError, ValueError) as exc:
        # The stream behind us failed (a store or a remote): say so and end;
        # the client reconnects from its last id. The text is the edge's
        # (logged there), never the exception's: it may name files.
        error = protocol_error(exc, "stream").message
        yield encode_sse(ErrorEvent(error=error, recoverable=True))


async def _close(events: AsyncIterator[TransportEvent]) -> None:
    aclose = getattr(events, "aclose", None)
    if aclose is not None:
        await aclose()
