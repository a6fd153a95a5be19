"""``DbosRuntime``: an executor's sessions run as DBOS workflows, on this process.

DBOS is a library: the runtime launches it in-process over its system
database (SQLite by default, a file; Postgres when several processes share
the work) when its executor is entered, and polls the queue; its steps run
on this process's event loop (:class:`~helix_agents.engines.dbos.stephost.StepHost`).
One DBOS per process: a second runtime entered while one runs is refused.
A gateway's process runs workflows like any worker, so a gateway's runtime
and a worker's are the same: :func:`dbos_server` is the gateway's
``AgentServer``, :class:`~helix_agents.engines.dbos.worker.DbosWorker` a worker.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager

import anyio
from anyio.from_thread import BlockingPortal
from dbos import DBOS, DBOSConfig

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.dbos.schedules import DbosSchedules
from helix_agents.engines.dbos.service import DbosLauncher, DbosService
from helix_agents.engines.dbos.stephost import StepHost, hosting, unhost
from helix_agents.engines.dbos.takeover import Takeover
from helix_agents.engines.dbos.workflow import agent_run
from helix_agents.engines.durable.steps import DurableSteps
from helix_agents.engines.durable.worker import bind_once
from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.service import RuntimeParts
from helix_agents.server.agent_server import AgentServer
from helix_agents.tracing import Tracer
from helix_agents.workspaces.base import WorkspaceProvider

__all__ = ["DbosRuntime", "dbos_server"]

QUEUE_PICKUP = 2.0
"""Seconds a starting worker waits at most for DBOS to poll its queue (DBOS checks every 1 s)."""
_REGISTERED = agent_run
"""Importing the workflow module registers ``agent_run`` with DBOS."""


class DbosRuntime:
    """Runs an executor's sessions as DBOS workflows on this process (a ``Runtime``).

    Args:
        options: DBOS's system database, queue and knobs (:class:`DbosOptions`).

    Raises:
        UsageError: a system database that is not ``sqlite:///`` or
            ``postgresql://``, or a ``takeover_after`` that does nothing (SQLite)
            or is not above 0.
    """

    def __init__(self, options: DbosOptions | None = None) -> None:
        self.options = options or DbosOptions()
        self.engine_schedules = DbosSchedules(self.options)
        """The schedules as DBOS schedules (specs/server.md, "Schedules")."""
        self.steps: DurableSteps | None = None
        """The steps' work, over the executor (once bound)."""
        self._executor: AgentExecutor | None = None
        self._takeover: Takeover | None = None
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

    @property
    def runs_models(self) -> bool:
        """True: the workflows' steps run on this process."""
        return True

    @property
    def recovers_sessions(self) -> bool:
        """True: DBOS recovers the workflows, not the server."""
        return True

    def bind(self, executor: AgentExecutor) -> RuntimeParts:
        """The DBOS service and launcher of ``executor``, and the steps over it."""
        bind_once(self, self._executor)
        self.steps = DurableSteps(
            executor,
            tool_policies=self.options.tool_policies,
            default_policy=self.options.default_policy,
        )
        self._executor = executor
        return RuntimeParts(
            service=DbosService(executor.runs),
            # SQLite is one process, the only worker: a run starts at once, not at a poll.
            launcher=DbosLauncher(self.options.queue, direct=self._takeover is None),
            stop_grace=self.options.stop_grace,
        )

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """DBOS launched in the block, polling the queue; on leaving, a drain, then DBOS ends."""
        executor, steps = self._executor, self.steps
        if executor is None or steps is None:
            raise UsageError("give the DbosRuntime to an executor (runtime=) before entering it")
        beating = anyio.CancelScope()
        portal = BlockingPortal()
        await portal.__aenter__()
        try:
            hosting(StepHost(steps, self.options, portal))
        except BaseException:
            # One DBOS per process: the one running is another runtime's, left as it is.
            await portal.__aexit__(None, None, None)
            raise
        launched = False
        try:
            await anyio.to_thread.run_sync(self._launch)
            launched = True
            await self._queue_polled()
            if self._takeover is not None:
                await self._takeover.first_beat()
                tg = executor.runs.task_group
                assert tg is not None
                tg.start_soon(self._beat, self._takeover, beating)
            yield
        finally:
            beating.cancel()
            try:
                with anyio.CancelScope(shield=True):
                    if launched:
                        await self._drain(executor)
                    await anyio.to_thread.run_sync(lambda: DBOS.destroy(destroy_registry=False))
            finally:
                unhost()
                await portal.__aexit__(None, None, None)

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

    async def _queue_polled(self) -> None:
        """Wait (bounded) until DBOS polls the queue, so a run enqueued now starts at once.

        DBOS keeps queues in the system database and looks for new ones once a
        second: on a fresh database the queue registered after launch would
        leave the first runs waiting up to that second. Its poller is a thread
        named after the queue; past the bound, the worker goes on regardless.
        """
        name = f"queue-worker-{self.options.queue}"
        with anyio.move_on_after(QUEUE_PICKUP):
            # A thread of DBOS's sets no event to wait on: polling is the only way.
            while not any(t.name == name and t.is_alive() for t in threading.enumerate()):  # noqa: ASYNC110
                await anyio.sleep(0.02)

    @staticmethod
    async def _beat(takeover: Takeover, scope: anyio.CancelScope) -> None:
        with scope:
            await takeover.run()

    async def _drain(self, executor: AgentExecutor) -> None:
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
                    if (await executor.runs.state(session)).status != "paused":
                        busy = True
                if not busy:
                    return
                await anyio.sleep(0.05)


def dbos_server(
    agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
    store: EventStore,
    options: DbosOptions | None = None,
    *,
    llm: LLMAdapter | None = None,
    owns_store: bool = False,
    tracer: Tracer | None = None,
    workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
    workspace_provider_kinds: Iterable[str] | None = None,
) -> AgentServer:
    """The ``AgentServer`` of a gateway running its sessions as DBOS workflows, on this process.

    ``AgentServer(agents, store, runtime=DbosRuntime(options), ...)``: it
    launches DBOS on ``async with``; with Postgres, more workers
    (``helix-agents worker --dbos URL``) share the queue. ``tracer`` traces
    its sessions' runs; ``workspace_providers`` and ``workspace_provider_kinds``
    as for a :class:`~helix_agents.engines.dbos.worker.DbosWorker`.

    Raises:
        UsageError: what the runtime or the executor refuses.
    """
    return AgentServer(
        agents,
        store,
        runtime=DbosRuntime(options),
        llm=llm,
        owns_store=owns_store,
        tracer=tracer,
        workspace_providers=workspace_providers,
        workspace_provider_kinds=workspace_provider_kinds,
    )
