"""Agents for the ``replay --rerun`` test: their tool's answer comes from an env var.

So the same module, imported by the CLI in another process, can be "changed"
between the recording and the re-run without editing files.
"""

from __future__ import annotations

import os

from pydantic import BaseModel

from helix_agents import ToolContext, create_sub_agent_tool, define_agent, define_tool
from helix_agents.models import ScriptedLLM


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str


class Answer(BaseModel):
    answer: str


async def lookup(value: Query, ctx: ToolContext) -> dict[str, str]:
    return {"fact": os.environ.get("RERUN_FACT", "logs replay")}


researcher = define_agent(
    "researcher",
    output_schema=Findings,
    tools=[define_tool("lookup", "Look a fact up", Query, lookup)],
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("lookup", {"query": "logs"})],
            ScriptedLLM.finish({"findings": "logs replay"}),
        ]
    ),
)
lead = define_agent(
    "lead",
    output_schema=Answer,
    tools=[create_sub_agent_tool(researcher, Query)],
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("subagent__researcher", {"query": "why logs"})],
            ScriptedLLM.finish({"answer": "because logs replay"}),
        ]
    ),
)
agents = {"lead": lead}
