"""What only Temporal has of the durable runtime's scenarios: child workflows, a round's
tool and child at once, a toolset's tools as activities (the rest, on both durable runtimes:
``test_durable_runtime.py``).

The worker and the gateway's server run in this process (the same code
``helix-agents worker`` / ``serve --temporal`` run); the dev server is a real
``temporal server start-dev`` (``tests/temporal_server.py``).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from temporal_server import TemporalDev
from temporalio.client import Client

from helix_agents import define_agent, define_tool
from helix_agents.events import (
    SubSessionFinished,
    ToolEnd,
    ToolStart,
)
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import (
    gateway_and_worker,
    options_for,
    results_of,
    seqs_contiguous,
    stream_to_end,
)
from tests.integration.temporal_app import Number, agents

pytestmark = [pytest.mark.slow]


async def test_seed_002_temporal_sub_agents_run_as_child_workflows(
    temporal_dev: TemporalDev,
) -> None:
    """A local sub-agent's run is a child workflow of its parent's, its id the child's session."""
    store = MemoryEventStore()
    options = options_for(temporal_dev)
    with anyio.fail_after(60):
        async with gateway_and_worker(agents, store, options) as (server, _):
            await server.start(RemoteStartRequest(session_id="cw", agent_type="boss", message="go"))
            await stream_to_end(server, "cw")
        client = await Client.connect(temporal_dev.address)
        described = await client.get_workflow_handle("cw-sub-h1").describe()
    info = described.raw_description.workflow_execution_info
    assert info.parent_execution.workflow_id == "cw"
    assert described.workflow_type == "helix_agent"


async def test_a_round_runs_its_tool_and_its_child_at_once(temporal_dev: TemporalDev) -> None:
    """One turn calling a tool and a sub-agent: both run, each segment whole, in one round."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with gateway_and_worker(agents, store, options_for(temporal_dev)) as (server, _):
            await server.start(RemoteStartRequest(session_id="f1", agent_type="fan", message="go"))
            assert await stream_to_end(server, "f1") == "both done"
    log = await store.read("f1")
    assert seqs_contiguous(log)
    starts = [e.tool_call_id for e in log if isinstance(e, ToolStart)]
    ends = [e.tool_call_id for e in log if isinstance(e, ToolEnd)]
    assert sorted(starts) == sorted(ends) == ["a1", "h1"]
    [finished] = [e for e in log if isinstance(e, SubSessionFinished)]
    assert finished.status == "completed"
    assert finished.output == {"value": 6}


class _Toolset:
    """A toolset offering ``tools`` while open (as an MCP server's would)."""

    def __init__(self, tools: list[Any]) -> None:
        self._tools = tools
        self.opened = 0

    @property
    def name(self) -> str:
        return "numbers"

    def tools(self) -> list[Any]:
        return self._tools

    async def __aenter__(self) -> _Toolset:
        self.opened += 1
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_a_toolsets_tools_run_as_activities(temporal_dev: TemporalDev) -> None:
    """An agent's toolset is opened once by the worker's executor; its tools are called as
    any tool, each an activity."""

    def triple(value: Number, ctx: Any) -> int:
        return value.x * 3

    numbers = _Toolset([define_tool("triple", "Triple a number.", Number, triple)])
    tripler = define_agent(
        "tripler",
        toolsets=[numbers],
        llm=ScriptedLLM([[ScriptedLLM.call("triple", {"x": 4}, id="t1")], "twelve"]),
    )
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with gateway_and_worker({"tripler": tripler}, store, options_for(temporal_dev)) as (
            server,
            _,
        ):
            await server.start(
                RemoteStartRequest(session_id="ts", agent_type="tripler", message="?")
            )
            assert await stream_to_end(server, "ts") == "twelve"
    [result] = results_of(await store.read("ts"), "t1")
    assert result.message.content == "12"
    assert numbers.opened >= 1
