"""``helix-agents serve`` as a real subprocess, for the tests that talk to it over loopback.

:class:`ServeProcess` runs ``python -m helix_agents.server serve TARGET``
from the repository root on a loopback port and a SQLite file, with any
flags, environment and, optionally, an open-file limit the child sets on
itself (soft and hard) before it serves. It can be killed and started again
on the same address and store. Its output goes to a log file (a pipe nobody
reads would fill up and stall the server); :meth:`ServeProcess.output` shows
its end in failure messages.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import httpx
from anyio.abc import Process
from servers import listen_port

__all__ = ["ROOT", "ServeProcess"]

ROOT = Path(__file__).resolve().parents[2]
STARTUP_TIMEOUT = 30  # seconds; generous, the machine is shared
STOP_TIMEOUT = 10

_WITH_NOFILE = (
    "import resource, sys\n"
    "limit = int(sys.argv.pop(1))\n"
    "resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))\n"
    "from helix_agents.server.cli.main import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


class ServeProcess:
    """One ``helix-agents serve TARGET --port P --store sqlite:///DB ARGS...`` process at a time.

    Args:
        directory: where ``serve.db`` and ``serve.log`` go (unless ``db``/``log`` say).
        target: the ``MODULE:ATTR`` served; ``args``: more ``serve`` flags.
        env: extra environment variables for the server.
        nofile: an open-file limit the server sets on itself first.
        port: the port (default: a free one, kept across restarts).
        agents: the agent types its ``/health`` must list (None: not checked).
    """

    def __init__(
        self,
        directory: Path,
        target: str,
        *args: str,
        env: Mapping[str, str] | None = None,
        nofile: int | None = None,
        port: int | None = None,
        db: Path | None = None,
        log: Path | None = None,
        agents: Sequence[str] | None = None,
    ) -> None:
        self.db = db or directory / "serve.db"
        self.log = log or directory / "serve.log"
        self.port = port or listen_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.target = target
        self.args = args
        self.env = dict(env or {})
        self.nofile = nofile
        self.agents = sorted(agents) if agents is not None else None
        self.process: Process | None = None
        self.starts = 0

    def output(self) -> str:
        """The end of the server's output, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError as exc:
            return f"(no server output: {exc})"

    async def start(self) -> None:
        """Start it and wait (bounded) until ``/health`` answers (with its agents)."""
        assert self.process is None, "the server is already running"
        self.starts += 1
        serve = ["serve", self.target, "--host", "127.0.0.1", "--port", str(self.port)]
        serve += ["--store", f"sqlite:///{self.db}", *self.args]  # db is absolute
        if self.nofile is None:
            command = [sys.executable, "-m", "helix_agents.server", *serve]
        else:
            command = [sys.executable, "-c", _WITH_NOFILE, str(self.nofile), *serve]
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with self.log.open("ab") as log:
            log.write(f"--- start {self.starts}: {' '.join(serve)}\n".encode())
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
                if self.agents is not None:
                    assert response.json() == {"status": "ok", "agents": self.agents}
                return

    def signal(self, sig: signal.Signals) -> None:
        """Send ``sig`` to the server."""
        assert self.process is not None
        os.kill(self.process.pid, sig)

    async def wait(self) -> int:
        """Wait for the server to exit; its exit status (negative: killed by that signal)."""
        process = self._take()
        return await process.wait()

    async def kill(self) -> None:
        """SIGKILL the server and wait until it is gone."""
        process = self._take()
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(STOP_TIMEOUT):
            await process.wait()
        assert process.returncode == -signal.SIGKILL, process.returncode

    async def terminate(self) -> int | None:
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

    async def stop(self) -> None:
        """Teardown: SIGKILL it if it still runs, and wait."""
        if self.process is None:
            return
        process = self._take()
        if process.returncode is None:
            os.kill(process.pid, signal.SIGKILL)
        await process.wait()

    def _take(self) -> Process:
        process, self.process = self.process, None
        assert process is not None, "the server is not running"
        return process
