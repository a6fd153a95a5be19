"""Running an eval: each case re-run as a branch in the store, then scored.

A case's branch, ``<case>.eval-<label>``, is a fork of the recording at its
first user turn (``AgentExecutor.fork``), in the same store (so the inspector
and ``helix-agents diff`` can open it), run on by today's agents (or with
``model`` answering every model call). A case read from a file (its
recording not in the store) is a new session with the recorded agent type,
input, state and metadata instead. The branch's tools and
remote children are answered from the recording where the call matches
(``answers.py``), live where named in ``live``. Each later run of the
recording (a follow-up message, a resume) is sent again in order.
"""

from __future__ import annotations

import inspect
import time
import uuid
from collections.abc import Collection, Sequence
from typing import Any

import anyio

from helix_agents import AgentConfig, AgentExecutor
from helix_agents.agents import AgentRegistry
from helix_agents.errors import AgentServerError
from helix_agents.events import Event, RunStarted
from helix_agents.ids import MAX_SESSION_ID_LENGTH
from helix_agents.log.diff import diff_logs, first_user_turn
from helix_agents.log.pricing import Cost, Prices
from helix_agents.log.projections import project_state
from helix_agents.log.store import EventStore
from helix_agents.log.usage import UsageRollup, get_usage_rollup
from helix_agents.models.base import LLMAdapter
from helix_agents.protocol import RemoteMessageRequest, RemoteResumeRequest, RemoteStartRequest
from helix_agents.testing.evals.answers import RecordedCalls, answer_from_recording
from helix_agents.testing.evals.cases import BRANCH_MARK, EvalCase
from helix_agents.testing.evals.model import CaseResult, EvalReport, Parting, Score
from helix_agents.testing.evals.scorers import BUILT_IN_SCORERS, CaseRun, Scorer
from helix_agents.workspaces import MemoryWorkspaceProvider, WorkspaceProvider

__all__ = ["DEFAULT_CASE_TIMEOUT", "branch_id", "run_eval"]

DEFAULT_CASE_TIMEOUT = 300.0
"""Seconds a case's branch may run before it is an error."""


def branch_id(case: str, label: str) -> str:
    """The session id of ``case``'s branch for the eval run ``label``."""
    suffix = f"{BRANCH_MARK}{label}"
    return case[: MAX_SESSION_ID_LENGTH - len(suffix)] + suffix


def _recorded_usage(logs: dict[str, list[Event]], prices: Prices, root: str) -> UsageRollup:
    """The recorded tree's usage and cost, from its logs (local children included)."""
    rollup = UsageRollup(session_id=root)
    cost = Cost()
    for session_id, log in logs.items():
        state = project_state(log)
        usage = state.usage
        rollup.input_tokens += usage.input_tokens
        rollup.output_tokens += usage.output_tokens
        rollup.cached_input_tokens += usage.cached_input_tokens
        rollup.reasoning_tokens += usage.reasoning_tokens
        rollup.llm_calls += usage.llm_calls
        rollup.tool_calls += usage.tool_calls
        rollup.sub_agent_calls += usage.sub_agent_calls
        rollup.sessions.append(session_id)
        cost.add(prices.cost(usage, state.agent_type))
    rollup.cost_usd, rollup.unpriced_models = cost.usd, cost.unpriced
    return rollup


async def _later_runs(executor: AgentExecutor, session_id: str, recorded: list[Event]) -> None:
    for event in recorded[2:]:
        if not isinstance(event, RunStarted):
            continue
        try:
            if event.mode == "continue":
                await executor.service.send_message(
                    RemoteMessageRequest(
                        session_id=session_id,
                        message=list(event.messages),
                        message_id=event.message_id,
                    )
                )
            else:
                await executor.service.resume(
                    RemoteResumeRequest(session_id=session_id, message=list(event.messages) or None)
                )
        except AgentServerError:
            continue  # the branch cannot take it (it ended otherwise): the scores show it
        await executor.wait_idle(session_id)


async def _score(scorer: Scorer, run: CaseRun) -> Score:
    name = getattr(scorer, "__name__", type(scorer).__name__)
    try:
        value: Any = scorer(run)
        if inspect.isawaitable(value):
            value = await value
    except Exception as exc:  # a user's scorer may raise anything: it fails that score
        return Score(name=name, passed=False, detail=f"{type(exc).__name__}: {exc}")
    if isinstance(value, Score):
        return value
    if value is None or isinstance(value, bool):
        return Score(name=name, passed=value is not False)
    if isinstance(value, int | float):
        return Score(name=name, passed=True, value=float(value))
    return Score(name=name, passed=False, detail=f"the scorer returned {type(value).__name__}")


async def _run_case(
    store: EventStore,
    given: AgentRegistry,
    case: EvalCase,
    label: str,
    *,
    model: LLMAdapter | None,
    live: Collection[str],
    scorers: Sequence[Scorer],
    prices: Prices,
    case_timeout: float,
) -> CaseResult:
    created = case.created
    started = time.monotonic()
    result = CaseResult(
        case=case.session_id,
        agent_type=created.agent_type,
        branch=None,
        verdict="error",
        recorded_status=project_state(case.events).status,
        recorded_output=project_state(case.events).output,
    )
    agent = given.get(created.agent_type)
    if agent is None:
        result.error = f"no agent {created.agent_type!r} among {', '.join(given.names())}"
        return result
    calls = RecordedCalls(case.logs)
    originals = [found for name in given.names() if (found := given.get(name)) is not None]
    registry = AgentRegistry(answer_from_recording(originals, calls, live))
    sandbox: dict[str, WorkspaceProvider] = {}
    for name in registry.names():
        config = registry.get(name)
        for workspace in config.workspaces if config is not None else ():
            sandbox[workspace.kind] = MemoryWorkspaceProvider()
    branch = branch_id(case.session_id, label)
    result.branch = branch
    try:
        with anyio.fail_after(case_timeout):
            async with AgentExecutor(
                store,
                registry,
                llm_override=model,
                workspace_providers=sandbox,
                workspace_provider_kinds=sandbox,
            ) as executor:
                if case.in_store:  # a fork at the first user turn: the log says so
                    at = first_user_turn(case.events)
                    await executor.fork(case.session_id, at, new_session_id=branch)
                else:  # from a file: a new session with the recorded input
                    await executor.service.start(
                        RemoteStartRequest(
                            session_id=branch,
                            agent_type=created.agent_type,
                            message=list(created.messages),
                            state=created.initial_state or None,
                            metadata=created.metadata or None,
                            input=created.input,
                        )
                    )
                await executor.wait_idle(branch)
                await _later_runs(executor, branch, case.events)
    except TimeoutError:
        result.error = f"the branch did not finish within {case_timeout:g} s"
    except Exception as exc:  # the user's agents may raise anything: that case is an error
        result.error = f"{type(exc).__name__}: {exc}"
    if result.error is not None:
        result.seconds = round(time.monotonic() - started, 3)
        return result
    branch_events = list(await store.read(branch))
    diff = diff_logs(case.events, branch_events, prices=prices)
    run = CaseRun(
        case=case,
        agent=agent,
        branch_id=branch,
        recorded=project_state(case.events),
        branch=project_state(branch_events),
        recorded_events=case.events,
        branch_events=branch_events,
        diff=diff,
        recorded_usage=_recorded_usage(case.logs, prices, case.session_id),
        branch_usage=await get_usage_rollup(store, branch, prices=prices),
    )
    result.scores = [await _score(scorer, run) for scorer in scorers]
    result.branch_status, result.branch_output = run.branch.status, run.branch.output
    result.misses = list(calls.misses)
    if not diff.same:
        result.parting = Parting(
            common=diff.common,
            recorded_seq=diff.a.parted_seq,
            recorded_type=diff.a.parted_type,
            branch_seq=diff.b.parted_seq,
            branch_type=diff.b.parted_type,
        )
    result.verdict = "passed" if all(score.passed for score in result.scores) else "failed"
    result.seconds = round(time.monotonic() - started, 3)
    return result


async def run_eval(
    store: EventStore,
    agents: AgentRegistry | Sequence[AgentConfig],
    cases: Sequence[EvalCase],
    *,
    model: LLMAdapter | None = None,
    live: Collection[str] = (),
    scorers: Sequence[Scorer] = BUILT_IN_SCORERS,
    prices: Prices | None = None,
    label: str | None = None,
    case_timeout: float = DEFAULT_CASE_TIMEOUT,
) -> EvalReport:
    """Re-run each case as a branch in ``store`` with ``agents``, score it, and report.

    Args:
        store: where the branches are written (and, usually, the recordings are).
        agents: today's agents (each case runs the agent of its recorded type).
        cases: from :func:`cases_from_store` or :func:`cases_from_files`.
        model: answers every model call (None: each agent's own model).
        live: tools run for real (the rest answered from the recording).
        scorers: the built-in ones by default; add yours
            (``[*BUILT_IN_SCORERS, mine]``).
        prices: prices for the cost scores (None: the built-in defaults).
        label: names this run's branches ``<case>.eval-<label>`` (default: a fresh one).
        case_timeout: seconds each case's branch may run.
    """
    given = agents if isinstance(agents, AgentRegistry) else AgentRegistry(agents)
    label = label or uuid.uuid4().hex[:8]
    prices = Prices() if prices is None else prices
    results = [
        await _run_case(
            store,
            given,
            case,
            label,
            model=model,
            live=live,
            scorers=scorers,
            prices=prices,
            case_timeout=case_timeout,
        )
        for case in cases
    ]
    return EvalReport(
        cases=results,
        agents=", ".join(given.names()),
        model=None if model is None else _model_name(model),
        live=sorted(live),
    )


def _model_name(model: LLMAdapter) -> str:
    name = getattr(model, "name", None)
    return name if isinstance(name, str) else type(model).__name__
