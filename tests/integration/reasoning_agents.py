"""Agents whose scripted models think aloud and stream their typed output (issue 33).

``thinker`` reasons, then answers; ``planner`` reasons and writes its output
(``Trip``) as a ``__finish__`` call whose arguments stream in pieces; ``lead``
thinks, delegates to the planner, then answers. The models also report cached
input and reasoning tokens, to be priced.
"""

from __future__ import annotations

import itertools
from typing import Any

from pydantic import BaseModel

from helix_agents import AgentConfig, create_sub_agent_tool, define_agent
from helix_agents.models import ScriptedLLM, ScriptStep, TokenUsage

__all__ = [
    "ANSWER",
    "LEAD_ANSWER",
    "LEAD_THOUGHT",
    "THOUGHT",
    "TRIP",
    "USAGE",
    "Trip",
    "agents",
    "grows_into",
    "growing",
]

THOUGHT = "Lyon or Nice? Lyon: the food, and the trains are easy from Paris."
ANSWER = "Lyon it is."
LEAD_THOUGHT = "A plan needs the planner."
LEAD_ANSWER = "The planner has it."
TRIP: dict[str, Any] = {
    "title": "Three days in Lyon, slowly",
    "days": ["Vieux Lyon and Fourviere", "Presqu'ile and the museums", "Croix-Rousse"],
    "budget": 450,
}
USAGE = TokenUsage(
    input_tokens=1_200, output_tokens=90, cached_input_tokens=1_000, reasoning_tokens=60
)
"""What the thinker's model reports: most of its prompt cached, most of its output thought."""


class Trip(BaseModel):
    title: str
    days: list[str]
    budget: int


class Ask(BaseModel):
    query: str


def agents() -> list[AgentConfig[Any]]:
    """Fresh definitions (each server gets its own scripted models)."""
    thinker = define_agent(
        "thinker",
        llm=ScriptedLLM([ScriptStep(text=ANSWER, reasoning=THOUGHT, usage=USAGE)], chunk_words=2),
    )
    planner = define_agent(
        "planner",
        output_schema=Trip,
        llm=ScriptedLLM(
            [ScriptedLLM.finish(TRIP, reasoning=THOUGHT, stream_arguments=12)], chunk_words=2
        ),
    )
    lead = define_agent(
        "lead",
        tools=[create_sub_agent_tool(planner, Ask)],
        llm=ScriptedLLM(
            [
                ScriptStep(
                    reasoning=LEAD_THOUGHT,
                    tool_calls=[ScriptedLLM.call("subagent__planner", {"query": "Lyon"}, id="c1")],
                ),
                ScriptedLLM.reply(LEAD_ANSWER),
            ]
        ),
    )
    return [thinker, planner, lead]


def grows_into(partial: Any, whole: Any) -> bool:
    """True if ``partial`` is what a prefix of ``whole``'s JSON holds (the fields so far)."""
    if isinstance(partial, dict):
        return isinstance(whole, dict) and all(
            key in whole and grows_into(value, whole[key]) for key, value in partial.items()
        )
    if isinstance(partial, list):
        return (
            isinstance(whole, list)
            and len(partial) <= len(whole)
            and all(grows_into(p, w) for p, w in zip(partial, whole, strict=False))
        )
    if isinstance(partial, str):
        return isinstance(whole, str) and whole.startswith(partial)
    return bool(partial == whole)


def growing(values: list[Any], whole: Any) -> bool:
    """True if each value differs from the one before, grows into the next and into ``whole``."""
    return all(
        before != after and grows_into(before, after)
        for before, after in itertools.pairwise(values)
    ) and all(grows_into(value, whole) for value in values)
