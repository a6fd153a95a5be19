"""Who decided an approval: ``decidedBy`` carried end to end through every transport.

A decision names its decider (specs/hitl.md, "Who decided"): the answer at
the root carries it hop by hop to the owner, every session on the path
records it on its ``approval_given``, the state and the inspector's snapshot
show it. A decider that is not a fit name is the protocol's
``INVALID_REQUEST`` and changes nothing. Real servers only: uvicorn on
loopback for HTTP, a real nats-server for NATS.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import anyio
import httpx
import pytest
from hitl_app import remote_tool, removed, root_agent, worker
from hitl_checks import log_bytes, tree_logs, until
from servers import serve

from helix_agents import AgentExecutor, EventStore
from helix_agents.errors import AgentServerError
from helix_agents.events import ApprovalGiven, Event
from helix_agents.log import project_state
from helix_agents.protocol import DECIDED_BY_MAX, RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.slow

LIMIT = 40

BAD_DECIDERS: list[Any] = [
    42,
    True,
    ["ada"],
    "",
    "   ",
    "x" * (DECIDED_BY_MAX + 1),
    "ada\nlovelace",
    "ada\x00",
    "tab\there",
]


def _decisions(log: Sequence[Event]) -> list[ApprovalGiven]:
    return [event for event in log if isinstance(event, ApprovalGiven)]


def _transport(url: str) -> HttpRemoteAgentTransport:
    return HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.05, timeout=10)


async def test_in_process_the_decider_is_recorded_in_the_log_and_the_state() -> None:
    removed.clear()
    store = MemoryEventStore()
    solo = worker("solo", ("rm",))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [solo]) as executor:
            handle = await executor.execute(solo, "hi", session_id="d-local")
            assert (await handle.result()).status == "paused"
            (entry,) = await handle.pending_inputs()
            before = await log_bytes([store])
            for bad in BAD_DECIDERS:
                with pytest.raises(AgentServerError) as refused:
                    await executor.submit_approval(
                        "d-local", entry.tool_call_id, True, decided_by=bad
                    )
                assert refused.value.code == "INVALID_REQUEST", bad
                assert "decidedBy" in refused.value.message
            assert await log_bytes([store]) == before  # nothing recorded, nothing resumed
            response = await handle.approve(entry.tool_call_id, "looks safe", decided_by="Ada")
            assert response.resumed
            await until(store, "d-local", lambda state: state.is_terminal)
            log = await store.read("d-local")
    (given,) = _decisions(log)
    assert (given.approved, given.reason, given.decided_by) == (True, "looks safe", "Ada")
    # The state of the log up to the decision shows who and when.
    at_decision = project_state([e for e in log if e.seq <= given.seq])
    pending = at_decision.pending_approvals[entry.tool_call_id]
    assert (pending.decided_by, pending.decided_at) == ("Ada", given.ts)
    assert given.ts > 0


async def test_over_http_the_decider_reaches_the_owner_and_every_ancestor_records_it() -> None:
    """A browser decides at gateway A (the root); B (the owner) gets it over HTTP."""
    removed.clear()
    name = "Grace Hopper (ops)"
    with anyio.fail_after(LIMIT):
        b_store = MemoryEventStore()
        a_store = MemoryEventStore()
        async with (
            serve(create_http_app(AgentServer([worker("child", ("rm",))], b_store))) as b_url,
            _transport(b_url) as to_b,
        ):
            root = root_agent(remote_tool("child", to_b))
            async with (
                serve(create_http_app(AgentServer([root], a_store))) as a_url,
                httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
            ):
                started = await browser.post(
                    "/start", json={"sessionId": "d-http", "agentType": "root", "message": "hi"}
                )
                assert started.status_code == 200, started.text
                await until(a_store, "d-http", lambda state: state.status == "paused")
                status = (await browser.get("/status", params={"sessionId": "d-http"})).json()
                (entry,) = status["pendingInputs"]
                gate = entry["toolCallId"]
                stores = [a_store, b_store]
                before = await log_bytes(stores)
                for bad in BAD_DECIDERS:
                    answer = await browser.post(
                        "/submit-approval",
                        json={
                            "sessionId": "d-http",
                            "toolCallId": gate,
                            "approved": True,
                            "decidedBy": bad,
                        },
                    )
                    assert answer.status_code == 400, (bad, answer.text)
                    body = answer.json()
                    assert set(body) == {"error", "code"}, body
                    assert body["code"] == "INVALID_REQUEST", body
                    assert "decidedBy" in body["error"], body
                assert await log_bytes(stores) == before
                decision = {
                    "sessionId": "d-http",
                    "toolCallId": gate,
                    "approved": False,
                    "reason": "not on a Friday",
                    "decidedBy": name,
                }
                answer = await browser.post("/submit-approval", json=decision)
                assert answer.status_code == 200, answer.text
                assert answer.json()["resumed"] is True
                await until(a_store, "d-http", lambda state: state.is_terminal)
                after = await log_bytes(stores)
                # The same verdict and reason from someone else: an identical repeat.
                again = await browser.post(
                    "/submit-approval", json={**decision, "decidedBy": "someone else"}
                )
                assert again.status_code == 200, again.text
                assert again.json()["resumed"] is False
                assert await log_bytes(stores) == after
                # A different verdict is still a conflict, whoever sends it.
                other = await browser.post("/submit-approval", json={**decision, "approved": True})
                assert other.status_code == 409, other.text
                snap = (await browser.get("/snapshot", params={"sessionId": "d-http"})).json()
            logs = await tree_logs("d-http", stores)
    owner = "d-http-remote-call_0_0"
    for session_id in ("d-http", owner):  # the root forwarded it, the owner took it
        (given,) = _decisions(logs[session_id])
        assert (given.approved, given.reason, given.decided_by) == (
            False,
            "not on a Friday",
            name,
        ), session_id
    (shown,) = snap["view"]["decisions"]
    assert shown["decidedBy"] == name
    assert shown["reason"] == "not on a Friday"
    assert shown["approved"] is False
    assert shown["ts"] > 0


async def test_the_longest_fit_name_is_taken_and_an_old_client_sends_none() -> None:
    removed.clear()
    longest = "é" * DECIDED_BY_MAX
    with anyio.fail_after(LIMIT):
        store = MemoryEventStore()
        async with (
            serve(create_http_app(AgentServer([worker("solo", ("rm",))], store))) as url,
            _transport(url) as transport,
        ):
            for session_id, decider in (("d-long", longest), ("d-none", None)):
                await transport.start(
                    RemoteStartRequest(session_id=session_id, agent_type="solo", message="hi")
                )
                await until(store, session_id, lambda state: state.status == "paused")
                (entry,) = (await transport.get_status(session_id)).pending_inputs
                response = await transport.submit_approval(
                    session_id, entry.tool_call_id, True, decided_by=decider
                )
                assert response.resumed
                await until(store, session_id, lambda state: state.is_terminal)
                (given,) = _decisions(await store.read(session_id))
                assert given.decided_by == decider


@pytest.mark.nats
async def test_over_nats_the_decider_reaches_the_owner_on_its_host(nats_server: Any) -> None:
    import nats
    from conftest import fresh_stream_name

    from helix_agents.server.fleet.host import NatsAgentHost
    from helix_agents.server.fleet.runtime import NatsRuntime
    from helix_agents.stores import JetStreamEventStore
    from helix_agents.transports.nats import NatsRemoteAgentTransport

    removed.clear()
    stream = fresh_stream_name()
    with anyio.fail_after(LIMIT):
        host_store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        client_store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
        host_nc = await nats.connect(nats_server.url)
        client_nc = await nats.connect(nats_server.url)
        try:
            async with NatsAgentHost(
                AgentServer([worker("child", ("rm",))], host_store, runtime=NatsRuntime(host_nc))
            ):
                transport = NatsRemoteAgentTransport(
                    client_nc, client_store, timeout=5, max_retries=2, retry_base_delay=0.05
                )
                root = root_agent(remote_tool("child", transport))
                store = MemoryEventStore()
                owner = "d-nats-remote-call_0_0"
                async with AgentExecutor(store, [root]) as executor:
                    handle = await executor.execute(root, "hi", session_id="d-nats")
                    assert (await handle.result()).status == "paused"
                    (entry,) = await handle.pending_inputs()
                    stores: list[EventStore] = [store, client_store]
                    before = await log_bytes(stores)
                    # Straight to the host over NATS: refused there, nothing changed.
                    with pytest.raises(AgentServerError) as refused:
                        await transport.submit_approval(
                            owner, entry.tool_call_id, True, decided_by="ada\x1b[31m"
                        )
                    assert refused.value.code == "INVALID_REQUEST"
                    assert await log_bytes(stores) == before
                    response = await handle.approve(entry.tool_call_id, decided_by="Ada")
                    assert response.resumed
                    await until(store, "d-nats", lambda state: state.is_terminal)
                logs = await tree_logs("d-nats", stores)
        finally:
            await client_nc.close()
            await host_nc.close()
            await client_store.close()
            await host_store.close()
    for session_id in ("d-nats", owner):
        (given,) = _decisions(logs[session_id])
        assert (given.approved, given.decided_by) == (True, "Ada"), session_id


async def test_an_ag_ui_resume_names_the_decider_over_http() -> None:
    """AG-UI's ``resume`` entry answers an approval with ``{approved, reason, decidedBy}``."""
    removed.clear()
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with (
            serve(create_http_app(AgentServer([worker("solo", ("rm",))], store))) as url,
            httpx.AsyncClient(base_url=url, timeout=10) as client,
        ):
            started = await client.post(
                "/start", json={"sessionId": "d-agui", "agentType": "solo", "message": "hi"}
            )
            assert started.status_code == 200, started.text
            await until(store, "d-agui", lambda state: state.status == "paused")
            status = (await client.get("/status", params={"sessionId": "d-agui"})).json()
            (entry,) = status["pendingInputs"]

            def run(run_id: str, payload: Any) -> dict[str, Any]:
                resume = [
                    {"interruptId": entry["toolCallId"], "status": "resolved", "payload": payload}
                ]
                return {"threadId": "d-agui", "runId": run_id, "messages": [], "resume": resume}

            before = await log_bytes([store])
            bad = await client.post(
                "/sse?format=ag-ui", json=run("r-bad", {"approved": True, "decidedBy": "a\nb"})
            )
            assert bad.status_code == 400, bad.text
            assert bad.json()["code"] == "INVALID_REQUEST"
            assert await log_bytes([store]) == before
            answer = {"approved": True, "reason": "fine", "decidedBy": "Ada"}
            good = await client.post("/sse?format=ag-ui", json=run("r-good", answer))
            assert good.status_code == 200, good.text
            await until(store, "d-agui", lambda state: state.is_terminal)
    (given,) = _decisions(await store.read("d-agui"))
    assert (given.approved, given.reason, given.decided_by) == (True, "fine", "Ada")
