"""Evals from recorded sessions: re-run production runs against today's agents, and score them.

- **cases**: :func:`cases_from_store` (the session search: words, metadata,
  time ranges) or :func:`cases_from_files` (exported ``.jsonl`` logs).
- **a run**: :func:`run_eval` (and :func:`evaluate`, its sync form) re-runs
  each case as a branch in the store, ``<case>.eval-<label>``: today's agents
  (or another model), tools and remote children answered from the recording
  where the call matches, live where named.
- **scores**: :data:`BUILT_IN_SCORERS` (output equal, output valid against
  the agent's schema, the same tool calls in order, token and cost deltas)
  and any plain callable of a :class:`CaseRun`.
- **reports**: :func:`report_lines` (a table), :func:`report_json`,
  :func:`report_junit`; :func:`assert_passed` for a test.

``helix-agents eval`` is the command line; the ``helix_eval`` pytest fixture
the test suite's way in. Specified in specs/evals.md.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

import anyio

from helix_agents import AgentConfig
from helix_agents.agents import AgentRegistry
from helix_agents.log.pricing import Prices
from helix_agents.log.search import SessionQuery
from helix_agents.log.store import EventStore
from helix_agents.models.base import LLMAdapter
from helix_agents.testing.evals.answers import RecordedCalls, answer_from_recording
from helix_agents.testing.evals.cases import (
    EvalCase,
    cases_from_files,
    cases_from_store,
    is_branch,
)
from helix_agents.testing.evals.model import CaseResult, CaseVerdict, EvalReport, Parting, Score
from helix_agents.testing.evals.report import (
    report_json,
    report_junit,
    report_lines,
    summary_line,
)
from helix_agents.testing.evals.run import DEFAULT_CASE_TIMEOUT, branch_id, run_eval
from helix_agents.testing.evals.scorers import (
    BUILT_IN_SCORERS,
    CaseRun,
    Scorer,
    ScoreValue,
    cost_delta,
    output_equal,
    output_valid,
    same_tool_calls,
    token_delta,
    tool_calls_of,
)

__all__ = [
    "BUILT_IN_SCORERS",
    "DEFAULT_CASE_TIMEOUT",
    "CaseResult",
    "CaseRun",
    "CaseVerdict",
    "EvalCase",
    "EvalReport",
    "Parting",
    "RecordedCalls",
    "Score",
    "ScoreValue",
    "Scorer",
    "answer_from_recording",
    "assert_passed",
    "branch_id",
    "cases_from_files",
    "cases_from_store",
    "cost_delta",
    "evaluate",
    "is_branch",
    "output_equal",
    "output_valid",
    "report_json",
    "report_junit",
    "report_lines",
    "run_eval",
    "same_tool_calls",
    "summary_line",
    "token_delta",
    "tool_calls_of",
]


def assert_passed(report: EvalReport) -> None:
    """Raise ``AssertionError`` with the report's table unless every case passed."""
    if not report.ok:
        shown = report_lines(report) if report.cases else ["no cases"]
        raise AssertionError("the eval did not pass:\n" + "\n".join(shown))


async def _evaluate(
    store: EventStore,
    agents: AgentRegistry | Sequence[AgentConfig],
    query: SessionQuery | None,
    session_ids: Sequence[str],
    files: Sequence[str],
    model: LLMAdapter | None,
    live: Collection[str],
    scorers: Sequence[Scorer],
    prices: Prices | None,
    limit: int,
) -> EvalReport:
    cases = (
        cases_from_files(files)
        if files
        else await cases_from_store(store, query=query, session_ids=session_ids, limit=limit)
    )
    return await run_eval(
        store, agents, cases, model=model, live=live, scorers=scorers, prices=prices
    )


def evaluate(
    store: EventStore,
    agents: AgentRegistry | Sequence[AgentConfig],
    *,
    query: SessionQuery | None = None,
    session_ids: Sequence[str] = (),
    files: Sequence[str] = (),
    model: LLMAdapter | None = None,
    live: Collection[str] = (),
    scorers: Sequence[Scorer] = BUILT_IN_SCORERS,
    prices: Prices | None = None,
    limit: int = 1000,
) -> EvalReport:
    """Choose cases and run the eval, from sync code (a test); see :func:`run_eval`.

    The cases are ``files`` if given, else ``session_ids``, else the root
    sessions of ``store`` matching ``query``. Branches are written to ``store``.
    """
    return anyio.run(
        _evaluate,
        store,
        agents,
        query,
        session_ids,
        files,
        model,
        live,
        scorers,
        prices,
        limit,
    )
