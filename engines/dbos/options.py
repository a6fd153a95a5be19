"""``DbosOptions``: where DBOS keeps its state and how the workflows run."""

from __future__ import annotations

from dataclasses import dataclass

from helix_agents.engines.durable.options import DurableOptions

__all__ = ["WORKFLOW_VERSION", "DbosOptions"]

WORKFLOW_VERSION = "helix-agent-run-4"
"""The version of ``agent_run``'s decisions (bump it with any change to them)."""


@dataclass(frozen=True, kw_only=True)
class DbosOptions(DurableOptions):
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
        tool_policies: a :class:`~helix_agents.engines.durable.plan.ToolPolicy` by
            tool name (workers only: retries and timeout of that tool's steps).
        default_policy: the policy of every other tool (workers only).
    """

    system_database: str = "sqlite:///helix_dbos.sqlite"
    queue: str = "helix-agents"
    app_name: str = "helix-agents"
    executor_id: str | None = None
    polling_interval: float = 0.1
    takeover_after: float = 2.0
    app_version: str = WORKFLOW_VERSION
    log_level: str = "WARNING"
    drain: float = 2.0
