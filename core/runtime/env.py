"""``RunEnv``: what a run, and each sub-agent call in it, needs from its executor."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from helix_agents.log.store import EventStore
from helix_agents.memory.base import MemoryStore
from helix_agents.models.base import LLMAdapter
from helix_agents.models.connections import ModelHub
from helix_agents.runtime.toolsets import ToolsetHub
from helix_agents.tracing import NO_TRACER, Tracer
from helix_agents.transport import RemoteAgentTransport

__all__ = ["Fire", "RunEnv"]


async def _nothing(*_args: Any) -> None:
    return None


Fire = Callable[..., Awaitable[None]]
"""``fire(hook name, *args)``: call an agent's lifecycle hook (a failing hook is logged)."""


@dataclass(frozen=True, kw_only=True)
class RunEnv:
    """What a run needs from its executor."""

    store: EventStore
    llm: LLMAdapter | None
    llm_override: LLMAdapter | None
    local_transport: RemoteAgentTransport
    host_id: str | None = None
    stop_grace: float = 10.0
    tracer: Tracer = NO_TRACER
    keep_workspaces: Callable[[str, Any], Awaitable[None]] = _nothing
    """``(session id, workspaces)``: hold a companion's workspaces open across its runs."""
    release_workspaces: Callable[[str], Awaitable[None]] = _nothing
    """``(session id)``: let go of what ``keep_workspaces`` held (a terminated companion)."""
    toolsets: ToolsetHub | None = None
    """The executor's open toolsets; a run adds their tools to its agent's."""
    memory: MemoryStore | None = None
    """What tools reach through ``ctx.memory`` (None: none)."""
    models: ModelHub = field(default_factory=ModelHub)
    """The models the runs called: their HTTP clients are closed with the executor."""
