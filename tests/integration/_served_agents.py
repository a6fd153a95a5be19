"""The remote test app served by a real ``helix-agents serve``, and a raw ``/sse`` reader.

:class:`ServedAgents` serves ``tests.integration.remote_app:agents`` (a
:class:`ServeProcess` on a fixed port and store, so it can be killed and
started again on the same address). :func:`read_sse` reads a whole ``/sse``
stream with raw httpx, for comparing what a server streams with what a client
received.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
from _serve_process import ROOT, ServeProcess

from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.transports.sse import SSEParser
from tests.integration._durable_kit import Runtime, WorkerProcess

__all__ = ["ROOT", "TARGET", "ServedAgents", "read_sse", "served"]

TARGET = "tests.integration.remote_app:agents"


class ServedAgents(ServeProcess):
    """:class:`ServeProcess` of the remote test app, on a fixed port and store across restarts.

    Args:
        db: the SQLite file the server keeps its sessions in.
        log: where the server's stdout and stderr go (appended to across restarts).
        target: the ``MODULE:ATTR`` served.
        agents: the agent types its ``/health`` must list.
        env: extra environment variables for the server.
        runtime: the runtime it serves on (``tests/integration/_durable_kit.py``;
            default: the built-in one); ``serve --temporal`` gets a worker process.
    """

    def __init__(
        self,
        db: Path,
        log: Path,
        *,
        target: str = TARGET,
        agents: Sequence[str] = ("researcher", "summarizer"),
        env: Mapping[str, str] | None = None,
        runtime: Runtime | None = None,
    ) -> None:
        args = runtime.serve_args(db.parent) if runtime is not None else ()
        super().__init__(db.parent, target, *args, env=env, db=db, log=log, agents=agents)
        self.worker: WorkerProcess | None = None
        if runtime is not None:
            self.worker = runtime.worker(log.with_suffix(".worker.log"), target, db)

    async def start(self) -> None:
        """Start its worker (if its runtime has one), then the server."""
        if self.worker is not None and self.worker.process is None:
            await self.worker.start()
        await super().start()

    async def stop_worker(self) -> None:
        """Stop its worker process, if it has one (the server's store is then its own)."""
        if self.worker is not None:
            await self.worker.stop()

    def output(self) -> str:
        """The end of the server's output (and its worker's), for failure messages."""
        worker = f"\n--- worker:\n{self.worker.output()}" if self.worker is not None else ""
        return super().output() + worker


@asynccontextmanager
async def served(
    db: Path, log: Path, runtime: Runtime | None = None
) -> AsyncIterator[ServedAgents]:
    """A started :class:`ServedAgents`, stopped (SIGTERM) on the way out whatever happened."""
    server = ServedAgents(db, log, runtime=runtime)
    try:
        await server.start()
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await server.terminate()
            await server.stop_worker()


_DECODERS: dict[str, Any] = {
    "chunk": msgspec.json.Decoder(ChunkEvent),
    "end": msgspec.json.Decoder(EndEvent),
    "error": msgspec.json.Decoder(ErrorEvent),
}


async def read_sse(
    client: httpx.AsyncClient,
    url: str,
    session_id: str,
    from_sequence: int | None = 0,
    *,
    headers: dict[str, str] | None = None,
) -> list[TransportEvent]:
    """``GET /sse`` with raw httpx until the server ends the stream; its events, in order.

    ``from_sequence=None`` sends no ``fromSequence`` (``headers`` may then carry
    ``Last-Event-ID``). Checks on the way that every chunk's ``id:`` is its sequence.
    """
    events: list[TransportEvent] = []
    parser = SSEParser()
    params = {"sessionId": session_id}
    if from_sequence is not None:
        params["fromSequence"] = str(from_sequence)
    async with client.stream("GET", f"{url}/sse", params=params, headers=headers) as response:
        assert response.status_code == 200, await response.aread()
        assert response.headers["content-type"].startswith("text/event-stream")
        async for data in response.aiter_bytes():
            for message in parser.feed(data):
                event = _DECODERS[message.event].decode(message.data)
                if isinstance(event, ChunkEvent):
                    assert message.id == str(event.sequence), message
                events.append(event)
    return events
