"""SIGKILL the process running a parent with companions: every outcome still arrives once.

``helix-agents serve tests.integration.companion_app:agents`` (SQLite file)
runs ``lead``, which spawns a blocking and a non-blocking companion in one
step. As soon as the lead's stream shows the blocking child started, the
server is SIGKILLed mid-turn (parent and children die together) and started
again on the same port and file; recovery resumes the lead and both children.
The lead's re-run spawn reaches the same child (no second session, no second
start), the blocking outcome is pulled once, the background one is pushed
once at the lead's next turn, and further turns deliver nothing again.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from _served_agents import ServedAgents
from companion_kit import deliveries, notices, tool_results

from helix_agents.events import RunStarted, SessionCreated, TextDelta
from helix_agents.log import project_state
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteMessageRequest, RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.slow

TIMEOUT = 90  # seconds for the whole scenario; generous, nothing else is timed
LEAD = "kill-lead"


async def _until_end(remote: HttpRemoteAgentTransport, session_id: str) -> None:
    async for event in remote.stream(session_id, 0):
        if isinstance(event, EndEvent):
            return


async def test_a_killed_parent_delivers_every_companion_outcome_once(tmp_path: Path) -> None:
    db = tmp_path / "lead.db"
    server = ServedAgents(
        db,
        tmp_path / "server.log",
        target="tests.integration.companion_app:agents",
        agents=["lead"],
    )
    try:
        with anyio.fail_after(TIMEOUT):
            await server.start()
            async with HttpRemoteAgentTransport(
                server.url, max_retries=2, retry_base_delay=0.05, timeout=10
            ) as remote:
                await remote.start(
                    RemoteStartRequest(session_id=LEAD, agent_type="lead", message="go")
                )
                slow_id = f"{LEAD}-agent-slow"
                async for event in remote.stream(LEAD, 0):
                    # The blocking child's first word, forwarded: it is mid-turn.
                    chunk = event.chunk if isinstance(event, ChunkEvent) else None
                    if isinstance(chunk, TextDelta) and chunk.agent_id == slow_id:
                        break
                await server.kill()  # the children are mid-turn (their model takes 2 s)
                await server.start()  # same port, same file: recovery resumes all three
                await _until_end(remote, LEAD)
                await _until_end(remote, f"{LEAD}-agent-bg")
                for n, text in enumerate(("anything?", "and now?")):
                    await remote.send_message(
                        RemoteMessageRequest(session_id=LEAD, message=text, message_id=f"m{n}")
                    )
                    await _until_end(remote, LEAD)
            await server.terminate()
    finally:
        with anyio.CancelScope(shield=True):
            await server.terminate()
    context = f"server output:\n{server.output()}"
    async with SqliteEventStore(db) as store:
        lead = await store.read(LEAD)
        slow = await store.read(f"{LEAD}-agent-slow")
        bg = await store.read(f"{LEAD}-agent-bg")
    assert project_state(lead).status == "completed", context
    results = tool_results(lead)
    spawned = [r for r in results.values() if isinstance(r, dict)]
    assert {r["name"] for r in spawned} == {"slow", "bg"}, context
    assert len(spawned) == 2, context
    slow_result = next(r for r in spawned if r["name"] == "slow")
    assert slow_result["output"] == {"text": "answered s"}, context
    assert deliveries(lead) == {
        f"{LEAD}-agent-slow": ["pull"],
        f"{LEAD}-agent-bg": ["push"],
    }, context
    assert notices(lead) == ['Sub-agent \'bg\' completed with result: {"text":"answered b"}'], (
        context
    )
    for child in (slow, bg):
        assert sum(isinstance(e, SessionCreated) for e in child) == 1, context
    # Killed mid-turn: resumed by the restarted server, never started again.
    assert [e.mode for e in slow if isinstance(e, RunStarted)] == ["start", "resume"], context
    first, *then = [e.mode for e in bg if isinstance(e, RunStarted)]
    assert first == "start", context
    assert set(then) <= {"resume"}, context
