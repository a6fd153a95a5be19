"""The agents a schedule starts in the cron tests: ``echo`` answers at once."""

from __future__ import annotations

from helix_agents import define_agent
from helix_agents.models import ScriptedLLM, ScriptStep

echo = define_agent("echo", llm=ScriptedLLM(lambda request: ScriptStep(text="tick")))

agents = [echo]
