"""The runtime: running sessions on an event store.

``executor`` (``AgentExecutor``; ``Runtime``, which runtime runs its
sessions), ``runs`` (the owner of running sessions), ``decide`` (a run's
decisions: ``next_action``, for every runtime), ``actions`` (``RunActions``:
the decisions carried out on the log), ``run_loop`` (``SessionRun``, the
built-in driver), ``writer`` (a run's one gateway to the log),
``tool_runner``, ``env``, ``service`` (the remote-agent protocol implemented
once; ``RuntimeParts``, what a runtime gives it), ``starts``, ``recovery``,
``handle``, ``sync`` (``run_sync``). :class:`InProcessTransport` (how local
sub-agents are reached) lives with the children (``children/inprocess.py``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.children.inprocess import (
        InProcessTransport as InProcessTransport,
    )
    from helix_agents.runtime.executor import (
        AgentExecutor as AgentExecutor,
        RunGuard as RunGuard,
        Runtime as Runtime,
        TakeoverClaim as TakeoverClaim,
    )
    from helix_agents.runtime.handle import (
        AgentHandle as AgentHandle,
        AgentResult as AgentResult,
    )
    from helix_agents.runtime.service import (
        ExecutorService as ExecutorService,
        RuntimeParts as RuntimeParts,
    )
    from helix_agents.runtime.sync import (
        run_sync as run_sync,
    )

_HOMES = {
    "AgentExecutor": "helix_agents.runtime.executor",
    "RunGuard": "helix_agents.runtime.executor",
    "Runtime": "helix_agents.runtime.executor",
    "TakeoverClaim": "helix_agents.runtime.executor",
    "AgentHandle": "helix_agents.runtime.handle",
    "AgentResult": "helix_agents.runtime.handle",
    "InProcessTransport": "helix_agents.children.inprocess",
    "run_sync": "helix_agents.runtime.sync",
    "ExecutorService": "helix_agents.runtime.service",
    "RuntimeParts": "helix_agents.runtime.service",
}
__all__ = [
    "AgentExecutor",
    "RunGuard",
    "Runtime",
    "RuntimeParts",
    "TakeoverClaim",
    "AgentHandle",
    "AgentResult",
    "InProcessTransport",
    "run_sync",
    "ExecutorService",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
