"""``DbosWorker``: this process runs the agents' sessions as DBOS workflows.

DBOS is a library: the worker launches it in-process over its system
database (SQLite by default, a file; Postgres when several processes share
the work) and polls the worker queue; its steps run on this process's event
loop (:class:`~helix_agents.engines.dbos.stephost.StepHost`). One DBOS per process:
a second worker entered while one runs is refused.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Any

import anyio
from anyio.from_thread import BlockingPortal
from dbos import DBOS, DBOSConfig

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.dbos.service import DbosLauncher, DbosService
from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.dbos.stephost import StepHost, hosting, unhost
from helix_agents.engines.dbos.takeover import Takeover
from helix_agents.engines.dbos.workflow import agent_run
from helix_agents.engines.durable.steps import DurableSteps
from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.inprocess import InProcessTransport
from helix_agents.tracing import Tracer
from helix_agents.workspaces.base import WorkspaceProvider

__all__ = ["DbosWorker", "attach"]

DBOS_LAUNCHED = "launched"
QUEUE_PICKUP = 2.0
"""Seconds a starting worker waits at most for DBOS to poll its queue (DBOS checks every 1 s)."""
_REGISTERED = agent_run
"""Importing the workflow module registers ``agent_run`` with DBOS."""


class DbosWorker:
    """Runs the agents' sessions as DBOS workflows on this process (``async with``).

    Args:
        agents: the agents (sub-agents included by their tools), as for the executor.
        store: the store every session's log lives in.
        options: DBOS's system database, queue and knobs (:class:`DbosOptions`).
        llm: the default model for agents that have none.
        tracer: traces the runs' steps (``helix_agents.otel.OtelTracer``): a run's
            span, its model calls and tool calls, as on the built-in runtime.
        workspace_providers: provider by workspace kind, as for the executor;
            each must reach its files from every worker (``durable = True``,
            e.g. a ``LocalWorkspaceProvider`` on a root the workers share).
        workspace_provider_kinds: the strict wiring check, as for the executor.

    Raises:
        UsageError: a workspace provider that keeps its files in one process,
            or a tool policy that names no tool.
        AgentServerError: ``WORKSPACE_WIRING`` (the strict check).
    """

    def __init__(
        self,
        agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
        store: EventStore,
        options: DbosOptions | None = None,
        *,
        llm: LLMAdapter | None = None,
        tracer: Tracer | None = None,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        workspace_provider_kinds: Iterable[str] | None = None,
    ) -> None:
        listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
        self.options = options or DbosOptions()
        self.executor = AgentExecutor(
            store,
            listed,
            llm=llm,
            stop_grace=self.options.stop_grace,
            workspace_providers=workspace_providers,
            workspace_provider_kinds=workspace_provider_kinds,
            tracer=tracer,
        )
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
        await self.executor.__aenter__()
        try:
            self._portal = BlockingPortal()
            await self._portal.__aenter__()
            hosting(StepHost(self.steps, self.options, self._portal))
            await anyio.to_thread.run_sync(self._launch)
            self._phases.add(DBOS_LAUNCHED)
            await self._queue_polled()
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
            unhost()
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
    service = DbosService(executor.runs)
    executor.service = service
    executor.env = dataclasses.replace(executor.env, local_transport=InProcessTransport(service))
    executor.runs.env = executor.env
    executor.runs.launcher = DbosLauncher(options.queue)
    return service
