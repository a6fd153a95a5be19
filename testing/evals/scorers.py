"""Scorers: what a case is judged on. Built-in ones, and any plain Python callable of yours.

A scorer takes a :class:`CaseRun` (the recording and the branch, their
states, their logs, their diff, their usage) and returns ``True``/``False``
(pass or fail), a number (a measure: it passes, and is shown), a
:class:`~helix_agents.testing.evals.Score` (its own verdict and detail), or
an awaitable of one of these. A scorer that raises fails its case's score
with the exception's line. Its name is the callable's ``__name__``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from helix_agents import AgentConfig
from helix_agents.events import Event, MessageAppended
from helix_agents.log.diff import LogDiff
from helix_agents.log.state import SessionState
from helix_agents.log.usage import UsageRollup
from helix_agents.messages import AssistantMessage
from helix_agents.testing.evals.answers import canonical
from helix_agents.testing.evals.cases import EvalCase
from helix_agents.testing.evals.model import Score

__all__ = [
    "BUILT_IN_SCORERS",
    "CaseRun",
    "ScoreValue",
    "Scorer",
    "cost_delta",
    "output_equal",
    "output_valid",
    "same_tool_calls",
    "token_delta",
    "tool_calls_of",
]


@dataclass
class CaseRun:
    """What a scorer sees of one case: the recording, the branch, and how they compare."""

    case: EvalCase
    agent: AgentConfig | None
    """Today's agent of the case's type, as given (before its tools were answered)."""
    branch_id: str
    recorded: SessionState
    branch: SessionState
    recorded_events: list[Event]
    branch_events: list[Event]
    diff: LogDiff
    recorded_usage: UsageRollup
    """The recorded tree's usage and cost (local children included)."""
    branch_usage: UsageRollup
    """The branch tree's."""


ScoreValue = bool | float | int | Score | None
"""What a scorer returns (None: a pass with nothing to say)."""

Scorer = Callable[[CaseRun], ScoreValue | Awaitable[ScoreValue]]
"""A scorer: a plain callable of a :class:`CaseRun`, sync or async."""


def _shown(value: Any) -> str:
    text = canonical(value)
    return text if len(text) <= 120 else text[:117] + "..."


def output_equal(run: CaseRun) -> Score:
    """The branch ended as the recording did, with the same output (as JSON)."""
    same_status = run.recorded.status == run.branch.status
    same = same_status and canonical(run.recorded.output) == canonical(run.branch.output)
    detail = (
        ""
        if same
        else f"recorded {run.recorded.status} {_shown(run.recorded.output)}; "
        f"branch {run.branch.status} {_shown(run.branch.output)}"
    )
    return Score(name="output_equal", passed=same, detail=detail)


def output_valid(run: CaseRun) -> Score:
    """The branch completed with an output valid against today's agent's output schema."""
    schema = run.agent.output_schema if run.agent is not None else None
    if run.branch.status != "completed":
        detail = f"the branch ended {run.branch.status}"
        if run.branch.error:
            detail += f": {run.branch.error[:200]}"
        return Score(name="output_valid", passed=False, detail=detail)
    if schema is None:
        return Score(name="output_valid", passed=True, detail="no output schema")
    try:
        schema.model_validate(run.branch.output)
    except ValidationError as exc:
        first = exc.errors()[0] if exc.errors() else {"msg": str(exc), "loc": ()}
        where = ".".join(str(part) for part in first.get("loc", ())) or "output"
        return Score(name="output_valid", passed=False, detail=f"{where}: {first['msg']}")
    return Score(name="output_valid", passed=True)


def tool_calls_of(events: Sequence[Event]) -> list[tuple[str, str]]:
    """A session's tool calls in order: ``(name, canonical JSON arguments)``, finishes left out."""
    return [
        (call.name, canonical(call.arguments))
        for event in events
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage)
        for call in event.message.tool_calls
        if not call.name.startswith("__")
    ]


def same_tool_calls(run: CaseRun) -> Score:
    """The branch called the same tools, with the same arguments, in the same order."""
    recorded, branch = tool_calls_of(run.recorded_events), tool_calls_of(run.branch_events)
    if recorded == branch:
        return Score(name="same_tool_calls", passed=True, detail=f"{len(branch)} calls")
    index = next(
        (i for i, (a, b) in enumerate(zip(recorded, branch, strict=False)) if a != b),
        min(len(recorded), len(branch)),
    )

    def call(calls: list[tuple[str, str]]) -> str:
        return f"{calls[index][0]}({calls[index][1][:80]})" if index < len(calls) else "none"

    return Score(
        name="same_tool_calls",
        passed=False,
        detail=f"call {index + 1}: recorded {call(recorded)}, branch {call(branch)}",
    )


def token_delta(run: CaseRun) -> Score:
    """The branch tree's tokens minus the recording's (a measure: it passes)."""
    before, after = run.recorded_usage, run.branch_usage
    delta = after.total_tokens - before.total_tokens
    return Score(
        name="token_delta",
        passed=True,
        value=float(delta),
        detail=f"in {before.input_tokens}->{after.input_tokens}, "
        f"out {before.output_tokens}->{after.output_tokens}",
    )


def cost_delta(run: CaseRun) -> Score:
    """The branch tree's cost in USD minus the recording's (a measure; unknown without prices)."""
    before, after = run.recorded_usage.cost_usd, run.branch_usage.cost_usd
    if before is None or after is None:
        unpriced = sorted({*run.recorded_usage.unpriced_models, *run.branch_usage.unpriced_models})
        return Score(
            name="cost_delta", passed=True, detail=f"unknown: no price for {', '.join(unpriced)}"
        )
    return Score(
        name="cost_delta", passed=True, value=after - before, detail=f"${before:.6f}->${after:.6f}"
    )


BUILT_IN_SCORERS: tuple[Scorer, ...] = (
    output_equal,
    output_valid,
    same_tool_calls,
    token_delta,
    cost_delta,
)
"""The scorers every eval runs unless told otherwise, in their column order."""
