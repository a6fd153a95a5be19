"""Agents for ``helix-agents chat`` tests: a scripted ``chatter`` that echoes its memory."""

from __future__ import annotations

from helix_agents import define_agent
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep


def _echo(request: LLMRequest) -> ScriptStep:
    said = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return ScriptStep(text=" | ".join(said))


chatter = define_agent("chatter", llm=ScriptedLLM(_echo, chunk_words=1))
failing = define_agent("failing", llm=ScriptedLLM([ScriptedLLM.fail("model down")]))

agents = [chatter, failing]
