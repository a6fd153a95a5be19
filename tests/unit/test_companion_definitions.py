"""``PersistentAgent`` entries and the companion tools' argument checks (specs/companions.md)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from helix_agents import PersistentAgent, define_agent
from helix_agents.companions.tools import (
    GET_CHILD_STATUS,
    LIST_CHILDREN,
    SEND_MESSAGE,
    SPAWN_AGENT,
    TERMINATE_CHILD,
    WAIT_FOR_RESULT,
    CompanionArgs,
    check_arguments,
    companion_specs,
)
from helix_agents.errors import UsageError
from helix_agents.models import ScriptedLLM


class Out(BaseModel):
    text: str


def child(name: str = "helper") -> Any:
    return define_agent(name, output_schema=Out, llm=ScriptedLLM([]))


def lead(*entries: PersistentAgent) -> Any:
    return define_agent("lead", llm=ScriptedLLM([]), persistent_agents=entries)


def test_an_agent_type_appears_once() -> None:
    helper = child()
    with pytest.raises(UsageError, match="appears twice"):
        lead(PersistentAgent(helper), PersistentAgent(helper, mode="non-blocking"))


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (PersistentAgent(child(), mode="sometimes"), "mode must be"),  # type: ignore[arg-type]
        (PersistentAgent("helper"), "is not an agent"),  # type: ignore[arg-type]
        (PersistentAgent(child(), transport=object()), "not a RemoteAgentTransport"),  # type: ignore[arg-type]
        (PersistentAgent(child(), description=3), "description must be a string"),  # type: ignore[arg-type]
        (PersistentAgent(child(), inherit_workspace="yes"), "inherit_workspace must be a bool"),  # type: ignore[arg-type]
    ],
)
def test_bad_entries_are_refused(entry: PersistentAgent, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        lead(entry)


def test_entries_must_be_persistent_agents() -> None:
    with pytest.raises(UsageError, match="not a PersistentAgent"):
        lead(child())  # type: ignore[arg-type]


def test_the_spawn_tool_offers_the_configured_types() -> None:
    agent = lead(
        PersistentAgent(child("critic"), description="reviews drafts"),
        PersistentAgent(child("worker"), mode="non-blocking"),
    )
    specs = {spec.name: spec for spec in companion_specs(agent)}
    assert set(specs) == {
        SPAWN_AGENT,
        SEND_MESSAGE,
        LIST_CHILDREN,
        GET_CHILD_STATUS,
        TERMINATE_CHILD,
        WAIT_FOR_RESULT,
    }
    spawn = specs[SPAWN_AGENT].parameters
    assert spawn["properties"]["agent"]["enum"] == ["critic", "worker"]
    assert spawn["required"] == ["agent", "initialMessage"]
    assert "reviews drafts" in specs[SPAWN_AGENT].description


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        (
            SPAWN_AGENT,
            {"agent": "helper", "initialMessage": "hi"},
            CompanionArgs(agent="helper", message="hi"),
        ),
        (
            SPAWN_AGENT,
            {"agent": "helper", "initialMessage": "hi", "name": "h-1"},
            CompanionArgs(agent="helper", name="h-1", message="hi"),
        ),
        (SEND_MESSAGE, {"name": "h", "message": "more"}, CompanionArgs(name="h", message="more")),
        (WAIT_FOR_RESULT, {"name": "h", "timeout": 1500}, CompanionArgs(name="h", timeout=1.5)),
        (WAIT_FOR_RESULT, {"name": "h"}, CompanionArgs(name="h")),
        (LIST_CHILDREN, None, CompanionArgs()),
        (TERMINATE_CHILD, {"name": "x" * 128}, CompanionArgs(name="x" * 128)),
    ],
)
def test_good_arguments(tool: str, arguments: Any, expected: CompanionArgs) -> None:
    assert check_arguments(tool, arguments, lead(PersistentAgent(child()))) == (expected, None)


@pytest.mark.parametrize(
    ("tool", "arguments", "problem"),
    [
        (SPAWN_AGENT, {"agent": "nobody", "initialMessage": "x"}, "Unknown persistent agent type"),
        (SPAWN_AGENT, {"agent": "helper"}, "initialMessage must be a string"),
        (SPAWN_AGENT, {"agent": "helper", "initialMessage": "  "}, "must be non-empty"),
        (SPAWN_AGENT, {"agent": "helper", "initialMessage": "x", "name": ""}, "non-empty"),
        (SPAWN_AGENT, {"agent": "helper", "initialMessage": "x", "name": "a b"}, "may only"),
        (SEND_MESSAGE, {"name": "h"}, "message must be a string"),
        (SEND_MESSAGE, {"name": "x" * 129, "message": "m"}, "at most 128"),
        (GET_CHILD_STATUS, {}, "name must be a string"),
        (WAIT_FOR_RESULT, {"name": "h", "timeout": 0}, "timeout must be positive"),
        (WAIT_FOR_RESULT, {"name": "h", "timeout": True}, "timeout must be a number"),
        (LIST_CHILDREN, [1], "arguments must be a JSON object"),
    ],
)
def test_bad_arguments(tool: str, arguments: Any, problem: str) -> None:
    args, found = check_arguments(tool, arguments, lead(PersistentAgent(child())))
    assert args is None
    assert found is not None
    assert problem in found
