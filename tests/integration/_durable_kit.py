"""The runtimes a gateway can run its sessions on, for tests that must pass on all of them.

Issue 23 and 27: a client cannot tell from the protocol which runtime ran a
session. A protocol test takes the ``runtime`` fixture (``tests/conftest.py``,
parametrised over its ``RUNTIMES``) and opens its gateway's server with
``runtime.server(agents, store)`` instead of ``AgentServer(...)``:

- ``builtin``: ``AgentServer(agents, store)``, what plain ``serve`` runs;
- ``temporal``: ``temporal_server(...)`` (what ``serve --temporal`` runs) with
  a ``TemporalWorker`` in this process on a task queue of its own, on the
  run's one dev server (``tests/temporal_server.py``);
- ``dbos``: ``dbos_server(...)`` (what ``serve --dbos sqlite:///...`` runs),
  embedded, on a SQLite system database of its own.

In-process, so the tests' agents (closures, gates) are the ones that run. For
the tests that start real processes, :class:`WorkerProcess` is
``helix-agents worker --temporal``/``--dbos`` and :meth:`Runtime.serve_args`
the flags of ``serve`` for the runtime; :class:`WorkerScript` runs
``tests/integration/durable_worker.py``. The durable runtimes' workspace and
expiry tests share the helpers at the end (``workspace_app``'s agents).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from temporal_server import TemporalDev, fresh_task_queue

from helix_agents import AgentConfig, AgentExecutor, EventStore
from helix_agents.events import Completed, CustomChunk, Event
from helix_agents.log import project_state
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from helix_agents.workspaces import LocalWorkspaceProvider, WorkspaceProvider
from tests.integration._serve_process import ROOT
from tests.integration._temporal_kit import comparable, wait_for
from tests.integration.durable_worker import READY as SCRIPT_READY
from tests.integration.workspace_app import agents as workspace_agents

__all__ = [
    "Runtime",
    "WorkerProcess",
    "WorkerScript",
    "builtin_store",
    "dbos_template",
    "held",
    "same_log",
]


class Runtime:
    """One runtime: opens gateway servers that run their sessions on it.

    Args:
        name: ``builtin``, ``temporal`` or ``dbos``.
        directory: where the DBOS system databases go.
        dev: the Temporal dev server (``temporal`` only).
        dbos_template: a system database to copy for each DBOS gateway (``dbos_template``).
        system_database: DBOS's system database URL instead (a Postgres one).
    """

    def __init__(
        self,
        name: str,
        directory: Path,
        dev: TemporalDev | None = None,
        dbos_template: Path | None = None,
        system_database: str | None = None,
    ) -> None:
        self.name = name
        self.system_database = system_database
        self.directory = directory
        self.dev = dev
        self.dbos_template = dbos_template
        self._opened = 0
        self._task_queue: str | None = None  # of serve --temporal and its worker

    @property
    def durable(self) -> bool:
        """True for the runtimes of a durable engine."""
        return self.name != "builtin"

    @asynccontextmanager
    async def server(
        self,
        agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
        store: EventStore,
        *,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        **knobs: Any,
    ) -> AsyncIterator[AgentServer]:
        """A running gateway server of ``agents`` on ``store``, its sessions run on this runtime.

        ``knobs`` are the engine's options (``paused_wait``, ``tool_policies``...); one
        the engine has not (Temporal's ``heartbeat_timeout`` on DBOS) is left out, and
        the built-in runtime takes none. ``workspace_providers`` as for the executor.
        """
        listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
        self._opened += 1
        if self.name == "builtin":
            async with AgentServer(
                listed, store, workspace_providers=workspace_providers
            ) as server:
                yield server
        elif self.name == "temporal":
            async with self._temporal(listed, store, workspace_providers, knobs) as server:
                yield server
        else:
            from helix_agents.dbos import DbosOptions, dbos_server

            database = self.system_database or self._sqlite_database()
            # A shorter poll than the CLI's 0.1 s: a tree enqueues a run per session.
            options = DbosOptions(
                system_database=database, polling_interval=0.02, **_known(DbosOptions, knobs)
            )
            async with dbos_server(
                listed, store, options, workspace_providers=workspace_providers
            ) as server:
                yield server

    def _sqlite_database(self) -> str:
        """A fresh SQLite system database, a copy of the template when there is one."""
        database = self.directory / f"dbos-{self._opened}.sqlite"
        if self.dbos_template is not None:
            shutil.copyfile(self.dbos_template, database)
        return f"sqlite:///{database}"

    @asynccontextmanager
    async def _temporal(
        self,
        agents: list[AgentConfig],
        store: EventStore,
        workspace_providers: Mapping[str, WorkspaceProvider] | None,
        knobs: dict[str, Any],
    ) -> AsyncIterator[AgentServer]:
        from temporalio.client import Client
        from temporalio.service import RPCError

        from helix_agents.temporal import TemporalOptions, TemporalWorker, temporal_server

        assert self.dev is not None
        options = TemporalOptions(
            address=self.dev.address,
            task_queue=fresh_task_queue(),
            **_known(TemporalOptions, knobs),
        )
        try:
            async with TemporalWorker(
                agents, store, options, workspace_providers=workspace_providers
            ):
                server = temporal_server(agents, store, options)
                async with server:
                    yield server
        finally:
            # Workflow ids are session ids, which the next test may use again in
            # the same namespace: end whatever this one left waiting.
            client = await Client.connect(self.dev.address)
            for session_id in await store.list_sessions():
                with contextlib.suppress(RPCError):
                    await client.get_workflow_handle(session_id).terminate("test over")

    def worker_in_process(
        self,
        agents: Iterable[AgentConfig],
        store: EventStore,
        *,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        **knobs: Any,
    ) -> object:
        """The engine's worker of ``agents``, made and not started (for its refusals)."""
        if self.name == "temporal":
            from helix_agents.temporal import TemporalOptions, TemporalWorker

            options = TemporalOptions(**_known(TemporalOptions, knobs))
            return TemporalWorker(agents, store, options, workspace_providers=workspace_providers)
        if self.name == "dbos":
            from helix_agents.dbos import DbosOptions, DbosWorker

            database = self.system_database or f"sqlite:///{self.directory / 'dbos.sqlite'}"
            options = DbosOptions(system_database=database, **_known(DbosOptions, knobs))
            return DbosWorker(agents, store, options, workspace_providers=workspace_providers)
        raise AssertionError("the built-in runtime has no worker")

    async def steps(self, session_id: str) -> list[str]:
        """The durable steps the run of ``session_id`` took, in order (its engine's record).

        Temporal: the activity types its workflow's history scheduled, ``local:TYPE``
        for a local activity's marker and ``timer`` for a timer. DBOS: the step functions of
        the session's first run (workflow ``<session>#2``). Either once the run's
        workflow ended (waited for up to 10 s: a paused one does not end).
        """
        if self.name == "temporal":
            from temporalio.api.enums.v1 import EventType
            from temporalio.client import Client

            assert self.dev is not None
            client = await Client.connect(self.dev.address)
            handle = client.get_workflow_handle(session_id)
            with anyio.move_on_after(10), contextlib.suppress(Exception):
                await handle.result()  # the log can say "completed" before the engine does
            names = []
            async for event in handle.fetch_history_events():
                if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                    names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
                elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
                    marker = event.marker_recorded_event_attributes
                    if marker.marker_name == "core_local_activity":  # not a patch's marker
                        names.append(f"local:{_local_activity_type(event)}")
                elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
                    names.append("timer")
            return names
        if self.name == "dbos":
            from dbos import DBOS

            workflow = f"{session_id}#2"
            with anyio.move_on_after(10), contextlib.suppress(Exception):
                # The log can say "completed" before the engine does.
                await (await DBOS.retrieve_workflow_async(workflow)).get_result()
            steps = await DBOS.list_workflow_steps_async(workflow)
            return [step["function_name"] for step in steps]
        raise AssertionError("the built-in runtime records no durable steps")

    async def settled(self, server: AgentServer, session_id: str) -> None:
        """Wait until no run of ``session_id`` goes on (the caller bounds the wait).

        The built-in runtime's own executor knows (``wait_idle``); a durable
        gateway's executor runs nothing, so its log says: its status is no
        longer ``running``.
        """
        if not self.durable:
            await server.executor.wait_idle(session_id)
            return
        store = server.executor.store
        log_ = await store.read(session_id)
        if project_state(log_).status != "running":
            return
        async for event in store.tail(session_id, log_[-1].seq):
            log_.append(event)
            if project_state(log_).status != "running":
                return

    def serve_args(self, directory: Path) -> tuple[str, ...]:
        """The flags that put ``helix-agents serve`` on this runtime (a worker: :meth:`worker`)."""
        if self.name == "temporal":
            assert self.dev is not None
            return ("--temporal", self.dev.address, "--task-queue", self._queue())
        if self.name == "dbos":
            return ("--dbos", f"sqlite:///{directory / 'dbos.sqlite'}")
        return ()

    def _queue(self) -> str:
        if self._task_queue is None:
            self._task_queue = fresh_task_queue()
        return self._task_queue

    def worker(self, log: Path, target: str, db: Path) -> WorkerProcess | None:
        """The worker process ``serve`` with :meth:`serve_args` needs (None: it runs its own)."""
        if self.name != "temporal":
            return None
        assert self.dev is not None
        return WorkerProcess.temporal(
            log, target, address=self.dev.address, db=db, task_queue=self._queue()
        )


def _known(options: type, knobs: dict[str, Any]) -> dict[str, Any]:
    """The ``knobs`` that are fields of ``options``; a knob of neither engine is an error."""
    from helix_agents.dbos import DbosOptions
    from helix_agents.temporal import TemporalOptions

    every = {
        field.name for kind in (DbosOptions, TemporalOptions) for field in dataclasses.fields(kind)
    }
    assert set(knobs) <= every, f"no engine has the options {sorted(set(knobs) - every)}"
    names = {field.name for field in dataclasses.fields(options)}
    return {key: value for key, value in knobs.items() if key in names}


def dbos_template(directory: Path) -> Path:
    """A DBOS system database with the worker queue registered and nothing else.

    DBOS notices a queue registered after launch only at its next check of the
    database (once a second), which a worker waits for on a fresh database; a
    copy of this file starts polling at launch. It runs its own event loop, in
    a thread of its own (a fixture may be set up while the tests' loop runs).
    """
    from helix_agents.dbos import DbosOptions, dbos_server
    from helix_agents.stores import MemoryEventStore

    database = directory / "template.sqlite"

    async def launch_once() -> None:
        options = DbosOptions(system_database=f"sqlite:///{database}")
        async with dbos_server([], MemoryEventStore(), options):
            pass

    with ThreadPoolExecutor(max_workers=1) as pool:
        pool.submit(anyio.run, launch_once).result()
    return database


READY = b"helix-agents: worker for"
STARTUP_TIMEOUT = 60


class WorkerProcess:
    """A worker as a subprocess: started (waiting for its readiness line), killed, stopped.

    Made by :meth:`temporal` / :meth:`dbos` (``helix-agents worker TARGET
    --temporal ADDR|--dbos URL --store sqlite:///DB``) or :class:`WorkerScript`.

    Args:
        log: where its output goes (also how its readiness line is seen).
        command: what it runs (from the repository root); ``ready``: its readiness line.
        env: extra environment variables; ``graceful``: its teardown SIGTERMs first.
    """

    def __init__(
        self,
        log: Path,
        command: Sequence[str],
        *,
        ready: bytes = READY,
        env: dict[str, str] | None = None,
        graceful: bool = True,
    ) -> None:
        self.log = log
        self.command = list(command)
        self.ready = ready
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.graceful = graceful
        self.process: Process | None = None

    @classmethod
    def cli(
        cls,
        log: Path,
        target: str,
        *,
        engine: Sequence[str],
        db: Path,
        args: Sequence[str] = (),
        env: dict[str, str] | None = None,
        graceful: bool = True,
    ) -> WorkerProcess:
        """``helix-agents worker TARGET ENGINE --store sqlite:///DB ARGS``."""
        command = [sys.executable, "-m", "helix_agents.server", "worker", target, *engine]
        command += ["--store", f"sqlite:///{db}", *args]
        return cls(log, command, env=env, graceful=graceful)

    @classmethod
    def temporal(
        cls, log: Path, target: str, *, address: str, task_queue: str, **options: Any
    ) -> WorkerProcess:
        """A Temporal worker polling ``task_queue`` on ``address``."""
        engine = ("--temporal", address, "--task-queue", task_queue)
        # Its teardown needs no grace: Temporal reassigns whatever it held.
        return cls.cli(log, target, engine=engine, graceful=False, **options)

    @classmethod
    def dbos(cls, log: Path, target: str, *, system_database: str, **options: Any) -> WorkerProcess:
        """A DBOS worker on ``system_database`` (Postgres: several share the queue)."""
        return cls.cli(log, target, engine=("--dbos", system_database), **options)

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
            while self.ready not in self.log.read_bytes()[offset:]:
                if self.process.returncode is not None:
                    raise AssertionError(f"the worker exited early:\n{self.output()}")
                await anyio.sleep(0.05)

    async def kill(self) -> None:
        """SIGKILL it (no cleanup of any kind) and wait until it is gone."""
        process, self.process = self.process, None
        assert process is not None
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await process.wait()

    async def wait(self) -> int:
        """Wait for it to exit by itself; its exit code."""
        process, self.process = self.process, None
        assert process is not None
        return await process.wait()

    async def stop(self) -> None:
        """Teardown: SIGTERM it if graceful (SIGKILL if it lingers, or else) and reap it."""
        process, self.process = self.process, None
        if process is None or process.returncode is not None:
            return
        if self.graceful:
            os.kill(process.pid, signal.SIGTERM)
            with anyio.move_on_after(15):
                await process.wait()
                return
        os.kill(process.pid, signal.SIGKILL)
        with anyio.fail_after(10):
            await process.wait()


class WorkerScript(WorkerProcess):
    """``python -m tests.integration.durable_worker ARGS``: a worker of ``workspace_app``."""

    def __init__(self, log: Path, *args: str, env: dict[str, str] | None = None) -> None:
        command = [sys.executable, "-m", "tests.integration.durable_worker", *args]
        super().__init__(log, command, ready=SCRIPT_READY.encode(), env=env, graceful=False)


# --- the workspace and expiry tests' helpers (``workspace_app``'s agents) ---------------


async def builtin_store(agent_type: str, session_id: str, root: Path) -> MemoryEventStore:
    """A store holding ``agent_type`` run to completion by the built-in runtime."""
    store = MemoryEventStore()
    providers = {"local": LocalWorkspaceProvider(root)}
    async with AgentExecutor(
        store, list(workspace_agents.values()), workspace_providers=providers
    ) as ex:
        await ex.service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        await wait_for(store, session_id, lambda e: isinstance(e, Completed))
    return store


def _local_activity_type(event: Any) -> str:
    """The activity type a local activity's marker records (its ``data`` detail, JSON)."""
    import json

    payloads = event.marker_recorded_event_attributes.details["data"].payloads
    return str(json.loads(payloads[0].data).get("activity_type", "?")) if payloads else "?"


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


async def held(store: EventStore, session_id: str) -> Event:
    """The ``holding`` chunk of ``session_id`` (its ``hold`` tool runs)."""
    return await wait_for(
        store, session_id, lambda e: isinstance(e, CustomChunk) and e.name == "holding"
    )
