"""Usage rollups: a session's usage plus, optionally, every descendant's, each counted once."""

from __future__ import annotations

import msgspec

from .projections import project_state
from .store import EventStore

__all__ = ["UsageRollup", "get_usage_rollup"]


class UsageRollup(msgspec.Struct, kw_only=True, rename="camel"):
    """Usage summed over a session and (optionally) its sub-sessions."""

    session_id: str
    input_tokens: int = 0
    output_tokens: int = 0
    llm_calls: int = 0
    tool_calls: int = 0
    sub_agent_calls: int = 0
    custom: dict[str, float] = {}
    sessions: list[str] = []
    """Every session counted, root first."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


async def get_usage_rollup(
    store: EventStore, session_id: str, *, include_sub_agents: bool = True
) -> UsageRollup:
    """Sum the usage recorded in ``session_id``'s log and, recursively, its children's.

    Each session is counted once, however many times it was resumed or
    re-consulted, and whatever path reaches it. Children whose logs live in
    another store (remote sub-agents) are not reachable here and are skipped.
    """
    rollup = UsageRollup(session_id=session_id)
    queue = [session_id]
    seen: set[str] = set()
    while queue:
        current = queue.pop(0)
        if current in seen:
            continue
        seen.add(current)
        log = await store.read(current)
        if not log:
            continue
        state = project_state(log)
        usage = state.usage
        rollup.input_tokens += usage.input_tokens
        rollup.output_tokens += usage.output_tokens
        rollup.llm_calls += usage.llm_calls
        rollup.tool_calls += usage.tool_calls
        rollup.sub_agent_calls += usage.sub_agent_calls
        for name, value in usage.custom.items():
            rollup.custom[name] = rollup.custom.get(name, 0.0) + value
        rollup.sessions.append(current)
        if include_sub_agents:
            queue.extend(ref_id for ref_id, ref in state.sub_sessions.items() if ref.remote is None)
    return rollup
