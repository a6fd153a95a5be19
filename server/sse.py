"""Server-sent events: framing protocol events, and an ASGI response that streams them.

``SSEResponse`` runs three tasks in one task group: one sends the frames of
the event stream, one sends a ``:heartbeat`` comment every interval, one waits
for the client to disconnect. Whichever ends first cancels the others, so a
disconnect frees the tail behind the stream at once.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
from starlette.types import Receive, Scope, Send

from helix_agents import ChunkEvent, EndEvent, ErrorEvent, HelixError, TransportEvent

__all__ = ["HEARTBEAT", "SSEResponse", "encode_sse"]

log = logging.getLogger("helix_agents.server")

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


class SSEResponse:
    """An ASGI response streaming protocol events as SSE, with heartbeats.

    Frames and heartbeats go through one bounded memory stream to a single
    writer, which sends whatever has queued up in one body message: a burst
    (a late client catching up on a long log) costs one ``send`` per batch,
    not per event, and frames never interleave.
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
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": _HEADERS,
            }
        )
        frames_in, frames_out = anyio.create_memory_object_stream[bytes](256)

        async def produce() -> None:
            try:
                async for event in self._events:
                    await frames_in.send(encode_sse(event))
            except (HelixError, ValueError) as exc:
                # The stream behind us failed (a store or a remote): say so and
                # end; the client reconnects from its last id.
                log.warning("stream failed: %s", exc)
                await frames_in.send(encode_sse(ErrorEvent(error=str(exc), recoverable=True)))
            finally:
                frames_in.close()
                aclose = getattr(self._events, "aclose", None)
                if aclose is not None:
                    with anyio.CancelScope(shield=True):
                        await aclose()

        async def heartbeat() -> None:
            while True:
                await anyio.sleep(self._heartbeat_interval)
                await frames_in.send(HEARTBEAT)

        async def write(tg: Any) -> None:
            async for frame in frames_out:
                parts = [frame]
                while True:
                    try:
                        parts.append(frames_out.receive_nowait())
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                await send(
                    {"type": "http.response.body", "body": b"".join(parts), "more_body": True}
                )
            tg.cancel_scope.cancel()  # the stream ended: stop the heartbeat and the listener

        async def disconnected(tg: Any) -> None:
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    tg.cancel_scope.cancel()
                    return

        client_gone = False
        try:
            with frames_out:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(produce)
                    tg.start_soon(heartbeat)
                    tg.start_soon(write, tg)
                    tg.start_soon(disconnected, tg)
        except* OSError:
            client_gone = True  # the socket went away under a send
        if not client_gone:
            with contextlib.suppress(OSError):
                await send({"type": "http.response.body", "body": b"", "more_body": False})
