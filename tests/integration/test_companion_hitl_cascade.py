"""A non-blocking companion that waits for a person cascades to the root (specs/companions.md).

Seed 004 (HITL cascade: "consumers never need to know about sub-agent
sessions"): the companion's pending input appears in the root's
``pendingInputs`` and is answered at the root, like any child's: with the
child in the parent's executor, behind HTTP (uvicorn) and behind NATS.
"""

from __future__ import annotations

from dataclasses import replace

import anyio
import pytest
from companion_hosts import KINDS, Children, children_of
from companion_kit import Report, call, finish, parent
from hitl_app import ask_user, rm
from hitl_checks import until

from helix_agents import AgentConfig, AgentExecutor, define_agent
from helix_agents.log import project_state
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.anyio

LIMIT = 30
SPAWN = "companion__spawnAgent"
WAIT = "companion__waitForResult"
CHILD = "nb-agent-w"


def _cleaner() -> AgentConfig:
    return define_agent(
        "cleaner",
        output_schema=Report,
        tools=[rm],
        llm=ScriptedLLM([[call("rm", {"question": "/tmp/x"})], finish({"text": "cleaned"})]),
    )


def _lead(kids: Children, worker: AgentConfig) -> AgentConfig:
    script = [
        call(SPAWN, {"agent": "cleaner", "name": "w", "initialMessage": "clean"}),
        call(WAIT, {"name": "w"}),  # returns once the child pauses for a person
        call("ask_user", {"question": "colour?"}),  # the root waits for a person too
        call(WAIT, {"name": "w"}),
        "all done",
    ]
    lead = parent(script, [kids.entry(worker, "non-blocking")])
    return replace(lead, tools=(*lead.tools, ask_user))


@pytest.mark.parametrize("kind", KINDS)
async def test_a_non_blocking_childs_approval_is_listed_and_answered_at_the_root(
    kind: str, request: pytest.FixtureRequest
) -> None:
    store = MemoryEventStore()
    worker = _cleaner()
    with anyio.fail_after(LIMIT):
        async with (
            children_of(kind, store, [worker], request) as kids,
            AgentExecutor(store, [lead := _lead(kids, worker)]) as executor,
        ):
            handle = await executor.execute(lead, "go", session_id="nb")
            assert (await handle.result()).status == "paused"
            status = await executor.service.get_status("nb")
            owners = {e.tool_name: e.owner_session_id for e in status.pending_inputs}
            assert owners == {"ask_user": "nb", "rm": CHILD}
            rm_entry = next(e for e in status.pending_inputs if e.tool_name == "rm")
            assert rm_entry.path == ["nb", CHILD]
            # Answered at the root: routed to the companion, which goes on.
            answered = await executor.submit_approval("nb", rm_entry.tool_call_id, True)
            assert answered.ok
            await until(kids.store, CHILD, lambda state: state.is_terminal)
            left = (await executor.service.get_status("nb")).pending_inputs
            assert [e.tool_name for e in left] == ["ask_user"]
            ask = left[0]
            assert (
                await executor.submit_tool_result("nb", ask.tool_call_id, {"color": "red"})
            ).resumed
            await until(store, "nb", lambda state: state.is_terminal)
            child = project_state(await kids.log(CHILD))
    assert child.output == {"text": "cleaned"}
    assert project_state(await store.read("nb")).output == "all done"
