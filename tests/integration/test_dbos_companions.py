"""Seed 004's companions on DBOS: a re-consult of a completed companion appended exactly once,
and a blocking spawn of a child that fails reported as failed (the seed's DBOS limitation on
blocking spawns, which this runtime does not have). Blocking and non-blocking spawns, on both
durable runtimes: ``test_durable_runtime.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import PersistentAgent, define_agent
from helix_agents.dbos import DbosOptions, dbos_server
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import seqs_contiguous, stream_to_end

pytestmark = [pytest.mark.slow]


class Answer(BaseModel):
    """A companion's typed answer."""

    text: str


def _options(tmp_path: Path) -> DbosOptions:
    return DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")


def _critic(request: LLMRequest) -> ScriptStep:
    asked = [m.content for m in request.messages if isinstance(m, UserMessage)][-1]
    return ScriptedLLM.finish({"text": f"critique of {asked}"})


def _lead(request: LLMRequest) -> Any:
    turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
    spawn = "companion__spawnAgent"
    if turn == 0:
        return [ScriptedLLM.call(spawn, {"agent": "critic", "name": "c", "initialMessage": "v1"})]
    if turn == 1:
        return [ScriptedLLM.call(spawn, {"agent": "critic", "name": "c", "initialMessage": "v2"})]
    if turn == 2:
        return [ScriptedLLM.call(spawn, {"agent": "breaker", "name": "b", "initialMessage": "x"})]
    results = [m.content for m in request.messages if isinstance(m, ToolResultMessage)]
    return " | ".join(results)


critic = define_agent("critic", output_schema=Answer, llm=ScriptedLLM(_critic))
breaker = define_agent("breaker", llm=ScriptedLLM([ScriptedLLM.fail("the model broke")]))
lead = define_agent(
    "lead",
    llm=ScriptedLLM(_lead),
    persistent_agents=[
        PersistentAgent(critic, mode="blocking"),
        PersistentAgent(breaker, mode="blocking"),
    ],
)


async def test_reconsult_once_and_a_failed_blocking_child_reported_failed(tmp_path: Path) -> None:
    """The critic loop: a second spawn of the completed ``c`` continues its session (memory
    kept), its consult appended exactly once; a blocking spawn of a child whose model fails
    returns ``failed`` (not a hang, not a success)."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server({"lead": lead}, store, _options(tmp_path)) as server:
            await server.start(RemoteStartRequest(session_id="rc", agent_type="lead", message="go"))
            output = await stream_to_end(server, "rc")
    first, second, failed = output.split(" | ")
    assert "critique of v1" in first
    assert "critique of v2" in second
    assert '"status":"failed"' in failed
    child = await store.read("rc-agent-c")
    said = [m.content for m in project_state(child).messages if isinstance(m, UserMessage)]
    assert said == ["v1", "v2"]  # the consult appended once, on the preserved session
    assert project_state(child).status == "completed"
    assert project_state(await store.read("rc-agent-b")).status == "failed"
    for session_id in ("rc", "rc-agent-c", "rc-agent-b"):
        assert seqs_contiguous(await store.read(session_id))
