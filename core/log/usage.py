"""Usage rollups: a session's usage plus, optionally, every descendant's, each counted once.

A rollup also says what the tokens cost (``helix_agents.log.pricing``): each
session's LLM calls at their model's (or their agent's) price, ``None`` when a
call that used tokens has no price.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping

import msgspec

from helix_agents.log.pricing import Cost, Prices
from helix_agents.log.projections import project_state
from helix_agents.log.state import ModelTokens, SessionState, SubSessionRef, UsageTotals
from helix_agents.log.store import EventStore

__all__ = ["RemoteUsage", "UsageRollup", "get_usage_rollup"]

RemoteUsage = Callable[
    [SessionState, SubSessionRef], Awaitable[UsageTotals | Mapping[str, UsageTotals] | None]
]
"""``remote(parent state, child ref)``: a remote child's own usage, asked of its server;
or, by session id, the usage of the child and of the descendants its server holds."""


class UsageRollup(msgspec.Struct, kw_only=True, rename="camel"):
    """Usage summed over a session and (optionally) its sub-sessions."""

    session_id: str
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    """Of ``input_tokens``, those read from the providers' prompt caches."""
    reasoning_tokens: int = 0
    """Of ``output_tokens``, those spent on reasoning (thinking)."""
    llm_calls: int = 0
    tool_calls: int = 0
    sub_agent_calls: int = 0
    custom: dict[str, float] = {}
    models: dict[str, ModelTokens] = {}
    """The LLM calls' tokens by the model name the provider reported, over every session."""
    cost_usd: float | None = 0.0
    """What the tokens cost in USD; ``None`` when a call that used tokens has no price
    (``unpriced_models`` says which models), never an estimate."""
    unpriced_models: list[str] = []
    sessions: list[str] = []
    """Every session counted, root first."""

    @property
    def total_tokens(self) -> int:
        """Input plus output tokens."""
        return self.input_tokens + self.output_tokens


async def get_usage_rollup(
    store: EventStore,
    session_id: str,
    *,
    include_sub_agents: bool = True,
    remote: RemoteUsage | None = None,
    prices: Prices | None = None,
) -> UsageRollup:
    """Sum the usage recorded in ``session_id``'s log and, recursively, its children's.

    Each session is counted once, however many times it was resumed or
    re-consulted (a companion's rounds are one session), and whatever path
    reaches it. A child whose log lives in another store (a remote sub-agent or
    companion) is counted through ``remote`` (its own usage, from its server's
    status; ``AgentExecutor.usage_rollup`` wires it), or skipped without it.
    ``prices`` prices the tokens (``None``: the built-in defaults only).
    """
    prices = Prices() if prices is None else prices
    rollup = UsageRollup(session_id=session_id)
    cost = Cost()
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
        _add(rollup, current, state.usage)
        cost.add(prices.cost(state.usage, state.agent_type))
        if not include_sub_agents:
            continue
        for ref_id, ref in state.sub_sessions.items():
            if ref.remote is None:
                queue.append(ref_id)
            elif remote is not None and ref_id not in seen:
                seen.add(ref_id)
                usage = await remote(state, ref)
                if isinstance(usage, UsageTotals):
                    _add(rollup, ref_id, usage)
                    cost.add(prices.cost(usage, ref.agent_type))
                elif usage is not None:
                    for remote_id, totals in usage.items():
                        if remote_id == ref_id or remote_id not in seen:
                            seen.add(remote_id)
                            _add(rollup, remote_id, totals)
                            agent_type = ref.agent_type if remote_id == ref_id else None
                            cost.add(prices.cost(totals, agent_type))
    rollup.cost_usd, rollup.unpriced_models = cost.usd, cost.unpriced
    return rollup


def _add(rollup: UsageRollup, session_id: str, usage: UsageTotals) -> None:
    rollup.input_tokens += usage.input_tokens
    rollup.output_tokens += usage.output_tokens
    rollup.cached_input_tokens += usage.cached_input_tokens
    rollup.reasoning_tokens += usage.reasoning_tokens
    rollup.llm_calls += usage.llm_calls
    rollup.tool_calls += usage.tool_calls
    rollup.sub_agent_calls += usage.sub_agent_calls
    for name, value in usage.custom.items():
        rollup.custom[name] = rollup.custom.get(name, 0.0) + value
    for model, tokens in usage.models.items():
        total = rollup.models.setdefault(model, ModelTokens())
        total.input_tokens += tokens.input_tokens
        total.output_tokens += tokens.output_tokens
        total.cached_input_tokens += tokens.cached_input_tokens
        total.reasoning_tokens += tokens.reasoning_tokens
        total.llm_calls += tokens.llm_calls
    rollup.sessions.append(session_id)
