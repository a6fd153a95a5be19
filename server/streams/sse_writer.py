"""Writing a server-sent-events response: the one machine behind every ``/sse`` stream.

``write_sse`` sends the frames an async iterator yields (already encoded), as
``/sse`` does in each of its formats. Four tasks in one task group: one reads
the frames into an outbox, one adds a ``:heartbeat`` comment every interval,
one sends what the outbox holds (all of it in one ``send``), one waits for the
client to disconnect. Whichever ends first cancels the others, so a
disconnect frees the tail behind the stream at once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
from starlette.types import Receive, Scope, Send

__all__ = ["HEARTBEAT", "write_sse"]

HEARTBEAT = b":heartbeat\n\n"
"""The keep-alive comment."""

Headers = Sequence[tuple[bytes, bytes]]


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

    def put_now(self, frame: bytes) -> None:
        """Queue ``frame`` without waiting (a last frame: the outbox closes next)."""
        self.frames.append(frame)
        self.size += len(frame)
        self._ready.set()

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


_OUTBOX_LIMIT = 16 * 1024  # bytes queued before the producer waits for the socket


async def write_sse(
    scope: Scope,
    receive: Receive,
    send: Send,
    frames: AsyncIterator[bytes],
    *,
    headers: Headers,
    heartbeat_interval: float,
    release: Callable[[], Awaitable[None]],
    ending: anyio.Event | None = None,
    farewell: bytes = b"",
) -> None:
    """Answer 200 with ``headers`` and stream ``frames`` until they end or the client leaves.

    ``release`` frees what is behind the frames (a tail of the log) and is
    always awaited, shielded, once the stream is over, also when it never
    began: a ``HEAD`` gets the headers only and never reads the log. The
    frames say how a failure of the stream behind them ends it (a frame of
    their own, or none); an exception they let through propagates, and the
    response is cut without its final empty body: the client sees a cut
    stream and reconnects from its last id.

    ``ending``, once set, stops the frames (a shutdown): ``farewell`` is sent
    after what is queued, and the response ends.
    """
    if scope.get("method") == "HEAD":
        with anyio.CancelScope(shield=True):
            await release()
        await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    outbox = _Outbox(_OUTBOX_LIMIT)
    sent = {"start": False, "end": False}

    producing = anyio.CancelScope()
    ended_early = False

    async def produce() -> None:
        try:
            with producing:
                async for frame in frames:
                    await outbox.put(frame)
        finally:
            if ended_early and farewell:
                outbox.put_now(farewell)
            outbox.close()
            with anyio.CancelScope(shield=True):
                aclose = getattr(frames, "aclose", None)
                if aclose is not None:
                    await aclose()
                await release()

    async def end_early(event: anyio.Event) -> None:
        nonlocal ended_early
        await event.wait()
        ended_early = True
        producing.cancel()

    async def heartbeat() -> None:
        while True:
            await anyio.sleep(heartbeat_interval)
            await outbox.put(HEARTBEAT)

    async def write(tg: Any) -> None:
        # The head goes out in the same turn of the loop as the frames the
        # stream had at hand (a catch-up), and the last frames with the
        # response's end: the server writes each pair in one syscall.
        await send({"type": "http.response.start", "status": 200, "headers": list(headers)})
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
            if ending is not None:
                tg.start_soon(end_early, ending)
    except* OSError:
        client_gone = True  # the socket went away under a send
    if sent["start"] and not sent["end"] and not client_gone:
        with contextlib.suppress(OSError):
            await send({"type": "http.response.body", "body": b"", "more_body": False})
