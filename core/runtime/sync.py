"""``run_sync``: run an agent to its end from synchronous code (a script, a notebook cell)."""

from __future__ import annotations

from typing import Any

import anyio

from helix_agents._aio import api_error
from helix_agents.agents.config import AgentConfig, OutputT
from helix_agents.errors import UsageError
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.runtime.executor import AgentExecutor

__all__ = ["run_sync"]


def run_sync(
    agent: AgentConfig[OutputT],
    message_or_input: Any,
    *,
    store: EventStore,
    llm: LLMAdapter | None = None,
    session_id: str | None = None,
    state: dict[str, Any] | None = None,
    metadata: dict[str, str] | None = None,
    strict: bool = False,
) -> OutputT:
    """Run ``agent`` on ``store`` to its end and return its output, blocking.

    ``findings = run_sync(researcher, "Why event logs?", store=MemoryEventStore())``.
    An executor is opened for the one run and closed after it; the store is
    not closed (it may be used again). The output is an instance of the
    agent's ``output_schema`` (else the final text). Errors are the library's
    own (a :class:`~helix_agents.errors.HelixError`, never an exception
    group), their causes kept and their tracebacks cut to the caller's frames:
    what went wrong reads in a line under the caller's own.

    Args:
        agent: the agent (its sub-agents are registered with it).
        message_or_input: a message (a string) or an input (a dict).
        store: where the session's log goes (``MemoryEventStore()`` for a
            throwaway run, a SQLite store to keep it).
        llm: a default model for agents defined without one.
        session_id: the session's id (default: a new one).
        state: the custom state the session starts with.
        metadata: string metadata stored with the session.
        strict: fail the run (and its children's) at its first problem: a tool
            error, an unknown tool, a failed child, a rejected output.

    Raises:
        AgentRunError: the run failed, was interrupted, or paused waiting for a
            person (use ``AgentExecutor.execute`` to answer).
        UsageError: called from async code (``await executor.run(...)`` there),
            an agent that has no model, or a model by name whose variable is
            not set (``OPENAI_API_KEY``).
    """
    try:
        anyio.get_current_task()
    except RuntimeError:
        pass  # no event loop here: the case run_sync is for
    else:
        raise UsageError(
            "run_sync() cannot run inside an event loop; in async code use "
            "'async with AgentExecutor(store, [agent]) as executor: await executor.run(...)'"
        )

    async def run() -> OutputT:
        async with AgentExecutor(store, [agent], llm=llm) as executor:
            return await executor.run(
                agent,
                message_or_input,
                session_id=session_id,
                state=state,
                metadata=metadata,
                strict=strict,
            )

    try:
        return anyio.run(run)
    except Exception as exc:
        error = api_error(exc)
        if error is None:
            raise
    raise error  # out of the handler: no event-loop frames, no context added
