"""Agents for the schemathesis runs: ``helix-agents host tests.integration.schema_app:agents``.

``quick`` finishes at once; ``slow`` streams six words ``DELTA_DELAY`` apart
first, so a generated ``interrupt``, ``abort`` or ``resume`` that follows a
``start`` finds it running, and a stream of it is read while it runs.
Neither has a ``state_schema``, so any initial state object is accepted.
"""

from __future__ import annotations

from pydantic import BaseModel

from helix_agents import define_agent
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep

__all__ = ["DELTA_DELAY", "agents"]

DELTA_DELAY = 0.05
"""Seconds between the slow agent's text deltas."""


class Said(BaseModel):
    """Either agent's output."""

    said: str


def _finish(request: LLMRequest) -> ScriptStep:
    return ScriptedLLM.finish({"said": "done"}, text="one two three four five six")


agents = {
    "quick": define_agent("quick", output_schema=Said, llm=ScriptedLLM(_finish)),
    "slow": define_agent(
        "slow",
        output_schema=Said,
        llm=ScriptedLLM(_finish, chunk_words=1, delta_delay=DELTA_DELAY),
    ),
}
