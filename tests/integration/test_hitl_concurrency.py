"""Answers that race each other, and an interrupt, through a remote child (specs/hitl.md).

The root runs on an executor in this process; its children are remote, on a
real HTTP server (uvicorn). Races are real concurrency (an anyio task
group), repeated over fresh trees; nothing waits by sleeping. Whatever the
interleaving: every entry is answered exactly once in its owner's log (and
at most once on each ancestor), every session resumes once, the tree
completes, and the root's stream holds every chunk once.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.lowlevel
import httpx
import pytest
from hitl_app import Query, remote_tool, root_agent, worker
from hitl_checks import (
    answers_in,
    assert_answered_once,
    assert_every_chunk_once,
    tree_logs,
    until,
)
from servers import serve

from helix_agents import AgentConfig, AgentExecutor, EventStore, create_sub_agent_tool, define_agent
from helix_agents.errors import AgentServerError
from helix_agents.events import Completed, Interrupted, InterruptRequested, RunStarted
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import SubmitResponse
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.slow

LIMIT = 60
ROUNDS = 4
"""Fresh trees per race: each round may interleave differently."""


@asynccontextmanager
async def remote_children(
    *agents: AgentConfig,
) -> AsyncIterator[tuple[HttpRemoteAgentTransport, EventStore]]:
    """``agents`` served by server B on uvicorn; (a transport to it, its store)."""
    store = MemoryEventStore()
    async with (
        serve(create_http_app(AgentServer(list(agents), store))) as url,
        HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.05, timeout=10) as remote,
    ):
        yield remote, store


def _interrupt_kept(log: list[Any]) -> bool:
    """No run starts after an interrupt was requested before that interrupt took effect."""
    requested = False
    for event in log:
        if isinstance(event, InterruptRequested):
            requested = True
        elif isinstance(event, Interrupted | Completed):
            requested = False
        elif isinstance(event, RunStarted) and requested:
            return False
    return True


def _resumes(log: list[Any]) -> int:
    return sum(1 for event in log if isinstance(event, RunStarted) and event.mode == "resume")


async def _finished(store: EventStore, session_id: str) -> None:
    await until(store, session_id, lambda state: state.is_terminal)


def _two_remote_children(transport: HttpRemoteAgentTransport) -> AgentConfig:
    """A root that delegates to two remote workers at once, then reports both."""
    return define_agent(
        "root2",
        tools=[remote_tool("left", transport), remote_tool("right", transport)],
        llm=ScriptedLLM(
            [
                [
                    ScriptedLLM.call("subagent__left", {"query": "l"}),
                    ScriptedLLM.call("subagent__right", {"query": "r"}),
                ],
                "both answered",
            ]
        ),
    )


async def _answer(executor: AgentExecutor, session_id: str, entry: Any) -> SubmitResponse:
    if entry.kind == "client_tool":
        return await executor.submit_tool_result(session_id, entry.tool_call_id, {"color": "red"})
    return await executor.submit_approval(session_id, entry.tool_call_id, True)


async def _answer_or_refusal(
    executor: AgentExecutor, session_id: str, entry: Any, into: list[Any]
) -> None:
    try:
        into.append(await _answer(executor, session_id, entry))
    except AgentServerError as exc:
        into.append(exc)


async def _interrupt_unless_done(executor: AgentExecutor, session_id: str, turns: int) -> None:
    """Interrupt after ``turns`` scheduler turns (each round of the race lets the answer get
    further first), unless the tree has finished by then."""
    for _ in range(turns):
        await anyio.lowlevel.checkpoint()
    with contextlib.suppress(AgentServerError):  # ALREADY_COMPLETED: the tree won the race
        await executor.service.interrupt(session_id, "stop")


async def _append(into: list[Any], call: Any) -> None:
    into.append(await call())


async def test_two_entries_of_one_remote_owner_answered_at_once() -> None:
    with anyio.fail_after(LIMIT):
        async with remote_children(worker("child", ("ask_user", "rm"))) as (remote, b_store):
            root = root_agent(remote_tool("child", remote))
            for round_ in range(ROUNDS):
                store = MemoryEventStore()
                session_id = f"one-owner-{round_}"
                async with AgentExecutor(store, [root]) as executor:
                    handle = await executor.execute(root, "hi", session_id=session_id)
                    assert (await handle.result()).status == "paused"
                    entries = await handle.pending_inputs()
                    assert sorted(e.kind for e in entries) == ["approval", "client_tool"]
                    responses: list[SubmitResponse] = []
                    async with anyio.create_task_group() as tg:
                        for entry in entries:
                            tg.start_soon(
                                _answer_or_refusal, executor, session_id, entry, responses
                            )
                    assert any(response.resumed for response in responses)
                    await _finished(store, session_id)
                    assert (await handle.result()).status == "completed"
                logs = await tree_logs(session_id, [store, b_store])
                assert_every_chunk_once(logs, session_id)
                assert assert_answered_once(logs) == 2
                assert {sid: _resumes(log) for sid, log in logs.items()} == dict.fromkeys(logs, 1)


async def test_two_remote_children_answered_at_once() -> None:
    with anyio.fail_after(LIMIT):
        async with remote_children(worker("left", ("ask_user",)), worker("right", ("rm",))) as (
            remote,
            b_store,
        ):
            root = _two_remote_children(remote)
            for round_ in range(ROUNDS):
                store = MemoryEventStore()
                session_id = f"two-owners-{round_}"
                async with AgentExecutor(store, [root]) as executor:
                    handle = await executor.execute(root, "hi", session_id=session_id)
                    assert (await handle.result()).status == "paused"
                    entries = await handle.pending_inputs()
                    assert len({e.owner_session_id for e in entries}) == 2
                    async with anyio.create_task_group() as tg:
                        for entry in entries:
                            tg.start_soon(_answer, executor, session_id, entry)
                    await _finished(store, session_id)
                    assert (await handle.result()).output == "both answered"
                logs = await tree_logs(session_id, [store, b_store])
                assert_every_chunk_once(logs, session_id)
                assert assert_answered_once(logs) == 2
                # Each child resumed once; the root resumed once (or twice, if the second
                # child's answer arrived after the root had resumed and paused again).
                for owner in {e.owner_session_id for e in entries}:
                    assert _resumes(logs[owner]) == 1
                assert 1 <= _resumes(logs[session_id]) <= 2


async def test_the_same_answer_twice_at_once_over_http_is_recorded_once() -> None:
    with anyio.fail_after(LIMIT):
        async with remote_children(worker("child", ("ask_user",))) as (remote, b_store):
            a_store = MemoryEventStore()
            root = root_agent(remote_tool("child", remote))
            async with (
                serve(create_http_app(AgentServer([root], a_store))) as a_url,
                httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
            ):
                for round_ in range(ROUNDS):
                    session_id = f"twice-{round_}"
                    body = {"sessionId": session_id, "agentType": "root", "message": "hi"}
                    assert (await browser.post("/start", json=body)).status_code == 200
                    await until(a_store, session_id, lambda state: state.status == "paused")
                    status = (await browser.get("/status", params={"sessionId": session_id})).json()
                    (entry,) = status["pendingInputs"]
                    answer = {
                        "sessionId": session_id,
                        "toolCallId": entry["toolCallId"],
                        "result": {"color": "red"},
                    }
                    replies: list[httpx.Response] = []
                    async with anyio.create_task_group() as tg:
                        for _ in range(2):
                            tg.start_soon(
                                _append,
                                replies,
                                functools.partial(browser.post, "/submit-tool-result", json=answer),
                            )
                    assert [r.status_code for r in replies] == [200, 200], [r.text for r in replies]
                    assert all(r.json()["ok"] for r in replies)
                    assert any(r.json()["resumed"] for r in replies)
                    await _finished(a_store, session_id)
                    logs = await tree_logs(session_id, [a_store, b_store])
                    assert assert_answered_once(logs) == 1
                    # The root recorded the answer it forwarded once too.
                    assert len(answers_in(logs[session_id], entry["toolCallId"])) == 1
                    assert_every_chunk_once(logs, session_id)


@pytest.mark.parametrize("where", ["remote", "local"])
async def test_an_answer_racing_an_interrupt_of_the_root_is_applied_once_or_refused(
    where: str,
) -> None:
    with anyio.fail_after(LIMIT):
        async with remote_children(worker("child", ("ask_user",))) as (remote, b_store):
            if where == "remote":
                root = root_agent(remote_tool("child", remote))
            else:  # no network hop: the answer may resume the root before the interrupt lands
                root = root_agent(create_sub_agent_tool(worker("child", ("ask_user",)), Query))
            for round_ in range(ROUNDS * 3):
                store = MemoryEventStore()
                session_id = f"race-{round_}"
                async with AgentExecutor(store, [root]) as executor:
                    handle = await executor.execute(root, "hi", session_id=session_id)
                    assert (await handle.result()).status == "paused"
                    (entry,) = await handle.pending_inputs()
                    outcome: list[Any] = []
                    async with anyio.create_task_group() as tg:
                        racers = [
                            functools.partial(
                                _answer_or_refusal, executor, session_id, entry, outcome
                            ),
                            functools.partial(
                                _interrupt_unless_done, executor, session_id, 4 * round_
                            ),
                        ]
                        for racer in racers if round_ % 2 else reversed(racers):
                            tg.start_soon(racer)  # either one is sent first
                    await executor.wait_idle(session_id)
                    logs = await tree_logs(session_id, [store, b_store])
                    recorded = answers_in(logs[entry.owner_session_id], entry.tool_call_id)
                    assert len(recorded) <= 1  # never two answers for one entry
                    if isinstance(outcome[0], AgentServerError):
                        assert recorded == []  # refused: nothing applied
                    else:
                        assert len(recorded) == 1
                    assert _interrupt_kept(logs[session_id])
                    # A person resumes the interrupted root (and answers, if it was refused):
                    # the tree completes with the entry answered exactly once.
                    for _ in range(4):
                        await executor.wait_idle(session_id)
                        if (await executor.state(session_id)).is_terminal:
                            break
                        if await executor.pending_inputs(session_id):
                            await _answer(executor, session_id, entry)
                        else:
                            await executor.resume(session_id)
                    await executor.wait_idle(session_id)
                    state = await executor.state(session_id)
                    assert state.status == "completed", (outcome, state.status, state.error)
                logs = await tree_logs(session_id, [store, b_store])
                assert assert_answered_once(logs) == 1
                assert_every_chunk_once(logs, session_id)
