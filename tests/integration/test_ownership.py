"""A run whose session another host claimed stops at its next append, writing nothing more.

This is how a partitioned old owner that comes back after a takeover behaves:
its compare-and-append loses to the claim, it folds the foreign
``host_claimed``, and it leaves the session to the new owner.
"""

from __future__ import annotations

import time

import anyio
from pydantic import BaseModel

from helix_agents import AgentExecutor, ToolContext, define_agent, define_tool
from helix_agents.events import HostClaimed
from helix_agents.log import project_state
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore


class Q(BaseModel):
    query: str


class Out(BaseModel):
    answer: str


async def test_a_claimed_session_is_left_alone_by_its_old_run() -> None:
    entered, gate = anyio.Event(), anyio.Event()

    async def slow(value: Q, ctx: ToolContext) -> str:
        entered.set()
        await gate.wait()
        return "late"

    agent = define_agent(
        "worker",
        output_schema=Out,
        tools=[define_tool("slow", "Blocks until the gate opens", Q, slow)],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("slow", {"query": "q"})], ScriptedLLM.finish({"answer": "x"})]
        ),
    )
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, [agent], host_id="old-host") as executor:
            await executor.execute(agent, "go", session_id="s")
            await entered.wait()
            last = (await store.read("s"))[-1].seq
            claim = HostClaimed(session_id="s", seq=last + 1, ts=time.time(), host_id="new-host")
            await store.append("s", [claim], last)  # another host took it over
            gate.set()  # the old run wakes and tries to record the tool's result
            await executor.wait_idle("s")
    log = await store.read("s")
    assert log[-1] == claim  # the old run wrote nothing after the claim
    state = project_state(log)
    assert state.host_id == "new-host"
    assert state.status == "running"  # for the new owner to finish, not failed by the old
    assert not executor.is_executing("s")
