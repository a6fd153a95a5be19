"""A parent with companions for a served process: ``serve tests.integration.companion_app:agents``.

Used by ``test_companions_kill.py``, which SIGKILLs the server while the
``lead``'s blocking companion is mid-turn. ``lead`` spawns, in its first step,
a blocking ``slow`` child (named ``slow``) and a non-blocking ``bg`` child
(named ``bg``); both stream four words over :data:`CHILD_DELAY` seconds of
model latency (so a kill at the first word finds them mid-turn) and answer;
the lead then answers with the blocking child's output. Later turns of the lead just reply.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_agents import PersistentAgent, define_agent
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep

__all__ = ["CHILD_DELAY", "Answer", "agents"]

CHILD_DELAY = 2.0
"""Seconds each child's model takes to answer (simulated latency)."""


class Answer(BaseModel):
    """A child's typed answer."""

    text: str


def _child(request: LLMRequest) -> ScriptStep:
    asked = [m.content for m in request.messages if isinstance(m, UserMessage)][-1]
    return ScriptedLLM.finish({"text": f"answered {asked}"}, text=_THINKING)


_THINKING = "thinking about it slowly"


def _lead(request: LLMRequest) -> Any:
    turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
    if turn == 0:
        spawn = "companion__spawnAgent"
        return [
            ScriptedLLM.call(spawn, {"agent": "slow", "name": "slow", "initialMessage": "s"}),
            ScriptedLLM.call(spawn, {"agent": "bg", "name": "bg", "initialMessage": "b"}),
        ]
    results = [m.content for m in request.messages if isinstance(m, ToolResultMessage)]
    return f"turn {turn}: {results[0] if turn == 1 else 'more'}"


_DELTA_DELAY = CHILD_DELAY / len(_THINKING.split())
slow = define_agent(
    "slow", output_schema=Answer, llm=ScriptedLLM(_child, chunk_words=1, delta_delay=_DELTA_DELAY)
)
bg = define_agent(
    "bg", output_schema=Answer, llm=ScriptedLLM(_child, chunk_words=1, delta_delay=_DELTA_DELAY)
)
lead = define_agent(
    "lead",
    llm=ScriptedLLM(_lead),
    persistent_agents=[
        PersistentAgent(slow, mode="blocking"),
        PersistentAgent(bg, mode="non-blocking"),
    ],
)

agents = {"lead": lead}
