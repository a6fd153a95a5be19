"""A Temporal dev server for the tests: ``temporal server start-dev`` on loopback, in memory.

One per test session (the ``temporal_dev`` fixture in ``conftest.py``); each
test uses a task queue of its own, so tests never share workers. Stopped by
its PID at the end.
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from pathlib import Path

from helix_agents.temporal import DevServer

__all__ = ["TemporalDev", "fresh_task_queue"]

_queues = itertools.count(1)


def fresh_task_queue() -> str:
    """A task queue no other test of this run uses."""
    return f"q{os.getpid()}-{next(_queues)}"


class TemporalDev:
    """A running dev server: ``address`` is its frontend (``127.0.0.1:PORT``)."""

    def __init__(self, directory: Path) -> None:
        self._server = DevServer(log_path=directory / "temporal.log")
        self.address = self._server.address
        self.log_path = directory / "temporal.log"

    def start(self, timeout: float = 60.0) -> None:
        """Start it and wait until its frontend accepts connections."""
        self._server.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self._server.port), timeout=1):
                    time.sleep(0.5)  # the default namespace is registered a moment later
                    return
            except OSError:
                time.sleep(0.1)
        self._server.stop()
        raise RuntimeError(f"temporal dev server did not start: see {self.log_path}")

    def stop(self) -> None:
        """Stop it by its PID."""
        self._server.stop()
