"""``DurableWorker``: a process running a durable engine's workflows, one shape for every engine.

An engine's worker (``TemporalWorker``, ``DbosWorker``) is an executor on the
engine's runtime, in its worker role: the subclass says which runtime, and
its options' defaults. Entering the worker enters the executor, whose
runtime connects (Temporal) or launches (DBOS) and polls for work.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import TracebackType
from typing import Generic, Self, TypeVar

import anyio

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.durable.options import DurableOptions
from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.runtime.executor import AgentExecutor, Runtime
from helix_agents.tracing import Tracer
from helix_agents.workspaces.base import WorkspaceProvider

__all__ = ["DurableWorker", "bind_once"]

OptionsT = TypeVar("OptionsT", bound=DurableOptions)


def bind_once(runtime: object, bound: AgentExecutor | None) -> None:
    """Refuse a runtime already bound to an executor (``UsageError``): one runtime, one executor."""
    if bound is not None:
        raise UsageError(
            f"this {type(runtime).__name__} already runs another executor's sessions: "
            "make one per executor (or server, or worker)"
        )


class DurableWorker(Generic[OptionsT]):
    """Runs the agents' sessions as an engine's workflows on this process (``async with``).

    Args:
        agents: the agents (sub-agents included by their tools), as for the executor.
        store: the store every session's log lives in (shared with the gateway).
        options: the engine's options (give every process the same).
        llm: the default model for agents that have none.
        tracer: traces the runs' steps (``helix_agents.otel.OtelTracer``): a run's
            span, its model calls and tool calls, as on the built-in runtime.
        workspace_providers: provider by workspace kind, as for the executor;
            each must reach its files from every worker (``durable = True``,
            e.g. a ``LocalWorkspaceProvider`` on a root the workers share).
        workspace_provider_kinds: the strict wiring check, as for the executor.

    Raises:
        UsageError: a workspace provider that keeps its files in one process,
            a tool policy that names no tool, or what the engine's runtime refuses.
        AgentServerError: ``WORKSPACE_WIRING`` (the strict check).
    """

    def __init__(
        self,
        agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
        store: EventStore,
        options: OptionsT | None = None,
        *,
        llm: LLMAdapter | None = None,
        tracer: Tracer | None = None,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        workspace_provider_kinds: Iterable[str] | None = None,
    ) -> None:
        listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
        self.options: OptionsT = options if options is not None else self._default_options()
        """The engine's options."""
        self.runtime: Runtime = self._runtime(self.options)
        """The engine's runtime, in its worker role."""
        self.executor = AgentExecutor(
            store,
            listed,
            llm=llm,
            workspace_providers=workspace_providers,
            workspace_provider_kinds=workspace_provider_kinds,
            tracer=tracer,
            runtime=self.runtime,
        )
        """The executor the workflows' steps run on."""

    def _default_options(self) -> OptionsT:
        raise NotImplementedError

    def _runtime(self, options: OptionsT) -> Runtime:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        await self.executor.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.executor.__aexit__(exc_type, exc, tb)

    async def run(self) -> None:
        """Run until cancelled."""
        async with self:
            await anyio.sleep_forever()
