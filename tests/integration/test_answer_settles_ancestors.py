"""Every answer leaves every ancestor on its path running or finished (specs/hitl.md).

The answer may be the first, an identical repeat, or arrive after the owner
has already resumed (it was answered at the owner's own session first): an
ancestor that then has nothing pending resumes, instead of staying paused
with an empty list. Three trees: a local child in one executor, a remote
child on uvicorn, and (``test_answer_settles_ancestors_crash.py``) a root on
a real ``helix-agents serve`` killed between forward and record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from hitl_app import Query, remote_tool, root_agent, worker
from hitl_checks import until
from servers import serve

from helix_agents import AgentConfig, AgentExecutor, create_sub_agent_tool
from helix_agents.log.store import EventStore
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.anyio

LIMIT = 30
ROOT = "s1"
LOCAL_CHILD = f"{ROOT}-sub-call_0_0"
REMOTE_CHILD = f"{ROOT}-remote-call_0_0"


async def _terminal(store: EventStore, session_id: str) -> None:
    await until(store, session_id, lambda state: state.is_terminal)


async def _paused(store: EventStore, session_id: str) -> None:
    await until(store, session_id, lambda state: state.status == "paused")


def _local_root() -> AgentConfig:
    return root_agent(create_sub_agent_tool(worker("child", ("rm",)), Query))


async def test_a_local_childs_answer_at_the_child_then_at_the_root_resumes_the_root() -> None:
    store = MemoryEventStore()
    root = _local_root()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [root]) as executor:
            handle = await executor.execute(root, "hi", session_id=ROOT)
            assert (await handle.result()).status == "paused"
            (entry,) = (await executor.service.get_status(ROOT)).pending_inputs
            assert entry.owner_session_id == LOCAL_CHILD
            # The owner's own session first ("any session on the path works").
            first = await executor.submit_approval(LOCAL_CHILD, entry.tool_call_id, True)
            assert first.resumed
            await _terminal(store, LOCAL_CHILD)
            # The same answer at the root: the root has nothing left to wait for.
            again = await executor.submit_approval(ROOT, entry.tool_call_id, True)
            assert again.ok
            await _terminal(store, ROOT)
            status = await executor.service.get_status(ROOT)
    assert status.status == "completed", status
    assert status.pending_inputs == []


async def test_an_identical_repeat_at_the_root_leaves_it_running_or_finished() -> None:
    store = MemoryEventStore()
    root = _local_root()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [root]) as executor:
            handle = await executor.execute(root, "hi", session_id=ROOT)
            assert (await handle.result()).status == "paused"
            (entry,) = (await executor.service.get_status(ROOT)).pending_inputs
            assert (await executor.submit_approval(ROOT, entry.tool_call_id, True)).resumed
            await _terminal(store, ROOT)
            repeat = await executor.submit_approval(ROOT, entry.tool_call_id, True)
            status = await executor.service.get_status(ROOT)
    assert repeat.ok
    assert not repeat.resumed
    assert status.status == "completed"


@asynccontextmanager
async def _server_b() -> AsyncIterator[tuple[HttpRemoteAgentTransport, EventStore]]:
    store = MemoryEventStore()
    app = create_http_app(AgentServer([worker("child", ("rm",))], store))
    async with (
        serve(app) as url,
        HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.05, timeout=10) as http,
    ):
        yield http, store


async def test_a_remote_childs_answer_at_the_child_then_at_the_root_resumes_the_root() -> None:
    with anyio.fail_after(LIMIT):
        async with _server_b() as (transport, remote_store):
            root = root_agent(remote_tool("child", transport))
            store = MemoryEventStore()
            async with AgentExecutor(store, [root]) as executor:
                handle = await executor.execute(root, "hi", session_id=ROOT)
                assert (await handle.result()).status == "paused"
                (entry,) = (await executor.service.get_status(ROOT)).pending_inputs
                assert entry.owner_session_id == REMOTE_CHILD
                # At the child's own server: the child resumes and completes there.
                first = await transport.submit_approval(REMOTE_CHILD, entry.tool_call_id, True)
                assert first.resumed
                await _terminal(remote_store, REMOTE_CHILD)
                # The root only learns of it from the client's answer at the root.
                await _paused(store, ROOT)
                again = await executor.submit_approval(ROOT, entry.tool_call_id, True)
                assert again.ok
                await _terminal(store, ROOT)
                status = await executor.service.get_status(ROOT)
    assert status.status == "completed", status
    assert (
        status.output
        == 'root got: subagent__child={"answer":"rm={\\"removed\\":\\"/tmp/scratch\\"}"}'
    )
