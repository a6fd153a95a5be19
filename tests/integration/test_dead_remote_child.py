"""A remote child on a dead address fails the call quickly, naming the address.

The HTTP transport retries its own calls (1 + 3 tries, waits of 1, 2 and 4
seconds); the sub-agent call around it must not retry that spent failure
again, or the waits multiply (four times seven seconds before this was fixed).
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel
from servers import closed_port

from helix_agents import AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport


class Query(BaseModel):
    query: str


class Found(BaseModel):
    findings: str


async def test_a_child_on_a_dead_address_fails_within_one_retry_budget() -> None:
    address = f"http://127.0.0.1:{closed_port()}"
    far = create_remote_sub_agent_tool(
        "far",
        description="Nobody listens here",
        input_schema=Query,
        output_schema=Found,
        transport=HttpRemoteAgentTransport(address),  # the default retries and backoff
        remote_agent_type="far",
    )
    lead = define_agent(
        "lead",
        tools=[far],
        llm=ScriptedLLM([[ScriptedLLM.call("subagent__far", {"query": "q"})], "gave up"]),
    )
    # 1 + 2 + 4 seconds of backoff in one budget; stacked budgets took ~29 s.
    with anyio.fail_after(14):
        async with AgentExecutor(MemoryEventStore(), [lead]) as executor:
            handle = await executor.execute(lead, "go")
            result = await handle.result()
            state = await executor.state(handle.session_id)
    assert result.status == "completed"
    [tool_result] = [m for m in state.messages if isinstance(m, ToolResultMessage)]
    assert tool_result.is_error
    assert f"{address}/start" in tool_result.content
    assert "unreachable" in tool_result.content
