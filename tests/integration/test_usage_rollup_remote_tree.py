"""The usage rollup counts a remote child's own sub-agents (seed 004, usage tracking).

root (here) -> remote child (uvicorn, its own store) -> its local grandchild:
``AgentExecutor.usage_rollup`` lists all three sessions and sums every model
call, reaching the grandchild through the child's server (its status names
the sub-sessions whose logs it holds).
"""

from __future__ import annotations

import anyio
import pytest
from hitl_app import Out, Query
from servers import serve

from helix_agents import (
    AgentExecutor,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
)
from helix_agents.log import ModelPrice, Prices
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.anyio

LIMIT = 30
CHILD = "u1-remote-call_0_0"
GRAND = f"{CHILD}-sub-call_0_0"


async def test_a_remote_childs_local_grandchild_is_in_the_rollup() -> None:
    grand = define_agent(
        "grand", output_schema=Out, llm=ScriptedLLM([ScriptedLLM.finish({"answer": "g"})])
    )
    child = define_agent(
        "child",
        output_schema=Out,
        tools=[create_sub_agent_tool(grand, Query)],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__grand", {"query": "deeper"})],
                ScriptedLLM.finish({"answer": "c"}),
            ]
        ),
    )
    remote_store = MemoryEventStore()
    app = create_http_app(AgentServer([child], remote_store))
    with anyio.fail_after(LIMIT):
        async with (
            serve(app) as url,
            HttpRemoteAgentTransport(url, max_retries=1, timeout=10) as transport,
        ):
            tool = create_remote_sub_agent_tool(
                "child",
                description="remote child",
                input_schema=Query,
                output_schema=Out,
                transport=transport,
                remote_agent_type="child",
            )
            root = define_agent(
                "root",
                tools=[tool],
                llm=ScriptedLLM([[ScriptedLLM.call("subagent__child", {"query": "q"})], "done"]),
            )
            async with AgentExecutor(MemoryEventStore(), [root]) as executor:
                handle = await executor.execute(root, "go", session_id="u1")
                assert (await handle.result()).status == "completed"
                rollup = await executor.usage_rollup("u1")
                # Priced: the remote sessions' tokens come by model name in their status.
                scripted = ModelPrice(input_per_million=1.0, output_per_million=4.0)
                priced = await executor.usage_rollup("u1", prices=Prices({"scripted": scripted}))
    assert rollup.sessions == ["u1", CHILD, GRAND]
    assert rollup.llm_calls == 2 + 2 + 1  # root, child and grandchild model calls
    assert rollup.sub_agent_calls == 2
    # No price for the scripted model: unknown, never a guess.
    assert (rollup.cost_usd, rollup.unpriced_models) == (None, ["scripted"])
    assert rollup.models["scripted"].llm_calls == 5
    assert priced.cost_usd == pytest.approx(
        scripted.cost(rollup.input_tokens, rollup.output_tokens)
    )
    assert priced.cost_usd > 0
