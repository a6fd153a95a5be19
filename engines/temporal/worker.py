"""``TemporalWorker``: this process runs the agents' sessions as Temporal workflows.

``TemporalWorker(agents, store, options)``: ``async with`` it (or ``await
worker.run()``) to poll the task queue and run :class:`AgentWorkflow` and its
activities on this process, appending to ``store`` (the store the gateway
reads). The gateway's server is :func:`~helix_agents.engines.temporal.runtime.temporal_server`.
"""

from __future__ import annotations

from helix_agents.engines.durable.worker import DurableWorker
from helix_agents.engines.temporal.options import TemporalOptions
from helix_agents.engines.temporal.runtime import TemporalRuntime
from helix_agents.runtime.executor import Runtime

__all__ = ["TemporalWorker"]


class TemporalWorker(DurableWorker[TemporalOptions]):
    """Runs the agents' workflows and activities from ``options.task_queue`` on this process.

    Arguments as :class:`~helix_agents.engines.durable.worker.DurableWorker`'s;
    ``options`` is a :class:`TemporalOptions`. Its runtime is a
    ``TemporalRuntime(options, worker=True)``.
    """

    def _default_options(self) -> TemporalOptions:
        return TemporalOptions()

    def _runtime(self, options: TemporalOptions) -> Runtime:
        return TemporalRuntime(options, worker=True)
