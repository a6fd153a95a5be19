"""Seed names on the wire and in the log (issue 24, item 6; specs/http.md, specs/runtime.md).

- ``GET /status`` answers both our HITL fields (``awaitingInput``,
  ``pendingClientToolCallIds``) and seed 003's (``awaitingClientTool``,
  ``pendingClientToolCalls``);
- the step limit fails with the seed's text, ``Max steps exceeded``;
- a ``SubSessionRef`` carries ``startedAt`` / ``completedAt``.

The ``/status`` test runs on every runtime (``runtime``); the other two are
the executor's own records, not the wire.
"""

from __future__ import annotations

import anyio
import httpx
import pytest
from hitl_app import Out, Query, root_agent, worker
from hitl_checks import until
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, create_sub_agent_tool, define_agent, define_tool
from helix_agents.events import SubSessionFinished, SubSessionStarted
from helix_agents.models import ScriptedLLM
from helix_agents.server import create_http_app
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.anyio

LIMIT = 30


class Nothing(BaseModel):
    pass


async def test_status_answers_the_seeds_client_tool_names_too(runtime: Runtime) -> None:
    root = root_agent(create_sub_agent_tool(worker("child", ("ask_user", "rm")), Query))
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with (
            runtime.server([root], store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as client,
        ):
            started = await client.post(
                "/start", json={"sessionId": "w1", "agentType": "root", "message": "hi"}
            )
            assert started.status_code == 200, started.text
            await until(store, "w1", lambda state: state.status == "paused")
            body = (await client.get("/status", params={"sessionId": "w1"})).json()
    assert body["awaitingInput"] is True
    assert body["awaitingClientTool"] is True
    kinds = {entry["toolName"]: entry["kind"] for entry in body["pendingInputs"]}
    assert kinds == {"ask_user": "client_tool", "rm": "approval"}
    (call,) = body["pendingClientToolCalls"]
    assert call["toolName"] == "ask_user"
    assert call["kind"] == "client_tool"
    assert call["toolCallId"] in {e["toolCallId"] for e in body["pendingInputs"]}
    assert body["pendingClientToolCallIds"] == []  # the root's own client tools: none


async def test_the_step_limit_fails_with_the_seeds_text() -> None:
    loop = define_tool("loop", "Loop.", Nothing, lambda value, ctx: {"again": True})
    agent = define_agent(
        "looper",
        tools=[loop],
        max_steps=2,
        llm=ScriptedLLM(lambda request: ScriptedLLM.call("loop", {})),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            result = await (await executor.execute(agent, "go", session_id="m1")).result()
    assert result.status == "failed"
    assert result.error == "Max steps exceeded"


async def test_a_sub_session_ref_carries_started_at_and_completed_at() -> None:
    child = define_agent(
        "child",
        output_schema=Out,
        llm=ScriptedLLM([ScriptedLLM.finish({"answer": "ok"})]),
    )
    root = root_agent(create_sub_agent_tool(child, Query))
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [root]) as executor:
            handle = await executor.execute(root, "go", session_id="t1")
            assert (await handle.result()).status == "completed"
            state = await executor.state("t1")
    log = await store.read("t1")
    started = next(e for e in log if isinstance(e, SubSessionStarted))
    finished = next(e for e in log if isinstance(e, SubSessionFinished))
    (ref,) = state.sub_sessions.values()
    assert ref.started_at == started.ts
    assert ref.completed_at == finished.ts
    assert ref.started_at <= ref.completed_at
