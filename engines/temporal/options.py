"""``TemporalOptions``: where the workflows run and how."""

from __future__ import annotations

from dataclasses import dataclass

from helix_agents.engines.durable.options import DurableOptions
from helix_agents.errors import UsageError

__all__ = ["TemporalOptions"]


@dataclass(frozen=True, kw_only=True)
class TemporalOptions(DurableOptions):
    """Where the workflows run and how (give the gateway and the workers the same).

    Args:
        address: the Temporal frontend, ``host:port``.
        namespace: the Temporal namespace.
        task_queue: the task queue the workers poll and the launcher starts on.
        heartbeat_timeout: seconds a worker may stay silent before its work moves to
            another: a long step's heartbeat timeout; a workflow task's timeout is
            twice it, a sticky task waits half of it for its worker
            (``specs/temporal.md``, "Recovery"). The gateway's value is the one a
            run's workflow uses; give the workers the same.
        max_concurrent_activities: activities a worker runs at once (workers only).
        paused_wait: seconds a paused run waits for its resume signal.
        stop_grace: seconds a stopping run waits for its children.
        tool_policies: a :class:`~helix_agents.engines.durable.plan.ToolPolicy` by
            tool name (workers only: retries and timeout of that tool's activity).
        default_policy: the policy of every other tool (workers only).
    """

    address: str = "127.0.0.1:7233"
    namespace: str = "default"
    task_queue: str = "helix-agents"
    heartbeat_timeout: float = 2.0
    max_concurrent_activities: int = 100

    def __post_init__(self) -> None:
        if not self.heartbeat_timeout > 0:
            raise UsageError("heartbeat_timeout must be above 0")
