"""SIGKILL the served process mid-stream: the parent reconnects and misses nothing.

A parent in this process delegates to the slow-streaming ``researcher`` of a
``helix-agents serve`` subprocess (SQLite file). Once the parent has forwarded
a random number of the remote chunks, the server is SIGKILLed and started
again on the same port and file; on entering, its ``AgentServer`` resumes the
session the dead process left running. The parent's remote sub-agent tool
reconnects from the last child seq it holds (its stream retries with backoff)
and completes: the child seqs it forwarded are exactly the child's stream,
strictly increasing, without a gap or a duplicate.

The kill point is random; the seed is printed and in every failure message,
and ``HELIX_KILL_SEED=<seed>`` replays the same choice.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import re
from pathlib import Path

import anyio
import pytest
from _served_agents import ServedAgents
from remote_app import RESEARCHER_TEXT_DELTAS, Query, Report, expected_report

from helix_agents import AgentExecutor, EventStore, create_remote_sub_agent_tool, define_agent
from helix_agents._aio import closing_iter
from helix_agents.events import (
    ChildChunkForwarded,
    RunStarted,
    SubAgentEnd,
    SubAgentStart,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.slow

TIMEOUT = 60  # seconds for the whole scenario; generous, nothing else is timed
SEED = int(os.environ.get("HELIX_KILL_SEED") or random.SystemRandom().randrange(2**32))
PARENT = "crash-1"
CALL_ID = "research_1"
CHILD = f"{PARENT}-remote-{CALL_ID}"
QUERY = "ocean currents"


def _script(request: LLMRequest) -> ScriptItem:
    """Call the remote researcher, then finish with its report."""
    for message in request.messages:
        if isinstance(message, ToolResultMessage):
            return ScriptedLLM.finish(json.loads(message.content))
    return ScriptedLLM.call("subagent__researcher", {"query": QUERY}, id=CALL_ID)


async def _forwarded_at_least(store: EventStore, count: int) -> None:
    """Return once the parent's log holds ``count`` forwarded child chunks."""
    seen = 0
    async with closing_iter(store.tail(PARENT, 0)) as events:
        async for event in events:
            if isinstance(event, ChildChunkForwarded):
                seen += 1
                if seen >= count:
                    return


async def test_the_parent_gets_the_whole_child_stream_across_a_server_crash(
    tmp_path: Path,
) -> None:
    rng = random.Random(SEED)
    # The researcher streams RESEARCHER_TEXT_DELTAS deltas and four tool chunks; killing
    # within the first two thirds leaves its session running when the server dies.
    kill_after = rng.randint(1, RESEARCHER_TEXT_DELTAS * 2 // 3)
    context = f"seed {SEED} (HELIX_KILL_SEED={SEED}): kill after {kill_after} forwarded chunks"
    print(context)

    db = tmp_path / "remote.db"
    server = ServedAgents(db, tmp_path / "server.log")
    store = MemoryEventStore()
    try:
        with anyio.fail_after(TIMEOUT):
            await server.start()
            # The transport's own retries stay short; the tool's stream retries
            # (0.2 s, 0.4 s, 0.8 s, ...) span the restart.
            async with HttpRemoteAgentTransport(
                server.url, max_retries=1, retry_base_delay=0.05, timeout=10
            ) as remote:
                parent = define_agent(
                    "orchestrator",
                    output_schema=Report,
                    tools=[
                        create_remote_sub_agent_tool(
                            "researcher",
                            description="Research a query (remote).",
                            input_schema=Query,
                            output_schema=Report,
                            transport=remote,
                            remote_agent_type="researcher",
                            stream_retries=10,
                            stream_retry_base=0.2,
                        )
                    ],
                    llm=ScriptedLLM(_script),
                )
                async with AgentExecutor(store, [parent]) as executor:
                    handle = await executor.execute(parent, "Research", session_id=PARENT)
                    await _forwarded_at_least(store, kill_after)
                    await server.kill()
                    await server.start()  # same port, same file: it recovers the child
                    result = await handle.result()
            await server.terminate()
    finally:
        with anyio.CancelScope(shield=True):
            await server.terminate()
        output = server.output()
    parent_log = await store.read(PARENT)
    await store.close()
    async with SqliteEventStore(db) as remote_store:
        child_log = await remote_store.read(CHILD)
    context += f"\nserver output:\n{output}"

    assert (result.status, result.error) == ("completed", None), context
    assert result.output.model_dump() == expected_report(QUERY), context

    # The dead process left the child running; the restarted server resumed it.
    runs = [event for event in child_log if isinstance(event, RunStarted)]
    assert [run.mode for run in runs] == ["start", "resume"], context

    # Exactly the child's stream, once each, in order.
    child_stream = project_stream(child_log)
    forwarded = [
        event
        for event in parent_log
        if isinstance(event, ChildChunkForwarded) and event.child_session_id == CHILD
    ]
    seqs = [event.child_seq for event in forwarded]
    assert all(a < b for a, b in itertools.pairwise(seqs)), (context, seqs)
    assert seqs == [item.sequence for item in child_stream], context
    assert [event.chunk for event in forwarded] == [item.chunk for item in child_stream], context
    assert len(forwarded) >= kill_after, context

    # Every stream the restarted server served the parent began at a child seq the parent
    # held, at or past the chunk after which the server was killed.
    restarted = output[output.index("--- start 2") :]
    cursors = [int(found) for found in re.findall(r"GET /sse\?\S*fromSequence=(\d+)", restarted)]
    assert cursors, context
    assert all(cursor in seqs and cursor >= seqs[kill_after - 1] for cursor in cursors), (
        context,
        cursors,
    )

    # One unbroken segment on the parent's stream.
    labels: list[str] = []
    for item in project_stream(parent_log):
        chunk = item.chunk
        if chunk.agent_id == CHILD:
            label = "child chunks"
        elif (
            isinstance(chunk, ToolStart | ToolEnd | SubAgentStart | SubAgentEnd)
            and chunk.tool_call_id == CALL_ID
        ):
            label = str(chunk.__struct_config__.tag)
        else:
            continue
        if not labels or labels[-1] != label:
            labels.append(label)
    assert labels == [
        "tool_start",
        "subagent_start",
        "child chunks",
        "subagent_end",
        "tool_end",
    ], (context, labels)
