"""``TemporalRuntime``: an executor's sessions run as Temporal workflows.

Given to the executor when it is built (``AgentExecutor(..., runtime=...)``,
``AgentServer(..., runtime=...)``): its service launches runs as workflows
and signals their stops (``service.py``). A gateway's runtime runs no model
and no tool: its executor only starts, stops and reads sessions. A worker's
(``worker=True``, what :class:`~helix_agents.engines.temporal.worker.TemporalWorker`
makes) also polls the task queue and runs the workflows and their
activities on this process. Either connects to Temporal when its executor
is entered. :func:`temporal_server` is the gateway's ``AgentServer``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta

import anyio
from temporalio.client import Client
from temporalio.worker import Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from helix_agents.agents.config import AgentConfig
from helix_agents.engines.durable.steps import DurableSteps
from helix_agents.engines.durable.worker import bind_once
from helix_agents.engines.temporal.activities import HelixActivities
from helix_agents.engines.temporal.options import TemporalOptions
from helix_agents.engines.temporal.schedules import (
    ScheduleTickWorkflow,
    TemporalSchedules,
    TickActivities,
)
from helix_agents.engines.temporal.service import (
    TemporalConnection,
    TemporalLauncher,
    TemporalService,
)
from helix_agents.engines.temporal.workflow import AgentWorkflow
from helix_agents.log.store import EventStore
from helix_agents.runtime.executor import AgentExecutor
from helix_agents.runtime.service import RuntimeParts
from helix_agents.server.agent_server import AgentServer
from helix_agents.tracing import Tracer

__all__ = ["TemporalRuntime", "temporal_server"]


class TemporalRuntime:
    """Runs an executor's sessions as Temporal workflows (a ``Runtime``; see the module doc).

    Args:
        options: where Temporal is and the engine's knobs (:class:`TemporalOptions`).
        client: a connected client (default: one connected from ``options``
            when the executor is entered; ``TransportError`` if it cannot be).
        worker: this process also runs the workflows and their activities
            (it runs the models then); False: a gateway's, which runs no model.
    """

    def __init__(
        self,
        options: TemporalOptions | None = None,
        *,
        client: Client | None = None,
        worker: bool = False,
    ) -> None:
        self.options = options or TemporalOptions()
        self.connection = TemporalConnection(self.options, client)
        """The client the service and the launcher share."""
        self.engine_schedules = TemporalSchedules(self.connection, self.options)
        """The schedules as Temporal Schedules (specs/server.md, "Schedules")."""
        self.worker = worker
        self.steps: DurableSteps | None = None
        """The activities' work, over the executor (a worker's only)."""
        self._executor: AgentExecutor | None = None

    @property
    def runs_models(self) -> bool:
        """True for a worker's runtime; a gateway's runs no model (its workers do)."""
        return self.worker

    @property
    def recovers_sessions(self) -> bool:
        """True: Temporal recovers the workflows, not the server."""
        return True

    def bind(self, executor: AgentExecutor) -> RuntimeParts:
        """The Temporal service and launcher of ``executor`` (and a worker's steps over it)."""
        bind_once(self, self._executor)
        if self.worker:
            self.steps = DurableSteps(
                executor,
                tool_policies=self.options.tool_policies,
                default_policy=self.options.default_policy,
                beat_every=max(0.1, min(1.0, self.options.heartbeat_timeout / 4)),
            )
        self._executor = executor
        return RuntimeParts(
            service=TemporalService(executor.runs, self.connection),
            launcher=TemporalLauncher(self.connection),
            stop_grace=self.options.stop_grace,
        )

    @asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Connected to Temporal in the block; a worker's polls its task queue meanwhile."""
        await self.connection.open()
        try:
            if self.steps is None:
                yield
                return
            # A workflow task waiting for this worker (its sticky queue: the worker
            # caches the run) goes to any worker after half the heartbeat timeout: a
            # killed worker's runs move on at once (specs/temporal.md, "Recovery").
            half = timedelta(seconds=self.options.heartbeat_timeout / 2)
            assert self._executor is not None
            worker = Worker(
                self.connection.client,
                task_queue=self.options.task_queue,
                workflows=[AgentWorkflow, ScheduleTickWorkflow],
                activities=[
                    *HelixActivities(self.steps).all(),
                    TickActivities(self._executor).fire,
                ],
                max_concurrent_activities=self.options.max_concurrent_activities,
                workflow_runner=_RUNNER,
                sticky_queue_schedule_to_start_timeout=half,
            )
            await worker.__aenter__()
            try:
                yield
            finally:
                with anyio.CancelScope(shield=True):
                    await worker.__aexit__(None, None, None)
        finally:
            self.connection.close()


_RUNNER = SandboxedWorkflowRunner(
    # The workflow imports only plain dataclasses from our package; the package
    # and what it imports are deterministic to import once, outside the sandbox.
    restrictions=SandboxRestrictions.default.with_passthrough_modules(
        "helix_agents", "msgspec", "pydantic", "anyio"
    )
)


def temporal_server(
    agents: Iterable[AgentConfig] | Mapping[str, AgentConfig],
    store: EventStore,
    options: TemporalOptions | None = None,
    *,
    owns_store: bool = False,
    client: Client | None = None,
    tracer: Tracer | None = None,
) -> AgentServer:
    """The ``AgentServer`` of a gateway whose sessions run as workflows on the workers.

    ``AgentServer(agents, store, runtime=TemporalRuntime(options, client=client))``:
    it connects to Temporal on ``async with``. Its start, resume, follow-up
    and answers launch workflows; its interrupt and abort signal them; its
    streams and statuses read ``store``. It never recovers sessions itself:
    Temporal does. ``tracer``: a new session's trace begins here (its
    ``start_session`` span, or the caller's trace context), which the
    workers' spans of its runs continue. It runs no model and no tool, so it
    takes neither a model nor workspace providers (the workers do).
    """
    runtime = TemporalRuntime(options, client=client)
    return AgentServer(agents, store, runtime=runtime, owns_store=owns_store, tracer=tracer)
