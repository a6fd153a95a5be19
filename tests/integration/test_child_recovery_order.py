"""A dropped child stream asks the child's status before reconnecting (specs/runtime.md).

Seed 001/004's recovery: status first; completed -> take its output (no
re-read needed); failed -> its error; running -> reconnect from the last
sequence held. Ours asks status first too, re-reads the tail of an ended
child so the parent's stream stays whole, and if that stream stays out of
reach the call ends with the outcome the status gave. A remote child on
uvicorn; its parent's transport drops the first stream once the child has
ended (synchronised on the child's log).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from hitl_checks import until
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentConfig, AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.errors import TransportError
from helix_agents.log.store import EventStore
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteStatusResponse, TransportEvent
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.anyio

LIMIT = 30
CHILD = "r1-remote-call_0_0"


class Ask(BaseModel):
    query: str


class Out(BaseModel):
    answer: str


class Dropping(HttpRemoteAgentTransport):
    """Records the order of stream/status calls; the first stream ends, empty, once the child ended.

    ``later_streams_fail``: every later stream raises a network error.
    """

    def __init__(self, url: str, store: EventStore, *, later_streams_fail: bool) -> None:
        super().__init__(url, max_retries=0, timeout=10)
        self.calls: list[str] = []
        self._store = store
        self._later_streams_fail = later_streams_fail

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        self.calls.append("status")
        return await super().get_status(session_id)

    async def stream(  # type: ignore[override]
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        self.calls.append("stream")
        if self.calls.count("stream") == 1:
            await until(self._store, session_id, lambda state: state.is_terminal)
            return  # dropped: no end, no error
        if self._later_streams_fail:
            raise TransportError("the child's stream cannot be read")
        async for event in super().stream(session_id, from_sequence):
            yield event


def _failing(request: LLMRequest) -> ScriptStep:
    raise RuntimeError("the model broke")


def _root(transport: Dropping) -> AgentConfig:
    tool = create_remote_sub_agent_tool(
        "child",
        description="the child, remote",
        input_schema=Ask,
        output_schema=Out,
        transport=transport,
        remote_agent_type="child",
        stream_retries=2,
        stream_retry_base=0.01,
    )
    return define_agent(
        "root",
        tools=[tool],
        llm=ScriptedLLM([[ScriptedLLM.call("subagent__child", {"query": "q"})], "done"]),
    )


async def _run(child: AgentConfig, *, later_streams_fail: bool) -> tuple[Any, list[str]]:
    remote_store = MemoryEventStore()
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(AgentServer([child], remote_store))) as url:
            transport = Dropping(url, remote_store, later_streams_fail=later_streams_fail)
            async with transport:
                root = _root(transport)
                async with AgentExecutor(store, [root]) as executor:
                    handle = await executor.execute(root, "hi", session_id="r1")
                    assert (await handle.result()).status == "completed"
                    state = await executor.state("r1")
    return state.sub_sessions[CHILD], transport.calls


async def test_a_completed_child_gives_its_output_from_its_status_after_a_drop() -> None:
    child = define_agent(
        "child", output_schema=Out, llm=ScriptedLLM([ScriptedLLM.finish({"answer": "42"})])
    )
    ref, calls = await _run(child, later_streams_fail=True)
    assert calls[:2] == ["stream", "status"]  # status first, before any reconnect
    assert ref.status == "completed"
    assert ref.output == {"answer": "42"}


async def test_a_failed_child_is_asked_its_status_before_the_reconnect() -> None:
    child = define_agent("child", output_schema=Out, llm=ScriptedLLM(_failing))
    ref, calls = await _run(child, later_streams_fail=False)
    # Status first; the stream is then re-read (its tail reaches the parent's
    # stream) and ends in the child's error.
    assert calls[:3] == ["stream", "status", "stream"]
    assert ref.status == "failed"
    assert "the model broke" in (ref.error or "")
