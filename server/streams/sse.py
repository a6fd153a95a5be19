"""Server-sent events in the protocol's own format: ``/sse``'s frames and its response.

``SSEResponse`` sends a finished session's stream as one body, and any other
through :func:`~helix_agents.server.streams.sse_writer.write_sse` (heartbeats, one
writer, disconnects), the machine every ``/sse`` format shares.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import msgspec
from starlette.types import Receive, Scope, Send

from helix_agents.errors import HelixError
from helix_agents.log.streaming import EndedStream
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.server.edge import protocol_error
from helix_agents.server.streams.sse_writer import write_sse

__all__ = ["SSEResponse", "encode_sse"]

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
        self, events: AsyncIterator[TransportEvent], *, heartbeat_interval: float = 15.0
    ) -> None:
        self._events = events
        self._heartbeat_interval = heartbeat_interval

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        events = self._events
        if isinstance(events, EndedStream) and scope.get("method") != "HEAD":
            # Every item is at hand (the run had ended): one body, no tasks.
            body = b"".join([encode_sse(event) for event in events.items])
            with contextlib.suppress(OSError):  # the client went away
                await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        await write_sse(
            scope,
            receive,
            send,
            _frames(events),
            headers=_HEADERS,
            heartbeat_interval=self._heartbeat_interval,
            release=lambda: _close(events),
        )


async def _frames(events: AsyncIterator[TransportEvent]) -> AsyncIterator[bytes]:
    """The protocol's frames; a failure of the stream behind them is an ``error`` frame."""
    try:
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
