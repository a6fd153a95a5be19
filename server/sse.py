"""Server-sent events: framing protocol events, and an ASGI response that streams them.

``SSEResponse`` runs four tasks in one task group: one reads the event
stream into an outbox, one adds a ``:heartbeat`` comment every interval, one
sends what the outbox holds (all of it in one ``send``), one waits for the
client to disconnect. Whichever ends first cancels the others, so a
disconnect frees the tail behind the stream at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
from starlette.types import Receive, Scope, Send

from helix_agents import ChunkEvent, EndEvent, ErrorEvent, HelixError, TransportEvent
from helix_agents.streaming import EndedStream

from .edge import protocol_error

__all__ = ["HEARTBEAT", "SSEResponse", "encode_sse"]


HEARTBEAT = b":heartbeat\n\n"
"""The keep-alive comment."""

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


class _Outbox:
    """Frames waiting for the socket: appended without a task hop, sent in one ``send``.

    The producer appends each frame as the stream yields it and never awaits
    unless the outbox is full, so everything a burst delivers (a batch the
    store handed over at once) is queued before the writer runs, and goes out
    as one body message. ``limit`` bytes bound it: past that the producer
    waits for the writer to drain it (the socket's own flow control).
    """

    __slots__ = ("_drained", "_limit", "_ready", "closed", "frames", "size")

    def __init__(self, limit: int) -> None:
        self.frames: list[bytes] = []
        self.size = 0
        self.closed = False
        self._limit = limit
        self._ready = anyio.Event()
        self._drained: anyio.Event | None = None

    async def put(self, frame: bytes) -> None:
        """Queue ``frame``; wait only when the outbox is over its limit."""
        self.frames.append(frame)
        self.size += len(frame)
        self._ready.set()
        if self.size > self._limit:
            self._drained = anyio.Event()
            await self._drained.wait()

    def close(self) -> None:
        """No more frames: the writer sends what is queued and ends."""
        self.closed = True
        self._ready.set()

    async def take(self) -> bytes | None:
        """Everything queued, as one chunk; None once closed and empty."""
        while not self.frames:
            if self.closed:
                return None
            await self._ready.wait()
            self._ready = anyio.Event()
        body = b"".join(self.frames) if len(self.frames) > 1 else self.frames[0]
        self.frames = []
        self.size = 0
        if self._drained is not None:
            self._drained.set()
            self._drained = None
        return body


_OUTBOX_LIMIT = 256 * 1024  # bytes queued before the producer waits for the socket


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
        if scope.get("method") == "HEAD":
            # Headers only: a HEAD must not tail the log.
            aclose = getattr(self._events, "aclose", None)
            if aclose is not None:
                await aclose()
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        if isinstance(self._events, EndedStream):
            # Every item is at hand (the run had ended): one body, no tasks.
            body = b"".join([encode_sse(event) for event in self._events.items])
            with contextlib.suppress(OSError):  # the client went away
                await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                await send({"type": "http.response.body", "body": body, "more_body": False})
            return
        outbox = _Outbox(_OUTBOX_LIMIT)
        sent = {"start": False, "end": False}

        async def produce() -> None:
            try:
                async for event in self._events:
                    await outbox.put(encode_sse(event))
            except (HelixError, ValueError) as exc:
                # The stream behind us failed (a store or a remote): say so and
                # end; the client reconnects from its last id. The text is the
                # edge's (logged there), never the exception's: it may name files.
                error = protocol_error(exc, "stream").message
                await outbox.put(encode_sse(ErrorEvent(error=error, recoverable=True)))
            finally:
                outbox.close()
                aclose = getattr(self._events, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()

        async def heartbeat() -> None:
            while True:
                await anyio.sleep(self._heartbeat_interval)
                await outbox.put(HEARTBEAT)

        async def write(tg: Any) -> None:
            # The head goes out in the same turn of the loop as the frames the
            # stream had at hand (a catch-up), and the last frames with the
            # response's end: the server writes each pair in one syscall.
            await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
            sent["start"] = True
            while (body := await outbox.take()) is not None:
                last = outbox.closed and not outbox.frames
                await send({"type": "http.response.body", "body": body, "more_body": not last})
                if last:
                    sent["end"] = True
                    break
            tg.cancel_scope.cancel()  # the stream ended: stop the heartbeat and the listener

        async def disconnected(tg: Any) -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    tg.cancel_scope.cancel()
                    return

        client_gone = False
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(produce)
                tg.start_soon(heartbeat)
                tg.start_soon(write, tg)
                tg.start_soon(disconnected, tg)
        except* OSError:
            client_gone = True  # the socket went away under a send
        if sent["start"] and not sent["end"] and not client_gone:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
