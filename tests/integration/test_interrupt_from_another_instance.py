"""Interrupts and aborts are events in the log: any server sharing the store delivers them.

Two AgentServers on one SQLite file (two store objects, as two processes would
have): a session runs on A; the interrupt is sent to B. A's run sees it through
its tail (which polls the file for other writers) and stops.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentConfig, ToolContext, define_agent, define_tool
from helix_agents.errors import AgentServerError
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteResumeRequest, RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import SqliteEventStore


class Wait(BaseModel):
    seconds: float


class Done(BaseModel):
    done: bool


def _agent(started: anyio.Event) -> AgentConfig:
    async def slow(value: Wait, ctx: ToolContext) -> str:
        started.set()
        await anyio.sleep(value.seconds)
        return "slept"

    return define_agent(
        "sleeper",
        output_schema=Done,
        tools=[define_tool("slow", "Wait", Wait, slow)],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("slow", {"seconds": 60})], ScriptedLLM.finish({"done": True})]
        ),
    )


@pytest.mark.parametrize("stop", ["interrupt", "abort"])
async def test_a_stop_sent_to_another_instance_reaches_the_run(tmp_path: Path, stop: str) -> None:
    started = anyio.Event()
    agent = _agent(started)
    store_a = SqliteEventStore(tmp_path / "shared.db", poll_interval=0.05)
    store_b = SqliteEventStore(tmp_path / "shared.db", poll_interval=0.05)
    with anyio.fail_after(30):
        async with AgentServer([agent], store_a) as a, AgentServer([agent], store_b) as b:
            await a.start_agent(
                RemoteStartRequest(session_id="s", agent_type="sleeper", message="go")
            )
            await started.wait()
            assert (await b.get_status("s")).is_executing is False  # not B's run
            if stop == "interrupt":
                await b.interrupt_agent("s", "from B")
            else:
                await b.abort_agent("s", "from B")
            await a.executor.wait_idle("s")  # A's run ends well before the 60 s tool
            status = await a.get_status("s")
            if stop == "interrupt":
                assert status.status == "interrupted"
                # Resumable from B too; B runs it now.
                await b.resume_agent(RemoteResumeRequest(session_id="s"))
                assert (await b.get_status("s")).is_executing is True
                await b.abort_agent("s", "done")
                await b.executor.wait_idle("s")
            else:
                assert status.status == "failed"
                assert status.error == "aborted: from B"
                with pytest.raises(AgentServerError) as finished:
                    await b.resume_agent(RemoteResumeRequest(session_id="s"))
                assert finished.value.code == "ALREADY_COMPLETED"
    await store_a.close()
    await store_b.close()
