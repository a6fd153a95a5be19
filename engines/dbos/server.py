"""``dbos_server``: the gateway's server, whose process also runs the sessions on DBOS.

DBOS is a library, not a service: the gateway's process launches it and
runs workflows like any worker (embedded, on SQLite); with Postgres, more
workers (``helix-agents worker --dbos URL``) share the queue.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.dbos.runtime import DbosWorker
from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.server.agent_server import AgentServer
from helix_agents.tracing import Tracer
from helix_agents.workspaces.base import WorkspaceProvider

__all__ = ["DbosServer", "dbos_server"]


class DbosServer(AgentServer):
    """An ``AgentServer`` over a :class:`DbosWorker`'s executor; entering it launches DBOS."""

    def __init__(self, worker: DbosWorker, agents: list[AgentConfig], owns_store: bool) -> None:
        store = worker.executor.store
        super().__init__(
            agents, store, executor=worker.executor, recover=False, owns_store=owns_store
        )
        self.worker = worker

    @property
    def running(self) -> bool:
        """True inside ``async with`` (the worker, hence the executor, is this server's)."""
        return self._running

    async def __aenter__(self) -> DbosServer:
        await self.worker.__aenter__()
        await super().__aenter__()  # no recovery of its own: DBOS recovers its workflows
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            await self.worker.__aexit__(exc_type, exc, tb)
        finally:
            await super().__aexit__(exc_type, exc, tb)
        return None


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
) -> DbosServer:
    """The ``AgentServer`` of a gateway running its sessions as DBOS workflows.

    ``tracer`` traces its sessions' runs (``helix_agents.otel.OtelTracer``);
    ``workspace_providers`` and ``workspace_provider_kinds`` are its worker's
    (:class:`~helix_agents.dbos.DbosWorker`).

    Raises:
        UsageError: what the worker refuses.
    """
    listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
    worker = DbosWorker(
        listed,
        store,
        options,
        llm=llm,
        tracer=tracer,
        workspace_providers=workspace_providers,
        workspace_provider_kinds=workspace_provider_kinds,
    )
    return DbosServer(worker, listed, owns_store)
