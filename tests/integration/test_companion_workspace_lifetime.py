"""A persistent agent's ``workspace_lifetime`` (seed 004's ``workspaceLifetime``).

See specs/companions.md.

``"per-invocation"`` (the default): a companion's workspaces open for each of
its runs and close after it; a memory workspace forgets its files between
``sendMessage`` turns. ``"persistent"``: they open at the first run and stay
open across turns until the companion is terminated (or the executor
closes), so the second turn reads what the first wrote.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from companion_kit import Report, call, finish, parent, tool_results

from helix_agents import AgentExecutor, PersistentAgent, define_agent
from helix_agents.errors import UsageError
from helix_agents.messages import ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.stores import MemoryEventStore
from helix_agents.workspaces import Workspace
from helix_agents.workspaces.memory import MemoryWorkspaceProvider

pytestmark = pytest.mark.anyio

LIMIT = 30
SPAWN = "companion__spawnAgent"
SEND = "companion__sendMessage"
TERMINATE = "companion__terminateChild"


class CountingProvider(MemoryWorkspaceProvider):
    """A memory provider that counts opens and closes."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = 0
        self.closed = 0

    async def open(self, ref: Any) -> None:
        self.opened += 1
        await super().open(ref)

    async def close(self, ref: Any) -> None:
        self.closed += 1
        await super().close(ref)


def _scribe(request: LLMRequest) -> Any:
    """Turn 1 writes notes.md; turn 2 reads it back and reports what it read."""
    users = [i for i, m in enumerate(request.messages) if isinstance(m, UserMessage)]
    since = request.messages[users[-1] :]
    results = [m for m in since if isinstance(m, ToolResultMessage)]
    if len(users) == 1:
        if not results:
            return call("workspace_write", {"path": "notes.md", "content": "remember me"})
        return finish({"text": "written"})
    if not results:
        return call("workspace_read", {"path": "notes.md"})
    return finish({"text": results[-1].content})


def _lead(lifetime: str) -> Any:
    scribe = define_agent(
        "scribe",
        output_schema=Report,
        workspaces=[Workspace("notes", "memory")],
        llm=ScriptedLLM(_scribe),
    )
    script = [
        call(SPAWN, {"agent": "scribe", "name": "s", "initialMessage": "write"}),
        call(SEND, {"name": "s", "message": "read"}),
        call("companion__waitForResult", {"name": "s"}),
        call(TERMINATE, {"name": "s"}),
        "done",
    ]
    entry = PersistentAgent(scribe, mode="blocking", workspace_lifetime=lifetime)  # type: ignore[arg-type]
    return parent(script, [entry])


async def _run(lifetime: str) -> tuple[list[Any], tuple[int, int, int]]:
    provider = CountingProvider()
    store = MemoryEventStore()
    lead = _lead(lifetime)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(
            store, [lead], workspace_providers={"memory": provider}
        ) as executor:
            result = await (await executor.execute(lead, "go", session_id="wl")).result()
            assert result.status == "completed", result.error
            opened_before_exit = provider.opened
            closed_before_exit = provider.closed
    results = list(tool_results(await store.read("wl")).values())
    return results, (opened_before_exit, closed_before_exit, provider.closed)


async def test_a_persistent_lifetime_keeps_the_workspace_across_turns_until_terminated() -> None:
    results, (opened, closed, closed_at_exit) = await _run("persistent")
    waited = results[2]
    assert "remember me" in waited["result"]["text"], waited
    # Opened once, never closed between the turns; the companion ended its
    # turn (completed, still re-consultable: terminate has nothing to stop),
    # so its workspaces close when the executor closes.
    assert (opened, closed, closed_at_exit) == (1, 0, 1)


async def test_per_invocation_reopens_the_workspace_for_each_turn() -> None:
    results, (opened, closed, closed_at_exit) = await _run("per-invocation")
    waited = results[2]
    assert "remember me" not in waited["result"]["text"], waited
    assert (opened, closed, closed_at_exit) == (2, 2, 2)


def test_a_bad_or_ineffective_lifetime_is_refused() -> None:
    scribe = define_agent("scribe", output_schema=Report, workspaces=[Workspace("notes", "memory")])
    with pytest.raises(UsageError, match="workspace_lifetime"):
        define_agent(
            "lead",
            persistent_agents=[PersistentAgent(scribe, workspace_lifetime="forever")],  # type: ignore[arg-type]
        )
    bare = define_agent("bare", output_schema=Report)
    with pytest.raises(UsageError, match="workspace_lifetime"):
        define_agent(
            "lead", persistent_agents=[PersistentAgent(bare, workspace_lifetime="persistent")]
        )


async def test_terminating_a_live_companion_ends_the_hold() -> None:
    hold = anyio.Event()  # never set: the companion stays live until terminated

    async def keeper_script(request: LLMRequest) -> Any:
        await hold.wait()
        return finish({"text": "never"})

    keeper = define_agent(
        "keeper",
        output_schema=Report,
        workspaces=[Workspace("notes", "memory")],
        llm=ScriptedLLM(keeper_script),
    )
    entry = PersistentAgent(keeper, mode="non-blocking", workspace_lifetime="persistent")
    lead = parent(
        [
            call(SPAWN, {"agent": "keeper", "name": "k", "initialMessage": "hold"}),
            call(TERMINATE, {"name": "k"}),
            "done",
        ],
        [entry],
    )
    provider = CountingProvider()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(
            MemoryEventStore(), [lead], workspace_providers={"memory": provider}
        ) as executor:
            result = await (await executor.execute(lead, "go", session_id="tk")).result()
            assert result.status == "completed", result.error
            await executor.wait_idle("tk-agent-k")  # the companion's run has ended
            counts = (provider.opened, provider.closed)
    assert counts == (1, 1)  # closed at the terminate, not at the executor's exit
