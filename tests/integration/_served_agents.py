"""``helix-agents serve`` as a real subprocess, for the tests that talk to it over loopback.

:class:`ServedAgents` runs ``python -m helix_agents.server serve
tests.integration.remote_app:agents`` from the repository root, on a fixed
loopback port and a SQLite file, so it can be killed and started again on the
same address and store. Its output goes to a log file (a pipe nobody reads
would fill up and stall the server); :meth:`ServedAgents.output` shows its
end in failure messages. :func:`read_sse` reads a whole ``/sse`` stream with
raw httpx, for comparing what a server streams with what a client received.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
from anyio.abc import Process
from servers import closed_port

from helix_agents import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.transports.sse import SSEParser

__all__ = ["ROOT", "TARGET", "ServedAgents", "read_sse", "served"]

ROOT = Path(__file__).resolve().parents[2]
TARGET = "tests.integration.remote_app:agents"
STARTUP_TIMEOUT = 30  # seconds; generous, the machine is shared
STOP_TIMEOUT = 10


class ServedAgents:
    """One served process at a time, always on the same port and store file.

    Args:
        db: the SQLite file the server keeps its sessions in.
        log: where the server's stdout and stderr go (appended to across restarts).
        target: the ``MODULE:ATTR`` served.
        agents: the agent types its ``/health`` must list.
        env: extra environment variables for the server.
    """

    def __init__(
        self,
        db: Path,
        log: Path,
        *,
        target: str = TARGET,
        agents: Sequence[str] = ("researcher", "summarizer"),
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.db = db
        self.log = log
        self.target = target
        self.agents = sorted(agents)
        self.env = dict(env or {})
        self.port = closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process: Process | None = None
        self.starts = 0

    def output(self) -> str:
        """The end of the server's output, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-4000:]
        except OSError as exc:
            return f"(no server output: {exc})"

    async def start(self) -> None:
        """Start the server and wait (bounded) until ``/health`` answers with its agents."""
        assert self.process is None, "the server is already running"
        self.starts += 1
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        command = [
            sys.executable,
            "-m",
            "helix_agents.server",
            "serve",
            self.target,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--store",
            f"sqlite:///{self.db}",  # db is absolute: four slashes in all
        ]
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(command)}\n".encode())
            log.flush()
            self.process = await anyio.open_process(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env
            )
        with anyio.fail_after(STARTUP_TIMEOUT):
            await self._wait_healthy()

    async def _wait_healthy(self) -> None:
        assert self.process is not None
        delay = 0.02
        async with httpx.AsyncClient(timeout=2) as client:
            while True:
                if self.process.returncode is not None:
                    raise AssertionError(
                        f"the server exited with {self.process.returncode} before answering "
                        f"/health:\n{self.output()}"
                    )
                try:
                    response = await client.get(f"{self.url}/health")
                except httpx.TransportError:
                    # Not listening yet; polling is the only signal a subprocess gives.
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 0.2)
                    continue
                assert response.status_code == 200, response.text
                assert response.json() == {"status": "ok", "agents": self.agents}
                return

    async def kill(self) -> None:
        """SIGKILL the server and wait until it is gone."""
        process = self._take()
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(STOP_TIMEOUT):
            await process.wait()
        assert process.returncode == -signal.SIGKILL, process.returncode

    async def stop(self) -> int | None:
        """SIGTERM the server (SIGKILL if it lingers); its exit status, None if not running."""
        if self.process is None:
            return None
        process = self._take()
        if process.returncode is None:
            os.kill(process.pid, signal.SIGTERM)
            with anyio.move_on_after(STOP_TIMEOUT):
                await process.wait()
            if process.returncode is None:
                os.kill(process.pid, signal.SIGKILL)
                await process.wait()
        return process.returncode

    def _take(self) -> Process:
        process, self.process = self.process, None
        assert process is not None, "the server is not running"
        return process


@asynccontextmanager
async def served(db: Path, log: Path) -> AsyncIterator[ServedAgents]:
    """A started :class:`ServedAgents`, stopped on the way out whatever happened."""
    server = ServedAgents(db, log)
    try:
        await server.start()
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop()


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
