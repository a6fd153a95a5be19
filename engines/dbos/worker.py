"""``DbosWorker``: this process runs the agents' sessions as DBOS workflows.

``DbosWorker(agents, store, options)``: ``async with`` it (or ``await
worker.run()``) to launch DBOS and run the workflows of ``options.queue`` on
this process, appending to ``store``. A gateway's server runs workflows too:
:func:`~helix_agents.engines.dbos.runtime.dbos_server`.
"""

from __future__ import annotations

from helix_agents.engines.dbos.options import DbosOptions
from helix_agents.engines.dbos.runtime import DbosRuntime
from helix_agents.engines.durable.worker import DurableWorker
from helix_agents.runtime.executor import Runtime

__all__ = ["DbosWorker"]


class DbosWorker(DurableWorker[DbosOptions]):
    """Runs the agents' sessions as DBOS workflows on this process (``async with``).

    Arguments as :class:`~helix_agents.engines.durable.worker.DurableWorker`'s;
    ``options`` is a :class:`DbosOptions`. Its runtime is a ``DbosRuntime(options)``.
    """

    def _default_options(self) -> DbosOptions:
        return DbosOptions()

    def _runtime(self, options: DbosOptions) -> Runtime:
        return DbosRuntime(options)
