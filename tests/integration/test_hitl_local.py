"""Human in the loop through local sub-agents: client tools and approval gates (specs/hitl.md).

Each test runs a real tree on one executor and answers at the root only; the
whole tree must resume from that one call, and the root's stream must show
every chunk once.
"""

from __future__ import annotations

from contextlib import aclosing
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, create_sub_agent_tool, define_agent, define_tool
from helix_agents.errors import AgentServerError
from helix_agents.events import InputRequired
from helix_agents.log import encode_event, project_state, project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.anyio


class Query(BaseModel):
    query: str


class Out(BaseModel):
    answer: str


class Ask(BaseModel):
    question: str


class Color(BaseModel):
    color: str


removed: list[str] = []


def _remove(value: Ask, ctx: Any) -> dict[str, str]:
    removed.append(value.question)
    return {"removed": value.question}


ask = define_tool("ask_user", "Ask the user.", Ask, "client", output_schema=Color)
rm = define_tool("rm", "Remove a file.", Ask, _remove, requires_approval=True)


def _tree(grand_calls: list[Any]) -> Any:
    grand = define_agent(
        "grand",
        output_schema=Out,
        tools=[ask, rm],
        llm=ScriptedLLM([grand_calls, ScriptedLLM.finish({"answer": "grand done"})]),
    )
    child = define_agent(
        "child",
        output_schema=Out,
        tools=[create_sub_agent_tool(grand, Query)],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__grand", {"query": "go"})],
                ScriptedLLM.finish({"answer": "child done"}),
            ]
        ),
    )
    return define_agent(
        "root",
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM([[ScriptedLLM.call("subagent__child", {"query": "go"})], "All done."]),
    )


async def _until(executor: AgentExecutor, session_id: str, status: str) -> None:
    """Wait, on the log itself, until the session's status is ``status``."""
    store = executor.store
    with anyio.fail_after(10):
        if (await executor.service.get_status(session_id)).status == status:
            return
        async with aclosing(store.tail(session_id, 0)) as events:  # type: ignore[type-var]
            async for _event in events:
                if (await executor.service.get_status(session_id)).status == status:
                    return


async def _log_bytes(store: MemoryEventStore) -> list[bytes]:
    data: list[bytes] = []
    for session_id in sorted(await store.list_sessions()):
        data.extend(encode_event(event) for event in await store.read(session_id))
    return data


async def test_a_client_tool_and_an_approval_three_deep_resume_the_tree_from_the_root() -> None:
    removed.clear()
    root = _tree(
        [
            ScriptedLLM.call("ask_user", {"question": "color?"}),
            ScriptedLLM.call("rm", {"question": "tmp"}),
        ]
    )
    store = MemoryEventStore()
    async with AgentExecutor(store, [root]) as executor:
        handle = await executor.execute(root, "hi", session_id="r1")
        assert (await handle.result()).status == "paused"
        status = await executor.service.get_status("r1")
        assert status.awaiting_input
        entries = {entry.kind: entry for entry in status.pending_inputs}
        owner = "r1-sub-call_0_0-sub-call_0_0"
        assert set(entries) == {"client_tool", "approval"}
        for entry in entries.values():
            assert entry.owner_session_id == owner
            assert entry.path == ["r1", "r1-sub-call_0_0", owner]
        assert removed == []  # the gated tool has not run

        # The first answer leaves the owner waiting for the second: nothing resumes.
        client = entries["client_tool"].tool_call_id
        first = await handle.submit_tool_result(client, {"color": "red"})
        assert not first.resumed
        assert (await executor.service.get_status("r1")).status == "paused"
        assert [e.kind for e in await handle.pending_inputs()] == ["approval"]

        done = await handle.approve(entries["approval"].tool_call_id)
        assert done.resumed
        await _until(executor, "r1", "completed")
        assert removed == ["tmp"]

        stream = project_stream(await store.read("r1"))
        sequences = [item.sequence for item in stream]
        assert sequences == sorted(set(sequences))
        waits = [item.chunk for item in stream if isinstance(item.chunk, InputRequired)]
        # The owner's notice, then one per ancestor as it suspended; the last is the root's.
        assert [chunk.agent_id for chunk in waits] == [owner, "r1-sub-call_0_0", "r1"]
        grand = project_state(await store.read(owner))
        results = {m.tool_name: m for m in grand.messages if isinstance(m, ToolResultMessage)}
        assert results["ask_user"].content == '{"color":"red"}'
        assert results["rm"].content == '{"removed":"tmp"}'


async def test_a_denial_reaches_the_llm_as_an_error_with_the_reason() -> None:
    removed.clear()
    root = _tree([ScriptedLLM.call("rm", {"question": "everything"})])
    store = MemoryEventStore()
    async with AgentExecutor(store, [root]) as executor:
        handle = await executor.execute(root, "hi", session_id="r2")
        await handle.result()
        (entry,) = await handle.pending_inputs()
        assert (await handle.deny(entry.tool_call_id, "not today")).resumed
        await _until(executor, "r2", "completed")
        assert removed == []
        grand = project_state(await store.read(entry.owner_session_id))
        (result,) = [
            m for m in grand.messages if isinstance(m, ToolResultMessage) and m.tool_name == "rm"
        ]
        assert result.is_error
        assert "denied by a person: not today" in result.content


async def test_bad_answers_are_refused_and_change_nothing() -> None:
    root = _tree([ScriptedLLM.call("ask_user", {"question": "color?"})])
    store = MemoryEventStore()
    async with AgentExecutor(store, [root]) as executor:
        handle = await executor.execute(root, "hi", session_id="r3")
        await handle.result()
        (entry,) = await handle.pending_inputs()
        before = await _log_bytes(store)
        cases: list[tuple[str, Any]] = [
            ("NOT_FOUND", executor.submit_tool_result("r3", "no-such-call", 1)),
            ("NOT_FOUND", executor.submit_tool_result("nobody", entry.tool_call_id, 1)),
            ("INVALID_REQUEST", executor.submit_approval("r3", entry.tool_call_id, True)),
            ("INVALID_REQUEST", executor.submit_tool_result("r3", entry.tool_call_id, {"c": 1})),
        ]
        for code, call in cases:
            with pytest.raises(AgentServerError) as caught:
                await call
            assert caught.value.code == code
            assert await _log_bytes(store) == before
        # The field the schema wanted is named.
        with pytest.raises(AgentServerError, match="color"):
            await executor.submit_tool_result("r3", entry.tool_call_id, {"colour": "red"})
        assert await _log_bytes(store) == before

        assert (await handle.submit_tool_result(entry.tool_call_id, {"color": "blue"})).resumed
        await _until(executor, "r3", "completed")
        after = await _log_bytes(store)
        # Same answer again: 200, nothing changes; another answer: 409, nothing changes.
        assert not (await handle.submit_tool_result(entry.tool_call_id, {"color": "blue"})).resumed
        with pytest.raises(AgentServerError) as caught:
            await handle.submit_tool_result(entry.tool_call_id, {"color": "red"})
        assert caught.value.code == "ALREADY_ANSWERED"
        assert await _log_bytes(store) == after


async def test_two_children_suspended_at_once_answered_in_either_order() -> None:
    for order in ((0, 1), (1, 0)):
        workers = [
            define_agent(
                f"worker{i}",
                output_schema=Out,
                tools=[ask],
                llm=ScriptedLLM(
                    [
                        [ScriptedLLM.call("ask_user", {"question": f"q{i}"})],
                        ScriptedLLM.finish({"answer": f"w{i}"}),
                    ]
                ),
            )
            for i in range(2)
        ]
        parent = define_agent(
            "parent",
            tools=[create_sub_agent_tool(worker, Query) for worker in workers],
            llm=ScriptedLLM(
                [
                    [
                        ScriptedLLM.call("subagent__worker0", {"query": "a"}),
                        ScriptedLLM.call("subagent__worker1", {"query": "b"}),
                    ],
                    "both done",
                ]
            ),
        )
        store = MemoryEventStore()
        async with AgentExecutor(store, [parent]) as executor:
            handle = await executor.execute(parent, "go", session_id="p")
            assert (await handle.result()).status == "paused"
            entries = sorted(await handle.pending_inputs(), key=lambda e: e.arguments["question"])
            assert len(entries) == 2
            assert entries[0].tool_call_id != entries[1].tool_call_id  # unique in the tree
            for index in order:
                await handle.submit_tool_result(entries[index].tool_call_id, {"color": "x"})
            await _until(executor, "p", "completed")
            state = project_state(await store.read("p"))
            assert state.output == "both done"
            assert {ref.status for ref in state.sub_sessions.values()} == {"completed"}


async def test_an_unanswered_approval_expires_into_an_error_the_llm_sees() -> None:
    removed.clear()
    slow = define_tool("rm", "Remove.", Ask, _remove, requires_approval=True, expires_in=0.2)
    agent = define_agent(
        "solo",
        tools=[slow],
        llm=ScriptedLLM([[ScriptedLLM.call("rm", {"question": "x"})], "gave up"]),
    )
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        handle = await executor.execute(agent, "go", session_id="e1")
        assert (await handle.result()).status == "paused"
        (entry,) = await handle.pending_inputs()
        assert entry.expires_in == 0.2
        assert entry.expires_at is not None
        await _until(executor, "e1", "completed")
        state = project_state(await store.read("e1"))
        (result,) = [m for m in state.messages if isinstance(m, ToolResultMessage)]
        assert result.is_error
        assert "no answer within 0.2 s" in result.content
        assert removed == []


async def test_an_approval_predicate_gates_only_the_calls_it_names() -> None:
    removed.clear()

    def risky(value: Ask, ctx: Any) -> bool:
        return value.question.startswith("/")

    gated = define_tool("rm", "Remove.", Ask, _remove, requires_approval=risky)
    agent = define_agent(
        "solo",
        tools=[gated],
        llm=ScriptedLLM(
            [
                [
                    ScriptedLLM.call("rm", {"question": "tmp"}),
                    ScriptedLLM.call("rm", {"question": "/etc"}),
                ],
                "ok",
            ]
        ),
    )
    store = MemoryEventStore()
    async with AgentExecutor(store, [agent]) as executor:
        handle = await executor.execute(agent, "go", session_id="g1")
        assert (await handle.result()).status == "paused"
        (entry,) = await handle.pending_inputs()
        assert entry.arguments == {"question": "/etc"}
        assert removed == ["tmp"]
        await handle.approve(entry.tool_call_id)
        await _until(executor, "g1", "completed")
        assert removed == ["tmp", "/etc"]


async def test_approving_a_delegation_gates_the_sub_agent() -> None:
    worker = define_agent(
        "worker", output_schema=Out, llm=ScriptedLLM([ScriptedLLM.finish({"answer": "w"})])
    )
    boss = define_agent(
        "boss",
        tools=[create_sub_agent_tool(worker, Query, requires_approval=True)],
        llm=ScriptedLLM([[ScriptedLLM.call("subagent__worker", {"query": "a"})], "done"]),
    )
    store = MemoryEventStore()
    async with AgentExecutor(store, [boss]) as executor:
        handle = await executor.execute(boss, "go", session_id="b1")
        assert (await handle.result()).status == "paused"
        (entry,) = await handle.pending_inputs()
        assert (entry.kind, entry.tool_name) == ("approval", "subagent__worker")
        assert project_state(await store.read("b1")).sub_sessions == {}  # nothing started
        await handle.approve(entry.tool_call_id)
        await _until(executor, "b1", "completed")
        assert len(project_state(await store.read("b1")).sub_sessions) == 1


async def test_a_waiting_expiry_timer_does_not_hold_the_executor_open() -> None:
    slow = define_tool("rm", "Remove.", Ask, _remove, requires_approval=True, expires_in=3600)
    agent = define_agent(
        "solo", tools=[slow], llm=ScriptedLLM([[ScriptedLLM.call("rm", {"question": "x"})], "ok"])
    )
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "go", session_id="t1")
            assert (await handle.result()).status == "paused"
    # The entry is still open, in the log, for the next executor's recover() to re-arm.
    assert project_state(await store.read("t1")).status == "paused"


async def test_an_expiry_survives_a_restart_of_the_roots_executor() -> None:
    removed.clear()
    slow = define_tool("rm", "Remove.", Ask, _remove, requires_approval=True, expires_in=0.3)
    agent = define_agent(
        "solo", tools=[slow], llm=ScriptedLLM([[ScriptedLLM.call("rm", {"question": "x"})], "ok"])
    )
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "go", session_id="x1")
            assert (await handle.result()).status == "paused"
        # The process is gone before the entry expired; its timer with it.
        assert project_state(await store.read("x1")).status == "paused"
        async with AgentExecutor(store, [agent]) as executor:
            await executor.recover()  # re-arms the timer from the log
            await _until(executor, "x1", "completed")
    state = project_state(await store.read("x1"))
    (result,) = [m for m in state.messages if isinstance(m, ToolResultMessage)]
    assert "no answer within 0.3 s" in result.content
    assert removed == []


async def test_aborting_a_paused_root_aborts_the_waiting_tree_and_refuses_late_answers() -> None:
    root = _tree([ScriptedLLM.call("ask_user", {"question": "color?"})])
    store = MemoryEventStore()
    async with AgentExecutor(store, [root]) as executor:
        handle = await executor.execute(root, "hi", session_id="a1")
        assert (await handle.result()).status == "paused"
        [entry] = await handle.pending_inputs()
        await executor.service.abort("a1", "enough")
        aborted = await _log_bytes(store)
        owner = entry.owner_session_id
        for session_id in ("a1", owner):  # at the root, and at the owner itself
            with pytest.raises(AgentServerError) as refused:
                await executor.service.submit_tool_result(
                    session_id, entry.tool_call_id, {"color": "red"}
                )
            assert refused.value.code == "ALREADY_COMPLETED"
        assert await _log_bytes(store) == aborted
        child = "a1-sub-call_0_0"
        for parent, session_id in (("a1", child), (child, owner)):
            state = project_state(await store.read(session_id))
            assert (state.status, state.error) == ("failed", "aborted: enough")
            ref = project_state(await store.read(parent)).sub_sessions[session_id]
            assert (ref.status, ref.error) == ("failed", "aborted: enough")
        stream = [type(item.chunk).__name__ for item in project_stream(await store.read("a1"))]
        assert stream[-3:] == ["SubAgentEnd", "ToolEnd", "ErrorChunk"]
