"""Typed results: an agent's output comes back as its ``output_schema`` class.

``handle.result().output`` and ``await executor.run(agent, message)`` give a
``Findings`` for ``output_schema=Findings`` (the log holds its JSON); an agent
without a schema gives its final text. ``run`` and ``run_sync`` raise
``AgentRunError`` for a run that did not complete; the handle never raises for
how a run ended.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent, define_tool, run_sync
from helix_agents.errors import AgentRunError, UsageError
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore


class Findings(BaseModel):
    findings: str
    sources: list[str] = []


class Query(BaseModel):
    query: str


def researcher(llm: ScriptedLLM | None = None) -> Any:
    return define_agent(
        "researcher",
        output_schema=Findings,
        llm=llm
        or ScriptedLLM([ScriptedLLM.finish({"findings": "logs replay", "sources": ["a", "b"]})]),
    )


def broken_tool(value: Query, ctx: Any) -> str:
    raise RuntimeError("the disk is on fire")


async def test_the_handle_gives_back_an_instance_of_the_output_schema() -> None:
    agent = researcher()
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            handle = await executor.execute(agent, "Why event logs?")
            result = await handle.result()
            raw = (await executor.state(handle.session_id)).output
    assert result.status == "completed"
    assert result.output == Findings(findings="logs replay", sources=["a", "b"])
    assert type(result.output) is Findings
    assert raw == {"findings": "logs replay", "sources": ["a", "b"]}  # the log keeps JSON
    assert result.unwrap() is result.output


async def test_run_is_a_one_liner_returning_the_output() -> None:
    agent = researcher()
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            findings = await executor.run(agent, "Why event logs?")
    assert isinstance(findings, Findings)
    assert findings.sources == ["a", "b"]


async def test_an_agent_without_a_schema_returns_its_text() -> None:
    chatty = define_agent("chatty", llm=ScriptedLLM(["Hello there."]))
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [chatty]) as executor:
            assert await executor.run(chatty, "hi") == "Hello there."


async def test_a_session_resumed_after_a_pause_is_typed_too() -> None:
    agent = define_agent(
        "asker",
        output_schema=Findings,
        tools=[define_tool("confirm", "Ask the user.", Query, "client")],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("confirm", {"query": "ok?"})], ScriptedLLM.finish({"findings": "y"})]
        ),
    )
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            handle = await executor.execute(agent, "go")
            assert (await handle.result()).status == "paused"
            [pending] = await handle.pending_inputs()
            await handle.submit_tool_result(pending.tool_call_id, "yes")
            result = await handle.result()
    assert result.status == "completed"
    assert result.output == Findings(findings="y")


async def test_a_failed_run_raises_from_run_but_the_handle_returns_its_status() -> None:
    agent = define_agent(
        "fragile",
        output_schema=Findings,
        tools=[define_tool("lookup", "Looks it up.", Query, broken_tool)],
        llm=ScriptedLLM([[ScriptedLLM.call("lookup", {"query": "q"})]]),
        max_steps=1,
    )
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            with pytest.raises(AgentRunError) as caught:
                await executor.run(agent, "go", session_id="s-fails")
            state = await executor.state("s-fails")
    error = caught.value
    assert (error.session_id, error.status) == ("s-fails", "failed")
    assert error.error == state.error
    assert str(error).startswith("session 's-fails' ended failed: ")
    assert str(error) == "session 's-fails' ended failed: Max steps exceeded"


async def test_the_handle_of_a_failed_run_does_not_raise() -> None:
    agent = define_agent(
        "fragile",
        output_schema=Findings,
        llm=ScriptedLLM([["no finish"], ["still none"]]),
        max_steps=1,
    )
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            handle = await executor.execute(agent, "go")
            result = await handle.result()
    assert result.status == "failed"
    assert result.output is None
    with pytest.raises(AgentRunError, match="ended failed"):
        result.unwrap()


async def test_a_paused_run_raises_saying_it_waits_for_input() -> None:
    agent = define_agent(
        "asker",
        output_schema=Findings,
        tools=[define_tool("confirm", "Ask the user.", Query, "client")],
        llm=ScriptedLLM([[ScriptedLLM.call("confirm", {"query": "ok?"})]]),
    )
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            with pytest.raises(AgentRunError, match="paused waiting for input") as caught:
                await executor.run(agent, "go")
    assert caught.value.status == "paused"


def test_run_sync_runs_to_the_end_from_synchronous_code() -> None:
    store = MemoryEventStore()
    findings = run_sync(researcher(), "Why event logs?", store=store, session_id="s-sync")
    assert findings == Findings(findings="logs replay", sources=["a", "b"])

    async def logged() -> int:
        return len(await store.read("s-sync"))

    assert anyio.run(logged) > 0  # the store was left open, the log kept


def test_run_sync_raises_for_a_failed_run() -> None:
    agent = define_agent("fragile", output_schema=Findings, llm=ScriptedLLM([["x"]]), max_steps=1)
    with pytest.raises(AgentRunError, match="ended failed"):
        run_sync(agent, "go", store=MemoryEventStore())


async def test_run_sync_inside_an_event_loop_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="cannot run inside an event loop"):
        run_sync(researcher(), "go", store=MemoryEventStore())


def test_run_sync_refuses_an_agent_with_no_model() -> None:
    with pytest.raises(UsageError, match="has no model"):
        run_sync(define_agent("mute"), "go", store=MemoryEventStore())
