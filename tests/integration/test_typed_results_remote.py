"""Typed results across HTTP: the child's output arrives as JSON and is validated at the parent.

A parent here delegates to a child served over real HTTP (uvicorn on
loopback). The parent's tool validates the child's JSON into the child's
schema; the parent's own output comes back from ``executor.run`` as its class.
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.events import SubSessionFinished
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str
    confidence: float


class Report(BaseModel):
    summary: str


async def test_a_parent_run_over_a_remote_child_returns_its_class() -> None:
    child = define_agent(
        "researcher",
        output_schema=Findings,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "logs", "confidence": 1})]),
    )
    server = AgentServer([child], MemoryEventStore())
    store = MemoryEventStore()
    with anyio.fail_after(30):
        async with (
            serve(create_http_app(server)) as url,
            HttpRemoteAgentTransport(url, retry_base_delay=0.01) as transport,
        ):
            tool = create_remote_sub_agent_tool(
                "researcher",
                description="Research it",
                input_schema=Query,
                output_schema=Findings,
                transport=transport,
                remote_agent_type="researcher",
            )
            parent = define_agent(
                "lead",
                output_schema=Report,
                tools=[tool],
                llm=ScriptedLLM(
                    [
                        [ScriptedLLM.call("subagent__researcher", {"query": "q"})],
                        ScriptedLLM.finish({"summary": "done"}),
                    ]
                ),
            )
            async with AgentExecutor(store, [parent]) as executor:
                report = await executor.run(parent, "go", session_id="typed-parent")
    assert report == Report(summary="done")
    assert isinstance(report, Report)
    [finished] = [e for e in await store.read("typed-parent") if isinstance(e, SubSessionFinished)]
    # 1 (an int in the child's JSON) was validated into the float field at the parent
    assert finished.output == {"findings": "logs", "confidence": 1.0}
    assert isinstance(finished.output["confidence"], float)
