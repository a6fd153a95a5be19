"""How :class:`~helix_agents.engines.temporal.workflow.AgentWorkflow` calls its steps.

Each durable step is an activity: the short ones (a read of the log and a
few appends) local activities on the worker running the workflow, the long
ones (a model call, a tool, a child followed, a remote call) activities with
heartbeats, each with its retry policy. A tool call's activity takes its
tool's :class:`~helix_agents.engines.durable.plan.ToolPolicy`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from helix_agents.engines.durable.plan import Plan, ToolPolicy, ToolRound

__all__ = [
    "REMOTE",
    "STEP",
    "TOOL_ROUNDS",
    "WORKFLOW_NAME",
    "WorkflowInput",
    "call_step",
    "cause_of",
    "task_timeout",
    "tool_round_step",
    "tool_step",
]

TOOL_ROUNDS = "helix-tool-rounds"
"""The ``workflow.patched`` id of issue 35's rounds: opened by the step whose plan they
are, and a round of tool calls run and closed in one step (``specs/temporal.md``)."""

WORKFLOW_NAME = "helix_agent"
"""The workflow type's name (a session's run; a local child's run is one too)."""

STEP = RetryPolicy(
    initial_interval=timedelta(seconds=0.5),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=20,
    non_retryable_error_types=["StepFailed", "OwnershipLost"],
)
"""The retry policy of every step but a tool call's and a remote call's."""

REMOTE = RetryPolicy(
    initial_interval=timedelta(seconds=0.2),
    maximum_interval=timedelta(seconds=10),
    maximum_attempts=20,
    non_retryable_error_types=["StepFailed", "OwnershipLost", "RemoteAgentFailedError"],
)
"""A remote child's call: not retried once the remote agent failed."""

_LONG = timedelta(days=1)
_LOCAL = frozenset(
    {
        "helix_begin",
        "helix_round_open",
        "helix_round_close",
        "helix_child_open",
        "helix_tool_failed",
        "helix_expire",
    }
)
"""The short steps (a read of the log and a few appends): local activities."""


@dataclass
class WorkflowInput:
    """A run of ``session_id`` whose log ends at ``seq``, and the engine's timing knobs.

    ``heartbeat_timeout``: a long step (a model call, a tool, a child followed)
    silent this long is retried elsewhere (its worker is presumed dead).
    ``paused_wait``: how long a paused run waits for its ``resume`` signal
    before it ends (a later answer then starts a new run of the session).
    ``stop_grace``: how long a stopping run waits for its children.
    """

    session_id: str
    seq: int
    heartbeat_timeout: float = 2.0
    paused_wait: float = 7 * 24 * 3600.0
    stop_grace: float = 10.0


def task_timeout(heartbeat_timeout: float) -> timedelta:
    """A workflow task's timeout: twice the heartbeat timeout (``specs/temporal.md``, "Recovery").

    A worker killed inside a workflow task (a short step runs in it) holds it
    this long; a replay of the run's history must fit in it, so it is not cut
    as short as a heartbeat (the SDK heartbeats a long local activity itself).
    """
    return timedelta(seconds=2 * heartbeat_timeout)


async def call_step(
    run: WorkflowInput,
    name: str,
    arg: Any,
    result_type: type[Any],
    *,
    long: bool = False,
    seconds: float = 60.0,
    retry: RetryPolicy = STEP,
) -> Any:
    """Run step ``name`` on ``arg`` (a list: its arguments) and return its result."""
    args = arg if isinstance(arg, list) else [arg]
    if name in _LOCAL:
        # A short step runs as a local activity: on the worker running this
        # workflow, recorded in its history, no round trip through a task queue.
        return await workflow.execute_local_activity(
            name,
            args=args,
            result_type=result_type,
            start_to_close_timeout=timedelta(seconds=seconds),
            retry_policy=retry,
        )
    return await workflow.execute_activity(
        name,
        args=args,
        result_type=result_type,
        start_to_close_timeout=_LONG if long else timedelta(seconds=seconds),
        heartbeat_timeout=timedelta(seconds=run.heartbeat_timeout) if long else None,
        retry_policy=retry,
    )


def _tool_retry(policy: ToolPolicy) -> RetryPolicy:
    return RetryPolicy(
        initial_interval=timedelta(seconds=policy.initial_interval),
        backoff_coefficient=policy.backoff,
        maximum_interval=timedelta(seconds=policy.max_interval),
        maximum_attempts=policy.max_attempts,
        non_retryable_error_types=["StepFailed", "OwnershipLost"],
    )


async def tool_step(
    run: WorkflowInput, step: Any, policy: ToolPolicy, result_type: type[Any]
) -> Any:
    """Run a tool call's step with its tool's policy (retries, timeout)."""
    return await workflow.execute_activity(
        "helix_tool_call",
        step,
        result_type=result_type,
        start_to_close_timeout=timedelta(seconds=policy.timeout or 600.0),
        heartbeat_timeout=timedelta(seconds=run.heartbeat_timeout),
        retry_policy=_tool_retry(policy),
    )


async def tool_round_step(run: WorkflowInput, work: ToolRound, policy: ToolPolicy) -> Plan:
    """Run a round of tool calls sharing ``policy`` and close it, in one activity.

    A local activity when ``policy.local`` (no task-queue round trip; a dead
    worker is noticed at the workflow task's timeout), else a regular one that
    heartbeats (``specs/temporal.md``, "What a step costs").
    """
    timeout = timedelta(seconds=policy.timeout or 600.0)
    if policy.local:
        local: Plan = await workflow.execute_local_activity(
            "helix_tool_round",
            work,
            result_type=Plan,
            start_to_close_timeout=timeout,
            retry_policy=_tool_retry(policy),
        )
        return local
    ran: Plan = await workflow.execute_activity(
        "helix_tool_round",
        work,
        result_type=Plan,
        start_to_close_timeout=timeout,
        heartbeat_timeout=timedelta(seconds=run.heartbeat_timeout),
        retry_policy=_tool_retry(policy),
    )
    return ran


def cause_of(exc: ActivityError) -> str:
    """What failed a step whose retries are spent: its cause's message."""
    cause = exc.cause
    return str(cause) if cause is not None else str(exc)
