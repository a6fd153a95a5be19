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
from helix_agents.log import project_state
from helix_agents.messages import ToolResultMessage
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


async def test_without_an_output_schema_a_remote_childs_output_passes_as_it_came() -> None:
    """No output_schema: a text child's text is the result (a str), a typed child's JSON
    passes unvalidated (a dict), over real HTTP."""
    writer = define_agent("writer", llm=ScriptedLLM([ScriptedLLM.reply("tea is a leaf")]))
    typed = define_agent(
        "researcher",
        output_schema=Findings,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "logs", "confidence": 1})]),
    )
    server = AgentServer([writer, typed], MemoryEventStore())
    store = MemoryEventStore()
    with anyio.fail_after(30):
        async with (
            serve(create_http_app(server)) as url,
            HttpRemoteAgentTransport(url, retry_base_delay=0.01) as transport,
        ):
            tools = [
                create_remote_sub_agent_tool(
                    name,
                    description=f"Ask the {name}",
                    input_schema=Query,
                    transport=transport,
                    remote_agent_type=name,
                )
                for name in ("writer", "researcher")
            ]
            parent = define_agent(
                "lead",
                tools=tools,
                llm=ScriptedLLM(
                    [
                        [ScriptedLLM.call("subagent__writer", {"query": "q"})],
                        [ScriptedLLM.call("subagent__researcher", {"query": "q"})],
                        ScriptedLLM.reply("done"),
                    ]
                ),
            )
            async with AgentExecutor(store, [parent]) as executor:
                answer = await executor.run(parent, "go", session_id="untyped-parent")
    assert answer == "done"
    log = await store.read("untyped-parent")
    finished = [e for e in log if isinstance(e, SubSessionFinished)]
    assert [(f.status, f.output) for f in finished] == [
        ("completed", "tea is a leaf"),
        ("completed", {"findings": "logs", "confidence": 1.0}),  # the child's JSON, as it came
    ]
    results = [m.content for m in project_state(log).messages if isinstance(m, ToolResultMessage)]
    assert results == ["tea is a leaf", '{"findings":"logs","confidence":1.0}']
