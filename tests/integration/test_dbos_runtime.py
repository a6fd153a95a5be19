"""Agents run as DBOS workflows (SQLite system database), against the built-in runtime."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from helix_agents import AgentExecutor
from helix_agents.dbos import DbosOptions, DbosWorker
from helix_agents.log import project_state
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import comparable, seqs_contiguous, stream_to_end
from tests.integration.temporal_app import agents

pytestmark = [pytest.mark.slow]


def options_in(tmp_path: Path, **knobs: object) -> DbosOptions:
    """Options with a system database of the test's own."""
    return DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}", **knobs)  # type: ignore[arg-type]


async def _builtin_store(agent_type: str, session_id: str) -> MemoryEventStore:
    store = MemoryEventStore()
    async with AgentExecutor(store, list(agents.values())) as executor:
        await executor.service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        async for _ in executor.service.stream(session_id):
            pass
    return store


async def test_tools_and_local_child_write_the_builtin_runtimes_log(tmp_path: Path) -> None:
    """The same agent on DBOS and on the built-in runtime leaves the same logs."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with DbosWorker(agents.values(), store, options_in(tmp_path)) as worker:
            service = worker.executor.service
            await service.start(RemoteStartRequest(session_id="s1", agent_type="boss", message="go"))
            output = await stream_to_end(service, "s1")  # type: ignore[arg-type]
        builtin = await _builtin_store("boss", "s1")
    assert output == "one plus two is three and the helper said six"
    for session_id in ("s1", "s1-sub-h1"):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert comparable(log) == comparable(await builtin.read(session_id))
    assert project_state(await store.read("s1-sub-h1")).output == {"value": 6}
