"""How :func:`~helix_agents.engines.dbos.workflow.agent_run` calls its steps.

Each durable step is :func:`DBOS.run_step_async` over a
:class:`~helix_agents.engines.durable.steps.DurableSteps` step, whose work
runs on the worker's own event loop (:class:`~helix_agents.engines.dbos.stephost.StepHost`),
with its retry options: a tool call's from its tool's
:class:`~helix_agents.engines.durable.plan.ToolPolicy`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from dbos import DBOS, StepOptions
from dbos._error import DBOSException, DBOSMaxStepRetriesExceeded, DBOSStepTimeoutError

from helix_agents.engines.dbos.stephost import current_host
from helix_agents.engines.durable.plan import TOOL_TIMEOUT, ToolPolicy
from helix_agents.engines.durable.reading import retryable

__all__ = ["STEP", "call_step", "spent", "tool_options"]

T = TypeVar("T")


def spent(error: Exception) -> bool:
    """Whether ``error`` is a step that failed for good (not DBOS's own trouble, which propagates).

    A step's own error (non-retryable), its retries spent, or its timeout.
    """
    if isinstance(error, DBOSMaxStepRetriesExceeded | DBOSStepTimeoutError):
        return True
    return not isinstance(error, DBOSException)


STEP: StepOptions = {  # every step but a tool call's
    "retries_allowed": True,
    "max_attempts": 20,
    "interval_seconds": 0.2,
    "backoff_rate": 2.0,
    "should_retry": retryable,
}


async def call_step(name: str, work: Callable[[], Awaitable[T]], options: StepOptions = STEP) -> T:
    """Run step ``name`` (its work: ``work``, on the worker's loop) and return its result."""
    host = current_host()

    async def run() -> T:
        return await host.call(work)

    result: T = await DBOS.run_step_async({**options, "name": name}, run)
    return result


def tool_options(policy: ToolPolicy) -> StepOptions:
    """A tool call's step options, from its tool's policy (retries, timeout)."""
    return {
        "retries_allowed": policy.max_attempts > 1,
        "max_attempts": max(1, policy.max_attempts),
        "interval_seconds": policy.initial_interval,
        "backoff_rate": policy.backoff,
        "should_retry": retryable,
        "timeout_seconds": policy.timeout or TOOL_TIMEOUT,
    }
