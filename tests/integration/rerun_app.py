"""Agents for the ``replay --rerun`` test: their tool's answer comes from an env var.

So the same module, imported by the CLI in another process, can be "changed"
between the recording and the re-run without editing files.
"""

from __future__ import annotations

import os

import anyio
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    ToolContext,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.models import ScriptedLLM
from helix_agents.transports import HttpRemoteAgentTransport


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str


class Answer(BaseModel):
    answer: str


async def lookup(value: Query, ctx: ToolContext) -> dict[str, str]:
    marker = os.environ.get("RERUN_MARKER")
    if marker:  # the tool ran: say so in a file the test reads
        await anyio.Path(marker).write_text("lookup ran\n")
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
chat = define_agent("chat", llm=ScriptedLLM(["first answer", "second answer"]))
"""Two turns: the session's first run, then a follow-up message."""


def remote_lead(transport: HttpRemoteAgentTransport) -> AgentConfig:
    """``remote_lead``: delegates to ``researcher`` behind ``transport`` (a remote sub-agent)."""
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="The researcher, remote.",
        input_schema=Query,
        output_schema=Findings,
        transport=transport,
        remote_agent_type="researcher",
        stream_retries=0,
    )
    return define_agent(
        "remote_lead",
        output_schema=Answer,
        tools=[tool],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__researcher", {"query": "why logs"})],
                ScriptedLLM.finish({"answer": "because logs replay"}),
            ]
        ),
    )


# The re-run's remote child is a closed port: only the recording can answer it.
agents = {
    "lead": lead,
    "chat": chat,
    "remote_lead": remote_lead(
        HttpRemoteAgentTransport("http://127.0.0.1:9", max_retries=0, timeout=5)
    ),
}
