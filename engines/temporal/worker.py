"""Workers that run the agents' workflows, and the gateway's server that starts them.

``TemporalWorker(agents, store, options)``: ``async with`` it (or ``await
worker.run()``) to poll the task queue and run :class:`AgentWorkflow` and its
activities on this process, appending to ``store`` (the store the gateway
reads). ``temporal_server(agents, store, options)``: the
:class:`~helix_agents.server.AgentServer` a gateway serves, whose runs are
workflows on the workers.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from types import TracebackType

import anyio
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.durable.steps import DurableSteps
from helix_agents.engines.temporal.activities import HelixActivities
from helix_agents.engines.temporal.service import TemporalOptions, TemporalService, attach, connect
from helix_agents.engines.temporal.workflow import AgentWorkflow
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter, LLMError, LLMRequest, LLMStreamEvent
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.server.agent_server import AgentServer
from helix_agents.tracing import Tracer
from helix_agents.workspaces.base import WorkspaceProvider

__all__ = ["TemporalWorker", "temporal_server"]


class TemporalWorker:
    """Runs the agents' workflows and activities from ``options.task_queue`` on this process.

    Args:
        agents: the agents (sub-agents included by their tools), as for the executor.
        store: the store every session's log lives in (shared with the gateway).
        options: where Temporal is and the engine's knobs (:class:`TemporalOptions`).
        llm: the default model for agents that have none.
        client: a connected client (default: one connected from ``options``).
        max_concurrent_activities: activities this worker runs at once.
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
        options: TemporalOptions | None = None,
        *,
        llm: LLMAdapter | None = None,
        client: Client | None = None,
        max_concurrent_activities: int = 100,
        tracer: Tracer | None = None,
        workspace_providers: Mapping[str, WorkspaceProvider] | None = None,
        workspace_provider_kinds: Iterable[str] | None = None,
    ) -> None:
        listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
        self.options = options or TemporalOptions()
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
            beat_every=max(0.1, min(1.0, self.options.heartbeat_timeout / 4)),
        )
        self._client = client
        self._max_activities = max_concurrent_activities
        self.service: TemporalService | None = None
        self._worker: Worker | None = None

    async def __aenter__(self) -> TemporalWorker:
        client = self._client or await connect(self.options)
        self.service = attach(self.executor, client, self.options)
        await self.executor.__aenter__()
        try:
            self._worker = Worker(
                client,
                task_queue=self.options.task_queue,
                workflows=[AgentWorkflow],
                activities=HelixActivities(self.steps).all(),
                max_concurrent_activities=self._max_activities,
                workflow_runner=_RUNNER,
            )
            await self._worker.__aenter__()
        except BaseException:
            await self.executor.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            if self._worker is not None:
                with anyio.CancelScope(shield=True):
                    await self._worker.__aexit__(exc_type, exc, tb)
        finally:
            await self.executor.__aexit__(None, None, None)

    async def run(self) -> None:
        """Run until cancelled."""
        async with self:
            await anyio.sleep_forever()


_RUNNER = SandboxedWorkflowRunner(
    # The workflow imports only plain dataclasses from our package; the package
    # and what it imports are deterministic to import once, outside the sandbox.
    restrictions=SandboxRestrictions.default.with_passthrough_modules(
        "helix_agents", "msgspec", "pydantic", "anyio"
    )
)


class _Refusal:
    """A model stream that fails at once."""

    def __aiter__(self) -> _Refusal:
        return self

    async def __anext__(self) -> LLMStreamEvent:
        raise LLMError("the gateway runs no model: its sessions run on the Temporal workers")


class _NoModel:
    """The gateway's executor never calls a model: its runs happen on the workers."""

    def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        return _Refusal()


async def temporal_server(
    agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
    store: EventStore,
    options: TemporalOptions | None = None,
    *,
    owns_store: bool = False,
    client: Client | None = None,
    tracer: Tracer | None = None,
) -> AgentServer:
    """The ``AgentServer`` of a gateway whose sessions run as workflows on the workers.

    Its start, resume, follow-up and answers launch workflows; its interrupt
    and abort signal them; its streams and statuses read ``store``. It never
    recovers sessions itself: Temporal does. ``tracer``: a new session's trace
    begins here (its ``start_session`` span, or the caller's trace context),
    which the workers' spans of its runs continue.

    It runs no tool, so it takes no workspace providers (the workers do).

    Raises:
        TransportError: Temporal cannot be reached.
    """
    options = options or TemporalOptions()
    listed = list(agents.values()) if isinstance(agents, Mapping) else list(agents)
    server = AgentServer(
        listed, store, llm=_NoModel(), recover=False, owns_store=owns_store, tracer=tracer
    )
    attach(server.executor, client or await connect(options), options)
    return server
