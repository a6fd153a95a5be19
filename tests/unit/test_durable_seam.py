"""The durable seam's engine-neutral parts: the provider check, a plan's expiry, the hub's holds.

Engine-free: ``test_durable_workspaces.py`` (and the engines' kill tests,
``test_temporal_workspaces.py``, ``test_dbos_workspaces.py``) run them on real Temporal and DBOS.
"""

from __future__ import annotations

import time

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.agents.define import AgentRegistry
from helix_agents.engines.durable.reading import plan_of, refuse_unsupported
from helix_agents.errors import UsageError
from helix_agents.events import RunStarted, SessionCreated, Suspended
from helix_agents.log import project_state
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.runtime.writer import SessionWriter
from helix_agents.stores import MemoryEventStore
from helix_agents.workspaces import LocalWorkspaceProvider, MemoryWorkspaceProvider, Workspace
from helix_agents.workspaces.base import shares_files
from helix_agents.workspaces.hub import WorkspaceHub

EXPIRES_IN = 30.0


class Choice(BaseModel):
    """What ``pick`` picks."""

    label: str


pick = define_tool("pick", "Pick.", Choice, "client", expires_in=EXPIRES_IN)
late = define_agent(
    "late",
    tools=[pick],
    llm=ScriptedLLM([[ScriptedLLM.call("pick", {"label": "?"}, id="p1")], "ok"]),
)


class _Bucket(MemoryWorkspaceProvider):
    """A provider of the user's that says its files outlive the process."""

    durable = True


def _registry() -> AgentRegistry:
    llm = ScriptedLLM(["hi"])
    return AgentRegistry([define_agent("ws", llm=llm, workspaces=[Workspace("files", "cloud")])])


def test_a_provider_must_reach_its_files_from_every_worker() -> None:
    """``durable = True`` (local, or a provider of the user's) passes; memory is refused with
    the agent, the workspace and the provider named; a missing provider is the soft wiring."""
    assert shares_files(LocalWorkspaceProvider("/tmp/unused-root"))
    assert not shares_files(MemoryWorkspaceProvider())
    assert not shares_files(object())
    assert refuse_unsupported(_registry(), {"cloud": _Bucket()}) == set()
    assert refuse_unsupported(_registry(), {}) == set()
    with pytest.raises(UsageError, match=r"'ws' declares workspace 'files' of kind 'cloud'"):
        refuse_unsupported(_registry(), {"cloud": MemoryWorkspaceProvider()})


async def test_a_paused_roots_plan_carries_its_earliest_expiry() -> None:
    """The plan of a paused root says when its open entry expires; once answered, nothing."""
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, [late]) as executor:
            began = time.time()
            await executor.service.start(
                RemoteStartRequest(session_id="p", agent_type="late", message="go")
            )
            async for event in store.tail("p", 0):
                if isinstance(event, Suspended):
                    break
            plan = plan_of(late, project_state(await store.read("p")))
            assert plan.next == "pause"
            assert plan.status == "paused"
            assert plan.expires_at is not None
            assert began + EXPIRES_IN <= plan.expires_at <= time.time() + EXPIRES_IN
            await executor.service.submit_tool_result("p", "p1", result={"label": "a"})
    assert plan_of(late, project_state(await store.read("p"))).expires_at is None


async def test_overlapping_steps_keep_the_session_active_until_the_last_ends() -> None:
    """Two steps of one session open its workspaces at once (a round's calls): the session
    stays the owner's user (an inheriting child may start) until the last one closes."""
    agent = define_agent("ws", llm=ScriptedLLM(["hi"]), workspaces=[Workspace("files", "cloud")])
    store = MemoryEventStore()
    now = time.time()
    created = SessionCreated(session_id="s", seq=1, ts=now, agent_type="ws", run_id="r")
    await store.append("s", [created, RunStarted(session_id="s", seq=2, ts=now, run_id="r")], 0)
    hub = WorkspaceHub({"cloud": _Bucket()}, AgentRegistry([agent]), store)
    writer = SessionWriter(store, await store.read("s"))
    async with hub.session(agent, writer):
        async with hub.session(agent, writer) as equipped:
            assert "workspace_write" in {tool.name for tool in equipped.tools}
        assert hub.owner_of("s") == "s"  # the other step still runs
    assert hub.owner_of("s") is None
