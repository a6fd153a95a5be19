"""``helix-agents worker --dbos`` as a real subprocess, for the DBOS tests that kill workers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
from anyio.abc import Process

from tests.integration._serve_process import ROOT

__all__ = ["DbosWorkerProcess"]

READY = b"helix-agents: worker for"
STARTUP_TIMEOUT = 60


class DbosWorkerProcess:
    """One ``helix-agents worker TARGET --dbos URL --store sqlite:///DB`` process."""

    def __init__(
        self,
        log: Path,
        target: str,
        *,
        system_database: str,
        db: Path,
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
            "--dbos",
            system_database,
            "--store",
            f"sqlite:///{db}",
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
            while READY not in self.log.read_bytes()[offset:]:
                if self.process.returncode is not None:
                    raise AssertionError(f"the worker exited:\n{self.output()}")
                await anyio.sleep(0.1)

    async def kill(self) -> None:
        """SIGKILL it (no cleanup of any kind) and reap it."""
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await self.process.wait()

    async def stop(self) -> None:
        """SIGTERM it (SIGKILL if it lingers) and reap it."""
        process = self.process
        if process is None or process.returncode is not None:
            return
        os.kill(process.pid, signal.SIGTERM)
        try:
            with anyio.fail_after(15):
                await process.wait()
        except TimeoutError:
            os.kill(process.pid, signal.SIGKILL)
            with anyio.fail_after(10):
                await process.wait()
