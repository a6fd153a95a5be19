"""Front-end streams: ``/sse?format=ai-sdk`` and ``/sse?format=ag-ui``, projected from the log.

Both are projections of the session's protocol stream (its chunks, then
``end`` or ``error``), so they hold the whole delegation tree and resume like
``/sse``: a frame's ``id:`` is the log sequence of the chunk it comes from
(only the last frame of a chunk carries it), and ``Last-Event-ID: N`` (or
``fromSequence=N``) yields the frames of the chunks after N, exactly once. A
resumed stream replays the log up to N without sending it, to know what was
open at N, and starts with a short prelude that opens it again for a fresh
reader (``specs/streams.md``).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Literal, Protocol

import anyio
import msgspec
from starlette.types import Receive, Scope, Send

from helix_agents.errors import AgentServerError, HelixError
from helix_agents.events import Chunk
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.server.streams.ag_ui import AG_UI_HEADERS, AgUiProjector
from helix_agents.server.streams.ai_sdk import AI_SDK_HEADERS, AiSdkProjector
from helix_agents.server.streams.sse_writer import write_sse
from helix_agents.server.streams.tree import Frame

__all__ = ["FORMATS", "Projector", "ProjectedStreamResponse", "project", "stream_format"]

log = logging.getLogger("helix_agents.server")

StreamFormat = Literal["ai-sdk", "ag-ui"]

FORMATS: tuple[str, ...] = ("helix", "ai-sdk", "ag-ui")
"""The values of ``/sse``'s ``format`` (``helix``, the default, is the protocol's own stream)."""

_DONE = b"data: [DONE]\n\n"
_encoder = msgspec.json.Encoder()


class Projector(Protocol):
    """Turns a session's protocol stream into a front-end protocol's frames."""

    def opening(self) -> list[Frame]:
        """The frames that begin the stream."""
        ...

    def reopen(self) -> list[Frame]:
        """The frames that begin a resumed stream, given the state at the resume point."""
        ...

    def chunk(self, chunk: Chunk, sequence: int) -> list[Frame]:
        """The frames of one chunk (the last one carries ``sequence``)."""
        ...

    def end(self, event: EndEvent | ErrorEvent) -> list[Frame]:
        """The frames that end the stream."""
        ...

    def begin(self) -> list[Frame]:
        """The frames that begin a new run at the resume point (what came before is not shown)."""
        ...

    @property
    def paused(self) -> bool:
        """True once the tree waits for people (after the root's ``input_required``)."""
        ...


def stream_format(value: str | None) -> StreamFormat | None:
    """``/sse``'s ``format`` parameter: a projection, or None for the protocol's own stream."""
    if value is None or value == "helix":
        return None
    if value == "ai-sdk":
        return "ai-sdk"
    if value == "ag-ui":
        return "ag-ui"
    raise AgentServerError(
        "INVALID_REQUEST", f"format must be one of {', '.join(FORMATS)}, not {value!r}"
    )


def projector_for(fmt: StreamFormat, session_id: str, run_id: str | None = None) -> Projector:
    """A fresh projector of ``fmt`` for the stream of ``session_id``."""
    if fmt == "ai-sdk":
        return AiSdkProjector(session_id, run_id)
    return AgUiProjector(session_id, run_id)


async def project(
    events: AsyncIterator[TransportEvent],
    projector: Projector,
    from_sequence: int = 0,
    *,
    one_run: bool = False,
) -> AsyncIterator[Frame]:
    """The frames of ``events`` (a stream read from sequence 0) after ``from_sequence``.

    Chunks up to ``from_sequence`` only update the projector; before the first
    frame after them comes the projector's ``reopen`` prelude. With
    ``one_run``, what follows ``from_sequence`` is a new run: the prelude is
    the projector's ``begin``, and the frames stop when the tree pauses.
    """
    resumed = from_sequence > 0
    opening = projector.opening()
    if not resumed:
        for frame in opening:
            yield frame
    try:
        async for event in events:
            if isinstance(event, ChunkEvent):
                if event.sequence <= from_sequence:
                    projector.chunk(event.chunk, event.sequence)
                    continue
                if resumed:
                    resumed = False
                    for frame in projector.begin() if one_run else projector.reopen():
                        yield frame
                for frame in projector.chunk(event.chunk, event.sequence):
                    yield frame
                if one_run and projector.paused:
                    return
            else:
                if resumed:
                    for frame in projector.begin() if one_run else projector.reopen():
                        yield frame
                for frame in projector.end(event):
                    yield frame
                return
    finally:
        aclose = getattr(events, "aclose", None)
        if aclose is not None:
            with anyio.CancelScope(shield=True):
                await aclose()


def encode_frame(frame: Frame) -> bytes:
    """One frame as SSE: ``id:`` when it ends a chunk, then its JSON as ``data:``."""
    data = _encoder.encode(frame.data)
    if frame.sequence is not None:
        return b"id: %d\ndata: %s\n\n" % (frame.sequence, data)
    return b"data: %s\n\n" % data


class ProjectedStreamResponse:
    """An ASGI response streaming a session in a front-end format, with heartbeats.

    Like ``/sse``'s response: one writer sends whatever frames have queued up
    in one body message; a heartbeat comment goes out every interval; a client
    disconnect, or the end of the stream, stops the others. With ``run_id``
    (a run a client asked for: the AG-UI run id, the AI SDK message id), the
    frames after ``from_sequence`` are that run, under that id, and stop when
    the tree pauses.
    """

    def __init__(
        self,
        fmt: StreamFormat,
        session_id: str,
        events: AsyncIterator[TransportEvent],
        from_sequence: int = 0,
        *,
        run_id: str | None = None,
        heartbeat_interval: float = 15.0,
    ) -> None:
        self.format = fmt
        projector = projector_for(fmt, session_id, run_id)
        one_run = run_id is not None
        self._frames = project(events, projector, from_sequence, one_run=one_run)
        self._events = events
        self._headers = AI_SDK_HEADERS if fmt == "ai-sdk" else AG_UI_HEADERS
        self._heartbeat_interval = heartbeat_interval

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await write_sse(
            scope,
            receive,
            send,
            self._encoded(),
            headers=self._headers,
            heartbeat_interval=self._heartbeat_interval,
            release=self._release,
        )

    async def _encoded(self) -> AsyncIterator[bytes]:
        """The frames as SSE; a failure of the stream behind them ends it without an end."""
        try:
            async for frame in self._frames:
                yield encode_frame(frame)
        except (HelixError, ValueError) as exc:
            # The client reconnects from its last id.
            log.warning("stream failed: %s", exc)
            return
        if self.format == "ai-sdk":
            yield _DONE

    async def _release(self) -> None:
        """Close the projection (it closes the stream it read) and the stream, if never read."""
        await self._frames.aclose()  # type: ignore[attr-defined]
        aclose = getattr(self._events, "aclose", None)
        if aclose is not None:
            await aclose()
