"""A parent's process dies mid remote call; a new process resumes it and reconciles the child.

The remote child (on its own HTTP server, its own store) keeps running and
completes while the parent is dead. The resumed parent asks the child's
status, reconnects from the last child seq its log holds, forwards the rest
exactly once, and records the child's output.
"""

from __future__ import annotations

from pathlib import Path

import anyio
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, SessionState, create_remote_sub_agent_tool, define_agent
from helix_agents.events import ChildChunkForwarded, Completed, ToolEnd
from helix_agents.log import project_state
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import ChunkEvent
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport


class Query(BaseModel):
    query: str


class Found(BaseModel):
    findings: str


class Out(BaseModel):
    summary: str


WORDS = " ".join(f"w{i}" for i in range(30))


def _parent(url: str) -> tuple[object, HttpRemoteAgentTransport]:
    transport = HttpRemoteAgentTransport(url, retry_base_delay=0.01)
    tool = create_remote_sub_agent_tool(
        "researcher",
        description="research",
        input_schema=Query,
        output_schema=Found,
        transport=transport,
        remote_agent_type="researcher",
        stream_retry_base=0.01,
    )
    parent = define_agent(
        "parent",
        output_schema=Out,
        tools=[tool],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__researcher", {"query": "q"}, id="c1")],
                ScriptedLLM.finish({"summary": "ok"}),
            ]
        ),
    )
    return parent, transport


async def test_a_resumed_parent_records_a_remote_child_that_finished_meanwhile(
    tmp_path: Path,
) -> None:
    child = define_agent(
        "researcher",
        output_schema=Found,
        llm=ScriptedLLM(
            [ScriptedLLM.finish({"findings": "done"}, text=WORDS)], chunk_words=1, delta_delay=0.02
        ),
    )
    remote_store = MemoryEventStore()
    child_id = "p-remote-c1"
    with anyio.fail_after(60):
        async with serve(create_http_app(AgentServer([child], remote_store))) as url:
            # First process: the parent starts the call, forwards a few chunks, then dies.
            store = SqliteEventStore(tmp_path / "parent.db")
            parent, transport = _parent(url)
            with anyio.CancelScope() as crash:
                async with AgentExecutor(store, [parent]) as executor:
                    await executor.execute(parent, "go", session_id="p")
                    forwarded = 0
                    async for event in store.tail("p"):
                        forwarded += isinstance(event, ChildChunkForwarded)
                        if forwarded == 5:
                            crash.cancel()  # the process dies: no cleanup reaches the log
                            break
            log = await store.read("p")
            await store.close()
            await transport.aclose()
            held = max(e.child_seq for e in log if isinstance(e, ChildChunkForwarded))
            # The child goes on without its parent and completes.
            async for event in remote_store.tail(child_id):
                if isinstance(event, Completed):
                    break
            # Second process: a new executor on the same file resumes the parent.
            store = SqliteEventStore(tmp_path / "parent.db")
            parent, transport = _parent(url)
            async with AgentExecutor(store, [parent]) as executor:
                handle = await executor.resume("p")
                result = await handle.result()
            expected = [
                event.sequence
                async for event in transport.stream(child_id)
                if isinstance(event, ChunkEvent)
            ]
            await transport.aclose()
            final = await store.read("p")
            await store.close()
    assert result.status == "completed"
    assert result.output.model_dump() == {"summary": "ok"}
    forwarded = [e.child_seq for e in final if isinstance(e, ChildChunkForwarded)]
    assert forwarded == expected  # the whole child stream, once, in order
    assert held < expected[-1]  # the crash really cut the stream short
    end = next(e for e in final if isinstance(e, ToolEnd) and e.tool_name == "subagent__researcher")
    assert end.error is None
    assert end.result == {"findings": "done"}
    ref = (await _state(tmp_path)).sub_sessions[child_id]
    assert ref.status == "completed"
    assert ref.last_child_seq == expected[-1]


async def _state(tmp_path: Path) -> SessionState:
    store = SqliteEventStore(tmp_path / "parent.db")
    try:
        return project_state(await store.read("p"))
    finally:
        await store.close()
