"""``helix-agents serve`` as a subprocess with any arguments: for its limits and shutdown tests.

Unlike ``_served_agents.ServedAgents`` (one fixed target on one fixed port,
restarted in place), :class:`ServeProcess` takes the target, the flags, the
environment and, optionally, an open-file limit the child sets on itself
(soft and hard) before it starts serving. Output goes to a log file.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
from anyio.abc import Process
from servers import closed_port

__all__ = ["ROOT", "ServeProcess"]

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30  # seconds; generous, the machine is shared

_WITH_NOFILE = (
    "import resource, sys\n"
    "limit = int(sys.argv.pop(1))\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))\n"
    "from helix_agents.server.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


class ServeProcess:
    """One ``helix-agents serve TARGET --port P --store sqlite:///DB ARGS...`` process."""

    def __init__(
        self,
        directory: Path,
        target: str,
        *args: str,
        env: dict[str, str] | None = None,
        nofile: int | None = None,
        port: int | None = None,
    ) -> None:
        self.db = directory / "serve.db"
        self.log = directory / "serve.log"
        self.port = port or closed_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.target = target
        self.args = args
        self.env = env or {}
        self.nofile = nofile
        self.process: Process | None = None

    def output(self) -> str:
        """The end of the server's output, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError as exc:
            return f"(no server output: {exc})"

    async def start(self) -> None:
        """Start it and wait (bounded) until ``/health`` answers."""
        assert self.process is None
        serve = ["serve", self.target, "--host", "127.0.0.1", "--port", str(self.port)]
        serve += ["--store", f"sqlite:///{self.db}", *self.args]
        if self.nofile is None:
            command = [sys.executable, "-m", "helix_agents.server", *serve]
        else:
            command = [sys.executable, "-c", _WITH_NOFILE, str(self.nofile), *serve]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log.open("ab") as log:
            log.write(f"--- {' '.join(serve)}\n".encode())
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
                    raise AssertionError(f"the server exited early:\n{self.output()}")
                try:
                    response = await client.get(f"{self.url}/health")
                except httpx.TransportError:
                    # Not listening yet; polling is the only signal a subprocess gives.
                    await anyio.sleep(delay)
                    delay = min(delay * 2, 0.2)
                    continue
                assert response.status_code == 200, response.text
                return

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the server."""
        assert self.process is not None
        os.kill(self.process.pid, sig)

    async def wait(self) -> int:
        """Wait for the server to exit; its exit status (negative: killed by that signal)."""
        assert self.process is not None
        code = await self.process.wait()
        self.process = None
        return code

    async def stop(self) -> None:
        """SIGKILL it if it still runs (teardown), and wait."""
        if self.process is None:
            return
        if self.process.returncode is None:
            os.kill(self.process.pid, signal.SIGKILL)
        await self.process.wait()
        self.process = None
