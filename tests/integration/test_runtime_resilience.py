"""One session's store failure ends that run only; the executor and its other runs go on."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
from pydantic import BaseModel

from helix_agents import AgentExecutor, ToolContext, define_agent, define_tool
from helix_agents.errors import StoreError
from helix_agents.events import Event
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore


class BrokenFor(MemoryEventStore):
    """A memory store whose appends to one session fail once it has ``after`` events."""

    def __init__(self, session_id: str, after: int) -> None:
        super().__init__()
        self.broken = session_id
        self.after = after

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        if session_id == self.broken and expected_seq >= self.after:
            raise StoreError("disk on fire")
        return await super().append(session_id, events, expected_seq)


class Q(BaseModel):
    query: str


class Out(BaseModel):
    answer: str


async def test_a_store_failure_in_one_run_leaves_the_others_running() -> None:
    gate = anyio.Event()

    async def wait(value: Q, ctx: ToolContext) -> str:
        await gate.wait()
        return "ok"

    agent = define_agent(
        "worker",
        output_schema=Out,
        tools=[define_tool("wait", "Wait for the gate", Q, wait)],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("wait", {"query": "q"})], ScriptedLLM.finish({"answer": "done"})]
        ),
    )
    store = BrokenFor("doomed", after=4)
    with anyio.fail_after(20):
        async with AgentExecutor(store, [agent]) as executor:
            doomed = await executor.execute(agent, "go", session_id="doomed")
            healthy = await executor.execute(agent, "go", session_id="healthy")
            await executor.wait_idle("doomed")  # its run ended on the broken store
            gate.set()
            result = await healthy.result()
            assert doomed.session_id == "doomed"
    assert result.status == "completed"
    assert result.output.model_dump() == {"answer": "done"}
    assert not executor.is_executing("doomed")
