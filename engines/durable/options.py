"""``DurableOptions``: the knobs every durable engine's options share."""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_agents.engines.durable.plan import ToolPolicy

__all__ = ["DurableOptions"]


@dataclass(frozen=True, kw_only=True)
class DurableOptions:
    """What every durable engine's options have (``TemporalOptions``, ``DbosOptions``).

    Args:
        paused_wait: seconds a paused run waits for its resume.
        stop_grace: seconds a stopping run waits for its children.
        tool_policies: a :class:`~helix_agents.engines.durable.plan.ToolPolicy` by
            tool name (workers only: retries and timeout of that tool's steps).
        default_policy: the policy of every other tool (workers only).
    """

    paused_wait: float = 7 * 24 * 3600.0
    stop_grace: float = 10.0
    tool_policies: dict[str, ToolPolicy] = field(default_factory=dict)
    default_policy: ToolPolicy = field(default_factory=ToolPolicy)
