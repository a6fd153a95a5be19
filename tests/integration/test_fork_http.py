"""A fork of a three-level tree over HTTP (specs/branches.md): ``POST /fork`` on real servers.

Gateway A (uvicorn, 127.0.0.1), on each runtime (built-in, Temporal, DBOS),
serves ``root`` -> local ``child`` -> remote ``grand`` on server B (uvicorn,
built-in, its own store), which passes an approval gate. The tree pauses; a
person approves; it completes. Then ``POST /fork`` at the root's pause, with
the approval decided the other way: the open child is forked on A, the
remote grandchild on B (through the transport's own ``POST /fork``), and the
branch runs on from the decision. Nothing recorded is called again, the
origin's logs on both servers are byte-for-byte as they were, and both
stores pass ``check``.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from hitl_app import RM_ARGS, Query, relay, remote_tool, removed, root_agent, worker
from hitl_checks import until
from servers import serve

from helix_agents import create_sub_agent_tool, define_agent, define_tool
from helix_agents.events import ReplaceToolResult, SessionForked, ToolStart
from helix_agents.log import encode_event, project_state
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.stores.check import check_store
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import Runtime

pytestmark = [pytest.mark.slow, pytest.mark.anyio]

LIMIT = 30


async def _all_bytes(store: MemoryEventStore) -> dict[str, list[bytes]]:
    return {s: [encode_event(e) for e in await store.read(s)] for s in await store.list_sessions()}


async def test_post_fork_of_a_three_level_tree_with_a_remote_child_over_http(
    runtime: Runtime,
) -> None:
    removed.clear()
    store_a, store_b = MemoryEventStore(), MemoryEventStore()
    grand = worker("grand", ("rm",))
    with anyio.fail_after(LIMIT):
        async with serve(create_http_app(AgentServer([grand], store_b))) as url_b:
            transport = HttpRemoteAgentTransport(url_b, max_retries=2, retry_base_delay=0.05)
            child = relay("child", remote_tool("grand", transport))
            root = root_agent(create_sub_agent_tool(child, Query))
            async with (
                transport,
                runtime.server([root], store_a) as server_a,
                serve(create_http_app(server_a)) as url_a,
                httpx.AsyncClient(base_url=url_a, timeout=10) as http,
            ):
                started = await http.post(
                    "/start", json={"sessionId": "f1", "agentType": "root", "message": "hi"}
                )
                assert started.status_code == 200, started.text
                await until(store_a, "f1", lambda s: s.status == "paused")
                paused_at = project_state(await store_a.read("f1")).last_seq
                status = (await http.get("/status", params={"sessionId": "f1"})).json()
                (entry,) = status["pendingInputs"]
                approved = await http.post(
                    "/submit-approval",
                    json={"sessionId": "f1", "toolCallId": entry["toolCallId"], "approved": True},
                )
                assert approved.status_code == 200, approved.text
                await until(store_a, "f1", lambda s: s.is_terminal)
                assert removed == [RM_ARGS["question"]]
                origin_a, origin_b = await _all_bytes(store_a), await _all_bytes(store_b)
                calls = [a.llm.calls for a in (root, child, grand)]  # type: ignore[union-attr]

                forked = await http.post(
                    "/fork",
                    json={
                        "sessionId": "f1",
                        "atSeq": paused_at,
                        "newSessionId": "f1b",
                        "edits": [
                            {
                                "kind": "approval",
                                "toolCallId": entry["toolCallId"],
                                "approved": False,
                                "reason": "not today",
                            }
                        ],
                    },
                )
                assert forked.status_code == 200, forked.text
                body = forked.json()
                await until(store_a, "f1b", lambda s: s.is_terminal)
                listed = await http.get("/sessions", params={"metadata.forked_from": "f1"})
                again = await http.post(
                    "/fork", json={"sessionId": "f1", "atSeq": paused_at, "newSessionId": "f1b"}
                )
                missing = await http.post("/fork", json={"sessionId": "nobody"})
                after_a, after_b = await _all_bytes(store_a), await _all_bytes(store_b)
    child_id, grand_id = "f1-sub-call_0_0", "f1-sub-call_0_0-remote-call_0_0"
    assert body["sessionId"] == body["rootSessionId"] == "f1b"
    assert (body["status"], body["runId"]) == ("paused", None)
    assert body["sessions"] == {
        "f1": "f1b",
        child_id: "f1b-sub-call_0_0",
        grand_id: "f1b-sub-call_0_0-remote-call_0_0",
    }
    # the remote grandchild's branch lives on server B, forked at its own pause
    grand_branch = await store_b.read("f1b-sub-call_0_0-remote-call_0_0")
    marker = next(e for e in grand_branch if isinstance(e, SessionForked))
    assert (marker.origin_session_id, marker.origin_root_session_id) == (grand_id, "f1")
    grand_state = project_state(grand_branch)
    assert grand_state.parent_session_id == "f1b-sub-call_0_0"
    assert grand_state.ancestors == ["f1b", "f1b-sub-call_0_0"]
    (rm_result,) = [m for m in grand_state.messages if isinstance(m, ToolResultMessage)][:1]
    assert rm_result.is_error
    assert "denied by a person: not today" in rm_result.content
    assert "denied by a person: not today" in project_state(await store_a.read("f1b")).output
    assert removed == [RM_ARGS["question"]]  # the denied branch removed nothing
    # each agent answered one live turn: its last, after the decision
    assert [a.llm.calls for a in (root, child, grand)] == [n + 1 for n in calls]  # type: ignore[union-attr]
    assert [s["sessionId"] for s in listed.json()["sessions"]] == ["f1b"]
    assert again.status_code == 400  # another fork onto f1b (no edits this time)
    assert missing.status_code == 404
    for before, after in ((origin_a, after_a), (origin_b, after_b)):
        assert {s: after[s] for s in before} == before
    assert (await check_store(store_a)).ok
    assert (await check_store(store_b)).ok


looked: list[str] = []


def _look(value: Query, ctx: Any) -> dict[str, str]:
    looked.append(value.query)
    return {"found": value.query}


async def test_executor_fork_between_a_call_and_its_result_on_each_runtime(
    runtime: Runtime,
) -> None:
    """``AgentExecutor.fork`` of the gateway's executor: the branch resumes on its runtime."""
    looked.clear()
    llm = ScriptedLLM([[ScriptedLLM.call("look", {"query": "x"}, id="c1")], "done"])
    agent = define_agent("looker", tools=[define_tool("look", "Look.", Query, _look)], llm=llm)
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server([agent], store) as server:
            executor = server.executor
            handle = await executor.execute(agent, "hi", session_id="e1")
            await until(store, "e1", lambda s: s.is_terminal)
            origin = await _all_bytes(store)
            at = next(e.seq for e in await store.read("e1") if isinstance(e, ToolStart))
            result = await executor.fork("e1", at, new_session_id="e1b")
            await until(store, "e1b", lambda s: s.is_terminal)
            edited = await executor.fork(
                "e1", at, edits=[ReplaceToolResult(tool_call_id="c1", result={"found": "y"})]
            )
            await until(store, edited.session_id, lambda s: s.is_terminal)
            await runtime.settled(server, edited.session_id)
            after = await _all_bytes(store)
    assert handle.session_id == "e1"
    assert (result.status, result.run_id is not None) == ("running", True)
    branch = project_state(await store.read("e1b"))
    assert (branch.status, branch.output) == ("completed", "done")
    assert looked == ["x", "x"]  # live after the point once; never for the edited branch
    assert llm.calls == 4  # two recorded turns, then one live turn per branch
    assert {s: after[s] for s in origin} == origin
    assert (await check_store(store)).ok
