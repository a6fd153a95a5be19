"""``helix_agents.testing``: a tree tested without a model, as a user's test suite would.

The ``helix`` fixture comes from the package's pytest plugin (an entry point):
nothing in this repository's conftest provides it.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import BaseModel

from helix_agents import ToolContext, create_sub_agent_tool, define_agent, define_tool, tool
from helix_agents.messages import ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.testing import (
    AgentTester,
    approve,
    deny,
    run_agent,
    run_agent_sync,
    tool_result,
)

call = ScriptedLLM.call


class Topic(BaseModel):
    topic: str


class Answer(BaseModel):
    answer: str


@tool
def lookup(topic: str) -> str:
    """Look a topic up."""
    return f"{topic} is a leaf"


@tool(requires_approval=True)
def publish(title: str) -> str:
    """Publish a post."""
    return f"published {title}"


pick = define_tool("pick", "The user picks a colour.", Topic, "client")


def tree() -> object:
    researcher = define_agent(
        "researcher",
        tools=[lookup],
        output_schema=Answer,
        llm=ScriptedLLM(
            [
                [call("lookup", {"topic": "tea"}, id="r1")],
                ScriptedLLM.finish({"answer": "tea is a leaf"}, id="r2"),
            ]
        ),
    )
    return define_agent(
        "lead",
        tools=[create_sub_agent_tool(researcher, Topic), publish, pick],
        output_schema=Answer,
        llm=ScriptedLLM(
            [
                [call("subagent__researcher", {"topic": "tea"}, id="l1")],
                [call("publish", {"title": "Tea"}, id="l2"), call("pick", {"topic": "x"}, id="l3")],
                ScriptedLLM.finish({"answer": "done"}, id="l4"),
            ]
        ),
    )


async def test_the_trajectory_names_each_agents_calls_and_the_answers_are_given(
    helix: AgentTester,
) -> None:
    report = await helix.run(
        tree(), "write about tea", answers={"publish": approve(), "pick": tool_result("green")}
    )
    assert report.status == "completed"
    assert report.output == Answer(answer="done")
    lead = report.trajectory
    assert lead.tool_names == ["subagent__researcher", "publish", "pick"]
    assert lead.calls[1].result == "published Tea"
    assert lead.calls[2].result == "green"
    researcher = lead.find("researcher")
    assert lead.calls[0].child is researcher
    assert researcher.tool_names == ["lookup"]
    assert researcher.calls[0].arguments == {"topic": "tea"}
    assert researcher.output == {"answer": "tea is a leaf"}
    assert [t.agent_type for t in lead.walk()] == ["lead", "researcher"]


async def test_without_an_answer_the_run_is_paused_and_says_what_waits(helix: AgentTester) -> None:
    with pytest.raises(AssertionError, match=r"ended paused, not completed: waiting for approval"):
        await helix.run(tree(), "write about tea", answers={"pick": tool_result("green")})
    report = await helix.run(tree(), "again", expect="paused")
    assert {entry.tool_name for entry in report.pending} == {"publish", "pick"}


async def test_a_denial_is_answered_and_is_not_a_problem(helix: AgentTester) -> None:
    report = await helix.run(
        tree(), "write", answers={"l2": deny("not today"), "pick": tool_result("red")}
    )
    assert report.trajectory.calls[1].error == "denied by a person: not today"
    assert report.problems == []


async def test_strict_by_default_a_misspelled_tool_fails_the_test_naming_it() -> None:
    agent = define_agent(
        "lead",
        tools=[lookup],
        llm=ScriptedLLM([[call("lookup_tea", {"topic": "tea"})], "done"]),
    )
    with pytest.raises(
        AssertionError, match="strict: the model called an unknown tool 'lookup_tea'"
    ):
        await run_agent(agent, "go")
    relaxed = await run_agent(agent, "go", strict=False)
    assert relaxed.output == "done"
    [problem] = relaxed.problems
    assert problem.kind == "unknown_tool"


async def test_expect_failed_returns_the_report_of_a_failure() -> None:
    agent = define_agent("mute", llm=ScriptedLLM([ScriptedLLM.fail("the model is down")]))
    report = await run_agent(agent, "go", expect="failed")
    assert report.result.error == "LLM call failed: the model is down"


async def test_a_function_model_and_the_tool_context(helix: AgentTester) -> None:
    def count(value: Topic, ctx: ToolContext) -> int:
        return len(value.topic)

    counter = define_tool("count", "Count letters.", Topic, count)
    seen: list[int] = []

    def model(request: LLMRequest) -> ScriptItem:
        results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
        if results:
            seen.append(len(results))
            return f"{results[0].content} letters"
        return [call("count", {"topic": "oolong"})]

    agent = define_agent("counter", tools=[counter], llm=ScriptedLLM(model))
    report = await helix.run(agent, "count")
    assert report.output == "6 letters"
    assert seen == [1]


def test_run_agent_sync_in_a_plain_test() -> None:
    report = run_agent_sync(tree(), "sync", answers={"publish": approve(), "pick": tool_result(1)})
    assert report.status == "completed"
    assert report.trajectory.find("researcher").status == "completed"


def test_the_fixture_is_there_for_a_project_that_installs_the_package(tmp_path: Path) -> None:
    """A project with no conftest of its own gets ``helix`` from the plugin's entry point."""
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            """
            from helix_agents import define_agent
            from helix_agents.models import ScriptedLLM


            def test_mine(helix):
                agent = define_agent("echo", llm=ScriptedLLM(["hello"]))
                assert helix.run_sync(agent, "hi").output == "hello"
            """
        )
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
