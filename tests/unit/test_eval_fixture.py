"""The ``helix_eval`` pytest fixture: a project's test suite holding an eval of recorded runs.

Sessions are recorded in a memory store with one model; the eval runs them
with today's agent (another script) and the built-in scorers plus a plain
callable of the test's; a report that did not pass fails the test with its
table (``assert_passed``).
"""

from __future__ import annotations

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentConfig, AgentExecutor, ToolContext, define_agent, define_tool
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.models.base import LLMRequest
from helix_agents.stores import MemoryEventStore
from helix_agents.testing.evals import BUILT_IN_SCORERS, CaseRun, Score, is_branch
from helix_agents.testing.plugin import EvalFixture


class City(BaseModel):
    city: str


class Forecast(BaseModel):
    sky: str


calls: list[str] = []


def weather(value: City, ctx: ToolContext) -> dict[str, str]:
    calls.append(value.city)
    return {"sky": "grey" if value.city == "Oslo" else "blue"}


def _agent(city_for_lisbon: str) -> AgentConfig:
    def model(request: LLMRequest) -> object:
        messages = request.messages
        asked = next(m.content for m in messages if isinstance(m, UserMessage))
        if not any(isinstance(m, AssistantMessage) for m in messages):
            city = asked.split()[-1]
            return [
                ScriptedLLM.call("weather", {"city": city_for_lisbon if city == "Lisbon" else city})
            ]
        return ScriptedLLM.finish({"sky": "as looked up"})

    return define_agent(
        "forecaster",
        output_schema=Forecast,
        tools=[define_tool("weather", "The weather", City, weather)],
        llm=ScriptedLLM(model),
    )


async def _record(store: MemoryEventStore) -> None:
    agent = _agent("Lisbon")
    async with AgentExecutor(store, [agent]) as executor:
        for city in ("Oslo", "Lisbon", "Rome"):
            handle = await executor.execute(agent, f"weather in {city}", session_id=f"w-{city}")
            assert (await handle.result()).status == "completed"


@pytest.fixture
def store() -> MemoryEventStore:
    store = MemoryEventStore()
    anyio.run(_record, store)
    calls.clear()
    return store


def no_grey(run: CaseRun) -> Score:
    """A scorer of the test's: the branch's tools never said grey."""
    results = [m.content for m in run.branch.messages if isinstance(m, ToolResultMessage)]
    grey = any('"grey"' in result for result in results)
    return Score(name="no_grey", passed=not grey, detail="grey sky" if grey else "")


def test_an_eval_whose_cases_all_pass(helix_eval: EvalFixture, store: MemoryEventStore) -> None:
    report = helix_eval.run(store, [_agent("Lisbon")])
    helix_eval.assert_passed(report)
    assert sorted(case.case for case in report.cases) == ["w-Lisbon", "w-Oslo", "w-Rome"]
    assert calls == []  # every tool call was answered from the recording
    assert all(case.branch and is_branch(case.branch) for case in report.cases)
    assert all(case.parting is None for case in report.cases)  # nothing parts them


def test_a_changed_agent_fails_the_test_with_the_table(
    helix_eval: EvalFixture, store: MemoryEventStore
) -> None:
    report = helix_eval.run(store, [_agent("Porto")], scorers=[*BUILT_IN_SCORERS, no_grey])
    assert report.case("w-Lisbon").verdict == "failed"
    assert report.case("w-Oslo").verdict == "failed"  # by the test's own scorer
    assert [s.name for s in report.case("w-Oslo").failures()] == ["no_grey"]
    assert report.case("w-Rome").verdict == "passed"
    lisbon = report.case("w-Lisbon")
    assert lisbon.parting is not None
    assert lisbon.parting.recorded_type == "message_appended"
    assert lisbon.misses == ['forecaster: weather({"city":"Porto"})']
    with pytest.raises(AssertionError, match="3 cases: 1 passed, 2 failed, 0 errors"):
        helix_eval.assert_passed(report)


def test_a_live_tool_runs_and_a_raising_scorer_fails_its_score(
    helix_eval: EvalFixture, store: MemoryEventStore
) -> None:
    def broken(run: CaseRun) -> bool:
        raise ValueError("no idea")

    report = helix_eval.run(
        store, [_agent("Lisbon")], session_ids=["w-Rome"], live=["weather"], scorers=[broken]
    )
    assert calls == ["Rome"]
    [case] = report.cases
    assert case.scores == [Score(name="broken", passed=False, detail="ValueError: no idea")]
    assert case.verdict == "failed"
