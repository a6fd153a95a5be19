"""A remote sub-agent call's ``timeout`` interrupts the remote session and fails the call."""

from __future__ import annotations

import anyio
from pydantic import BaseModel
from servers import serve

from helix_agents import (
    AgentExecutor,
    ToolContext,
    create_remote_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.events import SubAgentEnd, ToolEnd
from helix_agents.log import project_state
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport


class Query(BaseModel):
    query: str


class Found(BaseModel):
    findings: str


class Out(BaseModel):
    summary: str


async def test_a_remote_call_past_its_timeout_interrupts_the_remote_and_fails() -> None:
    async def slow(value: Query, ctx: ToolContext) -> str:
        await anyio.sleep(60)
        return "never"

    remote_child = define_agent(
        "researcher",
        output_schema=Found,
        tools=[define_tool("slow", "Takes long", Query, slow)],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("slow", {"query": "q"})], ScriptedLLM.finish({"findings": "x"})]
        ),
    )
    remote_store = MemoryEventStore()
    with anyio.fail_after(30):
        async with serve(create_http_app(AgentServer([remote_child], remote_store))) as url:
            transport = HttpRemoteAgentTransport(url, retry_base_delay=0.01)
            parent = define_agent(
                "parent",
                output_schema=Out,
                tools=[
                    create_remote_sub_agent_tool(
                        "researcher",
                        description="research",
                        input_schema=Query,
                        output_schema=Found,
                        transport=transport,
                        remote_agent_type="researcher",
                        timeout=0.5,
                    )
                ],
                llm=ScriptedLLM(
                    [
                        [ScriptedLLM.call("subagent__researcher", {"query": "q"}, id="c1")],
                        ScriptedLLM.finish({"summary": "gave up"}),
                    ]
                ),
            )
            store = MemoryEventStore()
            async with AgentExecutor(store, [parent]) as executor:
                handle = await executor.execute(parent, "go", session_id="p")
                result = await handle.result()
            remote_status = await transport.get_status("p-remote-c1")
            await transport.aclose()
    assert result.status == "completed"  # the parent's LLM read the error and went on
    assert remote_status.status == "interrupted"  # the timeout reached the remote session
    log = await store.read("p")
    end = next(e for e in log if isinstance(e, SubAgentEnd))
    assert end.success is False
    assert "timed out after 0.5s" in (end.error or "")
    tool_end = next(e for e in log if isinstance(e, ToolEnd) and e.tool_name.startswith("sub"))
    assert "timed out" in (tool_end.error or "")
    message = next(
        e.message
        for e in log
        if getattr(e, "message", None) is not None and isinstance(e.message, ToolResultMessage)
    )
    assert message.is_error
    # A remote failure reads as RemoteAgentFailedError's text: which session, and why.
    assert "remote session 'p-remote-c1' failed: " in message.content
    assert "timed out after 0.5s" in message.content
    ref = project_state(log).sub_sessions["p-remote-c1"]
    assert ref.status == "interrupted"
    assert ref.remote is not None
    assert ref.remote.url == url
