"""An interrupt of a parent blocked on a blocking companion reaches the companion (DBOS, Temporal).

The parent's stop step halts the companion its blocking spawn follows, as the
built-in runtime's stop halts the links it follows: both end ``interrupted``
(the seed's budget is < 500 ms to the whole tree; bounded generously here on
the shared machine, the measure printed), and a resume of the parent resumes
the companion with the call, which then answers.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import PersistentAgent, ToolContext, define_agent, define_tool
from helix_agents.events import Aborted, Interrupted, ToolEnd, ToolStart
from helix_agents.log import project_state
from helix_agents.log.store import EventStore
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.protocol import RemoteResumeRequest, RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import seqs_contiguous, stream_to_end, wait_for

pytestmark = [pytest.mark.slow]

DOZE = {"seconds": 60.0}
"""How long the companion's tool sleeps (the test shortens it before the resume)."""


class Nothing(BaseModel):
    """No arguments."""


async def _doze(value: Nothing, ctx: ToolContext) -> str:
    await anyio.sleep(DOZE["seconds"])
    return "slept"


doze = define_tool("doze", "Sleep.", Nothing, _doze)
sleeper = define_agent(
    "sleeper",
    tools=[doze],
    llm=ScriptedLLM([[ScriptedLLM.call("doze", {}, id="z1")], "rested"]),
)


def _lead(request: LLMRequest) -> Any:
    if not any(isinstance(m, AssistantMessage) for m in request.messages):
        args = {"agent": "sleeper", "name": "s", "initialMessage": "rest"}
        return [ScriptedLLM.call("companion__spawnAgent", args, id="sp1")]
    return " | ".join(m.content for m in request.messages if isinstance(m, ToolResultMessage))


lead = define_agent(
    "lead", llm=ScriptedLLM(_lead), persistent_agents=[PersistentAgent(sleeper, mode="blocking")]
)
AGENTS = {"lead": lead, "sleeper": sleeper}
CHILD = "ci-agent-s"


def _dozing(event: Any) -> bool:
    return isinstance(event, ToolStart) and event.tool_name == "doze"


Served = Callable[[EventStore], AbstractAsyncContextManager[AgentServer]]


@pytest.fixture(params=["dbos", "temporal"])
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Served:
    """The agents served on DBOS (SQLite) or on Temporal (the dev server, a worker here)."""
    if request.param == "dbos":
        from helix_agents.dbos import DbosOptions, dbos_server

        options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")

        @asynccontextmanager
        async def on_dbos(store: EventStore) -> AsyncIterator[AgentServer]:
            async with dbos_server(AGENTS, store, options) as server:
                yield server

        return on_dbos
    from tests.integration._temporal_kit import gateway_and_worker, options_for

    dev = request.getfixturevalue("temporal_dev")
    temporal = options_for(dev)

    @asynccontextmanager
    async def on_temporal(store: EventStore) -> AsyncIterator[AgentServer]:
        async with gateway_and_worker(AGENTS, store, temporal) as (server, _worker):
            yield server

    return on_temporal


async def test_interrupt_reaches_the_blocking_companion_and_a_resume_goes_on(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Interrupt the parent while its blocking spawn follows the companion's tool: both end
    interrupted, every tool_start closed; a resume re-runs the spawn, which resumes the
    companion (its memory kept) and returns its answer."""
    monkeypatch.setitem(DOZE, "seconds", 60.0)
    store = MemoryEventStore()
    with anyio.fail_after(90):
        async with served(store) as server:
            await server.start(RemoteStartRequest(session_id="ci", agent_type="lead", message="go"))
            await wait_for(store, CHILD, _dozing)
            began = time.monotonic()
            await server.interrupt("ci", "enough")
            await wait_for(store, CHILD, lambda e: isinstance(e, Interrupted))
            await wait_for(store, "ci", lambda e: isinstance(e, Interrupted))
            tree = time.monotonic() - began
            print(f"the interrupt reached the whole tree in {tree * 1000:.0f} ms")
            assert tree < 3.0  # the seed's budget is 0.5 s; generous on a shared machine
            for session_id in ("ci", CHILD):
                log = await store.read(session_id)
                assert project_state(log).status == "interrupted"
                starts = {e.tool_call_id for e in log if isinstance(e, ToolStart)}
                assert starts == {e.tool_call_id for e in log if isinstance(e, ToolEnd)}
            parent = project_state(await store.read("ci"))
            assert parent.sub_sessions[CHILD].status == "interrupted"
            DOZE["seconds"] = 0.0
            await server.resume(RemoteResumeRequest(session_id="ci"))
            output = await stream_to_end(server, "ci")
    assert "rested" in output
    child = project_state(await store.read(CHILD))
    assert child.status == "completed"
    for session_id in ("ci", CHILD):
        assert seqs_contiguous(await store.read(session_id))


async def test_abort_reaches_the_blocking_companion(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Abort the parent while its blocking spawn follows the companion: the companion gets
    the abort too (its log: aborted), and both end failed."""
    monkeypatch.setitem(DOZE, "seconds", 60.0)
    store = MemoryEventStore()
    child = "ca-agent-s"
    with anyio.fail_after(60):
        async with served(store) as server:
            await server.start(RemoteStartRequest(session_id="ca", agent_type="lead", message="go"))
            await wait_for(store, child, _dozing)
            await server.abort("ca", "stop it")
            await wait_for(store, child, lambda e: isinstance(e, Aborted))
            await wait_for(store, "ca", lambda e: isinstance(e, Aborted))
    for session_id in ("ca", child):
        log = await store.read(session_id)
        assert project_state(log).status == "failed"
        assert seqs_contiguous(log)
    assert project_state(await store.read("ca")).sub_sessions[child].status != "running"
