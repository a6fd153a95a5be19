"""Durable runtimes' shared half: a session's run as durable steps over one log.

An engine (``helix_agents.temporal``, ``helix_agents.dbos``) supplies the workflow that
drives the steps and records their results; :class:`DurableSteps` does the
work of each step on the session's log, exactly once (``specs/temporal.md``).
"""

from __future__ import annotations

from helix_agents.durable.calls import CallSteps
from helix_agents.durable.kit import Beat, StepKit
from helix_agents.durable.launches import Launch, collect_launches, deferred_launch
from helix_agents.durable.plan import (
    CallJob,
    ChildOpened,
    JobDone,
    Plan,
    Round,
    RoundEnd,
    RunInput,
    StepInput,
    StopInput,
    ToolPolicy,
)
from helix_agents.durable.reading import StepFailed, plan_of, refuse_unsupported
from helix_agents.durable.service import DurableService
from helix_agents.durable.steps import DurableSteps
from helix_agents.durable.waits import WaitLook, WaitSteps, waits_on

__all__ = [
    "Beat",
    "CallJob",
    "CallSteps",
    "ChildOpened",
    "DurableService",
    "DurableSteps",
    "JobDone",
    "Launch",
    "Plan",
    "Round",
    "RoundEnd",
    "RunInput",
    "StepFailed",
    "StepInput",
    "StepKit",
    "StopInput",
    "ToolPolicy",
    "WaitLook",
    "WaitSteps",
    "collect_launches",
    "deferred_launch",
    "plan_of",
    "refuse_unsupported",
    "waits_on",
]
