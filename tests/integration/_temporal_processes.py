"""``helix-agents worker`` as a real subprocess, for the Temporal tests that kill workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
from anyio.abc import Process

from tests.integration._serve_process import ROOT

__all__ = ["WorkerProcess"]

READY = b"helix-agents: worker for"
STARTUP_TIMEOUT = 60


class WorkerProcess:
    """One ``helix-agents worker TARGET --temporal ADDR --store sqlite:///DB ...`` process.

    Args:
        log: where its output goes (also how its readiness line is seen).
        target: the ``MODULE:ATTR`` it runs; ``args``: more flags.
        env: extra environment variables.
    """

    def __init__(
        self,
        log: Path,
        target: str,
        *,
        address: str,
        db: Path,
        task_queue: str,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        self.log = log
        self.command = [
            sys.executable,
            "-m",
            "helix_agents.server",
            "worker",
            target,
            "--temporal",
            address,
            "--store",
            f"sqlite:///{db}",
            "--task-queue",
            task_queue,
            *args,
        ]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.process: Process | None = None

    @property
    def pid(self) -> int:
        """Its process id."""
        assert self.process is not None
        return self.process.pid

    def output(self) -> str:
        """The end of its output, for failure messages."""
        try:
            return self.log.read_text(errors="replace")[-6000:]
        except OSError as exc:
            return f"(no output: {exc})"

    async def start(self) -> None:
        """Start it and wait (bounded) for its readiness line."""
        offset = self.log.stat().st_size if self.log.exists() else 0
        with self.log.open("ab") as out:
            self.process = await anyio.open_process(
                self.command, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT, env=self.env
            )
        with anyio.fail_after(STARTUP_TIMEOUT):
            # A subprocess's readiness shows only in its output: poll the file.
            while READY not in self.log.read_bytes()[offset:]:
                if self.process.returncode is not None:
                    raise AssertionError(f"the worker exited early:\n{self.output()}")
                await anyio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL it and wait until it is gone."""
        process, self.process = self.process, None
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await process.wait()

    async def stop(self) -> None:
        """Teardown: SIGKILL it if it still runs."""
        if self.process is not None:
            await self.kill()
