"""Agents for ``helix-agents chat`` tests: a scripted ``chatter`` that echoes its memory.

``moody`` echoes too, but its model fails the turn whose last message is ``break``.
"""

from __future__ import annotations

from helix_agents import define_agent
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.models.scripted import ScriptItem


def _echo(request: LLMRequest) -> ScriptStep:
    said = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return ScriptStep(text=" | ".join(said))


def _moody(request: LLMRequest) -> ScriptItem:
    said = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return ScriptedLLM.fail("model down") if said[-1] == "break" else _echo(request)


chatter = define_agent("chatter", llm=ScriptedLLM(_echo, chunk_words=1))
failing = define_agent("failing", llm=ScriptedLLM([ScriptedLLM.fail("model down")]))
moody = define_agent("moody", llm=ScriptedLLM(_moody, chunk_words=1))

agents = [chatter, failing, moody]
