"""Server subprocesses for the benchmarks, and what /proc says about them."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

BENCH = Path(__file__).resolve().parent
SERVED = BENCH / "served"
"""The programs the benchmarks serve (agent modules, the A2A and MCP servers)."""
_TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    """User + system CPU the process has used (all its threads), in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


def rss_bytes(pid: int) -> int:
    """The process's resident memory."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def open_fds(pid: int) -> int:
    """How many descriptors the process holds open."""
    return len(os.listdir(f"/proc/{pid}/fd"))


def _wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited: {log.read_text()[-2000:]}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"server did not listen on {port}: {log.read_text()[-2000:]}")


@contextlib.contextmanager
def server_process(args: list[str], port: int, log: Path) -> Iterator[int]:
    """Run ``python args...`` from ``bench/served/`` until it listens on ``port``; yield its pid.

    Its output goes to ``log``; it is stopped (SIGTERM, then SIGKILL) on leaving.
    """
    env = dict(os.environ, PYTHONPATH=str(SERVED))
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=SERVED,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            _wait_listening(port, process, log)
            yield process.pid
        finally:
            process.terminate()
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def helix_serve(store_url: str, port: int, *, loop: str | None = None, target: str) -> list[str]:
    """The ``helix-agents serve`` command line for ``target`` (``MODULE:ATTR`` in ``bench/``)."""
    args = ["-m", "helix_agents.server", "serve", target, "--store", store_url]
    args += ["--host", "127.0.0.1", "--port", str(port), "--grace", "1"]
    if loop is not None:
        args += ["--loop", loop]
    return args
