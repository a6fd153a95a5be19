"""Helpers of the durable runtimes' workspace and expiry tests (``workspace_app``'s agents)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process

from helix_agents import AgentExecutor
from helix_agents.events import Completed, Event
from helix_agents.log.store import EventStore
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from helix_agents.workspaces import LocalWorkspaceProvider
from tests.integration._serve_process import ROOT
from tests.integration._temporal_kit import comparable, wait_for
from tests.integration.durable_worker import READY
from tests.integration.workspace_app import agents

__all__ = ["WorkerScript", "builtin_store", "same_log"]


async def builtin_store(agent_type: str, session_id: str, root: Path) -> MemoryEventStore:
    """A store holding ``agent_type`` run to completion by the built-in runtime."""
    store = MemoryEventStore()
    providers = {"local": LocalWorkspaceProvider(root)}
    async with AgentExecutor(store, list(agents.values()), workspace_providers=providers) as ex:
        await ex.service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        await wait_for(store, session_id, lambda e: isinstance(e, Completed))
    return store


def _timeless(value: Any) -> Any:
    """Without an entry's ``expiresAt`` (a wall-clock time, different in each run)."""
    if isinstance(value, dict):
        return {
            key: _timeless(item)
            for key, item in value.items()
            if key not in ("expires_at", "expiresAt")
        }
    if isinstance(value, list):
        return [_timeless(item) for item in value]
    return value


def same_log(durable: Sequence[Event], builtin: Sequence[Event]) -> bool:
    """Whether two logs hold the same events (times, run ids and expiry instants aside)."""
    return bool(_timeless(comparable(durable)) == _timeless(comparable(builtin)))


class WorkerScript:
    """``python -m tests.integration.durable_worker ARGS`` as a subprocess that can be killed."""

    def __init__(self, log: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.log = log
        self.command = [sys.executable, "-m", "tests.integration.durable_worker", *args]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.process: Process | None = None

    def output(self) -> str:
        """Its output so far."""
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
        with anyio.fail_after(60):
            # A subprocess's readiness shows only in its output: poll the file.
            while READY.encode() not in self.log.read_bytes()[offset:]:
                if self.process.returncode is not None:
                    raise AssertionError(f"the worker exited early:\n{self.output()}")
                await anyio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL it and reap it."""
        process, self.process = self.process, None
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await process.wait()

    async def wait(self) -> int:
        """Wait for it to exit by itself; its exit code."""
        assert self.process is not None
        code = await self.process.wait()
        self.process = None
        return code

    async def stop(self) -> None:
        """Teardown: SIGKILL it if it still runs."""
        if self.process is not None:
            await self.kill()


async def held(store: EventStore, session_id: str) -> Event:
    """The ``holding`` chunk of ``session_id`` (its ``hold`` tool runs)."""
    from helix_agents.events import CustomChunk

    return await wait_for(
        store, session_id, lambda e: isinstance(e, CustomChunk) and e.name == "holding"
    )
