"""A parent in this process delegates to agents served by ``helix-agents serve`` in another.

The server is the real command (``python -m helix_agents.server serve
tests.integration.remote_app:agents``) on a loopback port and a SQLite file;
the parent reaches it only through ``HttpRemoteAgentTransport``. One turn of
the parent calls the slow-streaming ``researcher`` and the ``summarizer``
concurrently; the parent's stream must nest each remote child's chunks
between its ``subagent_start`` and ``subagent_end``, exactly once, as the
remote log holds them. Both tests run against each runtime's ``serve``
(``runtime``): plain, ``--temporal`` (with a ``worker`` process) and
``--dbos sqlite:///...``.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _served_agents import read_sse, served
from pydantic import BaseModel
from remote_app import (
    RESEARCHER_TEXT_DELTAS,
    Query,
    Report,
    Summary,
    Text,
    expected_report,
    expected_summary,
)

from helix_agents import AgentConfig, AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.events import (
    ChildChunkForwarded,
    RemoteRef,
    SessionCreated,
    SubAgentEnd,
    SubAgentStart,
    SubSessionStarted,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import project_state, project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.protocol import ChunkEvent, EndEvent
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

TIMEOUT = 30  # seconds for the whole exchange; generous, the machine is shared
PARENT = "brief-1"
QUERY = "tidal power"
TEXT = "tides turn turbines"
CALLS = {"research_1": "researcher", "summary_1": "summarizer"}
CHILDREN = {call_id: f"{PARENT}-remote-{call_id}" for call_id in CALLS}


class Brief(BaseModel):
    report: Report
    summary: Summary


def _brief(request: LLMRequest) -> ScriptStep:
    """Turn 1: both remote calls at once; turn 2: finish with what they returned."""
    results = {
        message.tool_call_id: json.loads(message.content)
        for message in request.messages
        if isinstance(message, ToolResultMessage)
    }
    if not results:
        return ScriptStep(
            tool_calls=[
                ScriptedLLM.call("subagent__researcher", {"query": QUERY}, id="research_1"),
                ScriptedLLM.call("subagent__summarizer", {"text": TEXT}, id="summary_1"),
            ]
        )
    return ScriptedLLM.finish({"report": results["research_1"], "summary": results["summary_1"]})


def _orchestrator(remote: HttpRemoteAgentTransport) -> AgentConfig:
    return define_agent(
        "orchestrator",
        output_schema=Brief,
        tools=[
            create_remote_sub_agent_tool(
                "researcher",
                description="Research a query (remote).",
                input_schema=Query,
                output_schema=Report,
                transport=remote,
                remote_agent_type="researcher",
            ),
            create_remote_sub_agent_tool(
                "summarizer",
                description="Summarize a text (remote).",
                input_schema=Text,
                output_schema=Summary,
                transport=remote,
                remote_agent_type="summarizer",
            ),
        ],
        llm=ScriptedLLM(_brief),
    )


def _label(chunk: Any) -> str:
    if chunk.agent_id != PARENT:
        return "child chunks"
    labels: dict[type, str] = {
        ToolStart: "tool_start",
        ToolEnd: "tool_end",
        SubAgentStart: "subagent_start",
        SubAgentEnd: "subagent_end",
    }
    return labels[type(chunk)]


def _belongs(chunk: Any, call_id: str) -> bool:
    if chunk.agent_id == CHILDREN[call_id]:
        return True
    return (
        isinstance(chunk, ToolStart | ToolEnd | SubAgentStart | SubAgentEnd)
        and chunk.agent_id == PARENT
        and chunk.tool_call_id == call_id
    )


def _forwarded(log: list[Any], child_id: str) -> list[ChunkEvent]:
    return [
        ChunkEvent(chunk=event.chunk, sequence=event.child_seq)
        for event in log
        if isinstance(event, ChildChunkForwarded) and event.child_session_id == child_id
    ]


async def test_a_parent_delegates_to_two_served_agents_at_once(
    tmp_path: Path, runtime: Runtime
) -> None:
    db = tmp_path / "remote.db"
    store = MemoryEventStore()
    async with served(db, tmp_path / "server.log", runtime) as server:
        with anyio.fail_after(TIMEOUT):
            async with HttpRemoteAgentTransport(server.url, retry_base_delay=0.05) as remote:
                parent = _orchestrator(remote)
                async with AgentExecutor(store, [parent]) as executor:
                    handle = await executor.execute(parent, "Brief me", session_id=PARENT)
                    live = [item async for item in handle.stream()]
                    result = await handle.result()
            parent_log = await store.read(PARENT)
            async with httpx.AsyncClient(timeout=10) as client:
                served_streams = {
                    call_id: await read_sse(client, server.url, child_id)
                    for call_id, child_id in CHILDREN.items()
                }
                statuses = {
                    call_id: (
                        await client.get(f"{server.url}/status", params={"sessionId": child_id})
                    ).json()
                    for call_id, child_id in CHILDREN.items()
                }
            exit_status = await server.terminate()  # SIGTERM, as a service manager stops it
        output = server.output()
    await store.close()
    async with SqliteEventStore(db) as remote_store:
        remote_ids = await remote_store.list_sessions()
        remote_logs = {
            call_id: await remote_store.read(child_id) for call_id, child_id in CHILDREN.items()
        }

    # The parent completed with what the two remote agents returned.
    expected = {"report": expected_report(QUERY), "summary": expected_summary(TEXT)}
    assert (result.status, result.error) == ("completed", None), output
    assert result.output.model_dump() == expected  # a Brief, validated at the parent
    # uvicorn re-raises SIGTERM once it has shut down; the lifespan ran to its end.
    assert exit_status in (0, -signal.SIGTERM), output
    assert "Application shutdown complete" in output

    # Its stream, read live, is its log's stream; every chunk is the parent's or a child's.
    stream = project_stream(parent_log)
    assert live == stream
    assert {item.chunk.agent_id for item in stream} == {PARENT, *CHILDREN.values()}

    # Per call: tool_start, subagent_start, the child's chunks, subagent_end, tool_end.
    for call_id in CALLS:
        shape = [_label(item.chunk) for item in stream if _belongs(item.chunk, call_id)]
        folded = [label for i, label in enumerate(shape) if i == 0 or label != shape[i - 1]]
        assert folded == [
            "tool_start",
            "subagent_start",
            "child chunks",
            "subagent_end",
            "tool_end",
        ], (call_id, shape)

    # The two calls ran concurrently: the quick summarizer ended while the researcher streamed.
    parent_labels = [
        (_label(item.chunk), item.chunk.tool_call_id)
        for item in stream
        if item.chunk.agent_id == PARENT and isinstance(item.chunk, SubAgentStart | SubAgentEnd)
    ]
    assert parent_labels.index(("subagent_start", "research_1")) < parent_labels.index(
        ("subagent_end", "summary_1")
    )
    assert parent_labels.index(("subagent_end", "summary_1")) < parent_labels.index(
        ("subagent_end", "research_1")
    )

    for call_id, agent_type in CALLS.items():
        child_id = CHILDREN[call_id]
        where = f"{call_id} ({child_id})"
        forwarded = _forwarded(parent_log, child_id)
        served_stream = served_streams[call_id]
        remote_log = remote_logs[call_id]
        child_output = expected["report" if agent_type == "researcher" else "summary"]

        # Every remote chunk exactly once, in order: GET /sse from 0 is the remote log's stream.
        assert forwarded == served_stream[:-1], where
        # A remote child starts with its state seeded from the parsed input, as a
        # local one does (specs/runtime.md): no state_schema, so the whole input.
        sent = next(
            e.input
            for e in parent_log
            if isinstance(e, SubSessionStarted) and e.sub_session_id == child_id
        )
        assert served_stream[-1] == EndEvent(output=child_output, state=sent), where
        assert [
            ChunkEvent(chunk=item.chunk, sequence=item.sequence)
            for item in project_stream(remote_log)
        ] == forwarded, where
        assert all(event.chunk.agent_id == child_id for event in forwarded), where

        # The remote session knows its parent and root; the parent knows where it ran.
        created = remote_log[0]
        assert isinstance(created, SessionCreated), where
        assert (
            created.agent_type,
            created.parent_session_id,
            created.root_session_id,
            created.parent_tool_call_id,
        ) == (agent_type, PARENT, PARENT, call_id), where
        state = project_state(remote_log)
        assert (state.status, state.output, state.parent_session_id, state.root_session_id) == (
            "completed",
            child_output,
            PARENT,
            PARENT,
        ), where
        status = statuses[call_id]
        assert (status["status"], status["output"], status["latestSequence"]) == (
            "completed",
            child_output,
            remote_log[-1].seq,
        ), where
        started = next(
            event
            for event in parent_log
            if isinstance(event, SubSessionStarted) and event.sub_session_id == child_id
        )
        assert started.remote == RemoteRef(
            transport="HttpRemoteAgentTransport", remote_agent_type=agent_type, url=server.url
        ), where

    assert remote_ids == sorted(CHILDREN.values())

    # The researcher streamed its text as it went: the parent forwarded its first delta
    # before the remote agent had written its last one.
    research = _forwarded(parent_log, CHILDREN["research_1"])
    deltas = [event for event in research if isinstance(event.chunk, TextDelta)]
    assert len(deltas) == RESEARCHER_TEXT_DELTAS >= 20
    first_forwarded = next(
        event
        for event in parent_log
        if isinstance(event, ChildChunkForwarded)
        and event.child_session_id == CHILDREN["research_1"]
        and isinstance(event.chunk, TextDelta)
    )
    assert first_forwarded.ts < deltas[-1].chunk.ts


async def test_sigterm_closes_the_servers_store(tmp_path: Path, runtime: Runtime) -> None:
    """``serve`` stopped by SIGTERM (how a service manager stops it) must close its store.

    specs/cli.md: "Stores are closed on every path". SQLite removes the ``-wal``
    file when its last connection closes, so a WAL file left behind means the
    store was never closed (SIGINT, by contrast, leaves none).
    """
    db = tmp_path / "remote.db"
    wal = db.with_name(db.name + "-wal")
    async with served(db, tmp_path / "server.log", runtime) as server:
        with anyio.fail_after(TIMEOUT):
            async with httpx.AsyncClient(timeout=10) as client:
                body = {"sessionId": "s-1", "agentType": "summarizer", "message": "a b"}
                response = await client.post(f"{server.url}/start", json=body)
                assert response.status_code == 200, response.text
                events = await read_sse(client, server.url, "s-1")
            assert events[-1] == EndEvent(output=expected_summary("a b"), state={})
            assert wal.exists()  # the server's connections are open
            await server.stop_worker()  # serve --temporal's worker shares the file
            await server.terminate()
        output = server.output()
    assert "Application shutdown complete" in output
    assert not wal.exists(), f"SIGTERM left {wal.name} behind: the store was not closed\n{output}"
