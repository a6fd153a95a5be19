"""``DbosWorker``: this process runs the agents' sessions as DBOS workflows.

DBOS is a library: the worker launches it in-process over its system
database (SQLite by default, a file; Postgres when several processes share
the work) and polls the worker queue. DBOS runs a dequeued or recovered
workflow on its own event loop (a thread); every step's work is handed to
the worker's event loop, where its executor, store and models live, through
an anyio blocking portal (:class:`StepHost`). One DBOS per process: a
second worker entered while one runs is refused.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, TypeVar

import anyio
from anyio.from_thread import BlockingPortal
from dbos import DBOS, DBOSConfig

from helix_agents.agents.config import AgentConfig
from helix_agents.dbos.takeover import Takeover
from helix_agents.durable import DurableSteps, ToolPolicy
from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.inprocess import InProcessTransport

__all__ = ["DbosOptions", "DbosWorker", "StepHost", "current_host"]

T = TypeVar("T")
DBOS_LAUNCHED = "launched"
WORKFLOW_VERSION = "helix-agent-run-1"
"""The version of ``agent_run``'s decisions (bump it with any change to them)."""


@dataclass(frozen=True, kw_only=True)
class DbosOptions:
    """Where DBOS keeps its state and how the workflows run (give every process the same).

    Args:
        system_database: DBOS's system database URL: ``sqlite:///path`` (embedded,
            one process) or ``postgresql://...`` (several worker processes).
        queue: the DBOS queue runs are enqueued on and workers poll.
        app_name: DBOS's application name.
        executor_id: this process's DBOS executor id (a restart with the same
            id recovers the workflows it left pending; default ``local``).
        polling_interval: seconds between a worker's polls of the queue.
        takeover_after: Postgres only: a worker silent this long is presumed dead,
            and a live worker recovers its workflows (``takeover.py``).
        paused_wait: seconds a paused run waits for its resume message.
        stop_grace: seconds a stopping run waits for its children.
        app_version: DBOS's application version: a process recovers only the
            pending workflows of its own version. The workflow's code is this
            package's, not the agents', so the default names the workflow's
            version (``specs/dbos.md``, the versioning rule).
        log_level: DBOS's log level.
        drain: seconds a closing worker lets its workflows finish the step they
            are in (a paused one is left waiting; the rest are recovered later).
        tool_policies: a :class:`~helix_agents.durable.ToolPolicy` by tool name.
        default_policy: the policy of every other tool.
    """

    system_database: str = "sqlite:///helix_dbos.sqlite"
    queue: str = "helix-agents"
    app_name: str = "helix-agents"
    executor_id: str | None = None
    polling_interval: float = 0.1
    takeover_after: float = 10.0
    app_version: str = WORKFLOW_VERSION
    log_level: str = "WARNING"
    drain: float = 2.0
    paused_wait: float = 7 * 24 * 3600.0
    stop_grace: float = 10.0
    tool_policies: dict[str, ToolPolicy] = field(default_factory=dict)
    default_policy: ToolPolicy = field(default_factory=ToolPolicy)


class StepHost:
    """What the workflows' steps run on: the durable steps, on the worker's loop."""

    def __init__(self, steps: DurableSteps, options: DbosOptions, portal: BlockingPortal) -> None:
        self.steps = steps
        self.options = options
        self._portal = portal
        self._loop = asyncio.get_running_loop()

    async def call(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work()`` on the worker's loop; cancelling the caller cancels it.

        The workflows run on DBOS's own loop (they are always enqueued, never
        started inline), so this always crosses loops. The work runs in a fresh
        context: the workflow's DBOS context must not leak into it (a run it
        launches is a workflow of its own, not a step of this one).
        """
        if asyncio.get_running_loop() is self._loop:
            raise UsageError("a durable step must be called from a DBOS workflow's loop")

        async def run() -> T:
            return await work()

        future: concurrent.futures.Future[T] = contextvars.Context().run(
            self._portal.start_task_soon, run
        )
        return await asyncio.wrap_future(future)


_HOST: list[StepHost] = []


def current_host() -> StepHost:
    """The host of this process's running worker (``UsageError`` if none runs)."""
    if not _HOST:
        raise UsageError("no DbosWorker runs in this process")
    return _HOST[0]


class DbosWorker:
    """Runs the agents' sessions as DBOS workflows on this process (``async with``).

    Args:
        agents: the agents (sub-agents included by their tools), as for the executor.
        store: the store every session's log lives in.
        options: DBOS's system database, queue and knobs (:class:`DbosOptions`).
        llm: the default model for agents that have none.

    Raises:
        UsageError: an agent the durable runtime does not run (workspaces,
            expiring inputs), or a tool policy that names no tool.
    """

    def __init__(
        self,
        agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
        store: EventStore,
        options: DbosOptions | None = None,
        *,
        llm: LLMAdapter | None = None,
    ) -> None:
        listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
        self.options = options or DbosOptions()
        self.executor = AgentExecutor(store, listed, llm=llm, stop_grace=self.options.stop_grace)
        self.steps = DurableSteps(
            self.executor,
            tool_policies=self.options.tool_policies,
            default_policy=self.options.default_policy,
        )
        attach(self.executor, self.options)
        self._portal: BlockingPortal | None = None
        self._takeover: Takeover | None = None
        self._phases: set[str] = set()
        self._beating = anyio.CancelScope()
        url = self.options.system_database
        if url.startswith(("postgresql://", "postgres://")):
            if self.options.takeover_after <= 0:
                raise UsageError("takeover_after must be above 0")
            self._executor_id = self.options.executor_id or f"helix-{uuid.uuid4().hex[:12]}"
            self._takeover = Takeover(url, self._executor_id, self.options.takeover_after)
        elif url.startswith("sqlite:///"):
            if self.options.takeover_after != DbosOptions.takeover_after:
                raise UsageError("takeover_after is for Postgres (SQLite is one process)")
            self._executor_id = self.options.executor_id or "local"
        else:
            raise UsageError("the system database is sqlite:///FILE or postgresql://...")

    async def __aenter__(self) -> DbosWorker:
        from helix_agents.dbos import workflow  # registers the workflow with DBOS

        del workflow
        if _HOST:
            raise UsageError("a DbosWorker already runs in this process (DBOS is one per process)")
        await self.executor.__aenter__()
        try:
            self._portal = BlockingPortal()
            await self._portal.__aenter__()
            _HOST.append(StepHost(self.steps, self.options, self._portal))
            await anyio.to_thread.run_sync(self._launch)
            self._phases.add(DBOS_LAUNCHED)
            if self._takeover is not None:
                await self._takeover.first_beat()
                tg = self.executor.runs.task_group
                assert tg is not None
                tg.start_soon(self._beat, self._takeover)
        except BaseException:
            await self._close()
            raise
        return self

    def _launch(self) -> None:
        config: DBOSConfig = {
            "name": self.options.app_name,
            "system_database_url": self.options.system_database,
            "notification_listener_polling_interval_sec": 0.05,
            "application_version": self.options.app_version,
            "log_level": self.options.log_level,
        }
        config["executor_id"] = self._executor_id
        DBOS(config=config)
        DBOS.launch()
        DBOS.register_queue(self.options.queue, polling_interval_sec=self.options.polling_interval)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._close()

    async def _beat(self, takeover: Takeover) -> None:
        with self._beating:
            await takeover.run()

    async def _drain(self) -> None:
        """Let this process's workflows finish a last step (a paused one is left waiting)."""
        with anyio.move_on_after(self.options.drain):
            while True:
                pending = await DBOS.list_workflows_async(
                    status="PENDING",
                    executor_id=self._executor_id,
                    load_input=False,
                    load_output=False,
                )
                busy = False
                for wf in pending:
                    session = wf.workflow_id.rpartition("#")[0]
                    if (await self.executor.runs.state(session)).status != "paused":
                        busy = True
                if not busy:
                    return
                await anyio.sleep(0.05)

    async def _close(self) -> None:
        self._beating.cancel()
        try:
            if DBOS_LAUNCHED in self._phases:
                with anyio.CancelScope(shield=True):
                    await self._drain()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(lambda: DBOS.destroy(destroy_registry=False))
            self._phases.clear()
        finally:
            _HOST.clear()
            portal, self._portal = self._portal, None
            try:
                if portal is not None:
                    await portal.__aexit__(None, None, None)
            finally:
                await self.executor.__aexit__(None, None, None)

    async def run(self) -> None:
        """Run until cancelled."""
        async with self:
            await anyio.sleep_forever()


def attach(executor: AgentExecutor, options: DbosOptions) -> Any:
    """Make ``executor`` launch its runs as DBOS workflows; return its new service."""
    from helix_agents.dbos.launches import DbosLauncher, DbosService

    service = DbosService(executor.runs)
    executor.service = service
    executor.env = dataclasses.replace(executor.env, local_transport=InProcessTransport(service))
    executor.runs.env = executor.env
    executor.runs.launcher = DbosLauncher(options.queue)
    return service
