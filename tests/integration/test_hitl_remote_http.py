"""Human in the loop through a remote child on a real HTTP server (specs/hitl.md).

The root runs on an executor in this process; its child is a
``create_remote_sub_agent_tool`` served by ``create_http_app(AgentServer)`` on
uvicorn (127.0.0.1), with its own store. The child calls a client tool or
passes an approval gate. The test answers at the ROOT only and checks that
the one answer resumes the whole tree, what the pending entries say, and
that the root's stream holds every chunk of the tree once, in order.

The gateway tests put the root behind a gateway too (gateway A) and drive it
as a browser would: ``POST /start``, one ``GET /sse`` read across the
suspension, ``GET /status``, the answers, and every bad answer of the table
in specs/hitl.md, over HTTP. Gateway A runs on every runtime (``runtime``):
a browser cannot tell which one runs its tree. The first three tests drive
the root's executor in this process, the built-in runtime's own API.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from hitl_app import (
    ASK_ARGS,
    RM_ARGS,
    remote_tool,
    removed,
    root_agent,
    worker,
)
from hitl_checks import (
    SSEReader,
    assert_answered_once,
    assert_entry,
    assert_every_chunk_once,
    input_required_of,
    log_bytes,
    tree_logs,
    until,
)
from servers import listen_port, serve

from helix_agents import AgentExecutor, EventStore
from helix_agents.events import InputRequired
from helix_agents.log import project_state, project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

LIMIT = 30


@asynccontextmanager
async def server_b(tools: tuple[str, ...]) -> AsyncIterator[tuple[str, EventStore]]:
    """Server B: the remote ``child`` (a worker calling ``tools``) on uvicorn; (URL, its store)."""
    store = MemoryEventStore()
    async with serve(create_http_app(AgentServer([worker("child", tools)], store))) as url:
        yield url, store


def _transport(url: str) -> HttpRemoteAgentTransport:
    return HttpRemoteAgentTransport(url, max_retries=2, retry_base_delay=0.05, timeout=10)


async def _paused(store: EventStore, session_id: str) -> None:
    await until(store, session_id, lambda state: state.status == "paused")


async def _completed(store: EventStore, session_id: str) -> None:
    await until(store, session_id, lambda state: state.is_terminal)


def _results(log: list[Any]) -> dict[str, ToolResultMessage]:
    state = project_state(log)
    return {m.tool_name: m for m in state.messages if isinstance(m, ToolResultMessage)}


# --- root in this process, child on server B ----------------------------------------------


async def test_a_remote_childs_client_tool_is_answered_at_the_root() -> None:
    with anyio.fail_after(LIMIT):
        async with server_b(("ask_user",)) as (url, remote_store), _transport(url) as transport:
            root = root_agent(remote_tool("child", transport))
            store = MemoryEventStore()
            async with AgentExecutor(store, [root]) as executor:
                handle = await executor.execute(root, "hi", session_id="h1")
                assert (await handle.result()).status == "paused"
                child = "h1-remote-call_0_0"
                status = await executor.service.get_status("h1")
                assert status.awaiting_input
                (entry,) = status.pending_inputs
                logs = await tree_logs("h1", [store, remote_store])
                assert_entry(
                    entry,
                    kind="client_tool",
                    tool_name="ask_user",
                    arguments=ASK_ARGS,
                    owner=child,
                    path=["h1", child],
                    logs=logs,
                )
                # The child is paused on its own server, and says so there too.
                remote_status = await transport.get_status(child)
                assert (remote_status.status, remote_status.awaiting_input) == ("paused", True)
                assert [e.tool_call_id for e in remote_status.pending_inputs] == [
                    entry.tool_call_id
                ]

                response = await handle.submit_tool_result(entry.tool_call_id, {"color": "teal"})
                assert response.resumed
                await _completed(store, "h1")
                result = await handle.result()
            logs = await tree_logs("h1", [store, remote_store])
    assert result.status == "completed"
    assert result.output == (
        'root got: subagent__child={"answer":"ask_user={\\"color\\":\\"teal\\"}"}'
    )
    assert project_state(logs[child]).status == "completed"
    assert_every_chunk_once(logs, "h1")
    assert assert_answered_once(logs) == 1
    waits = [
        item.chunk.agent_id
        for item in project_stream(logs["h1"])
        if isinstance(item.chunk, InputRequired)
    ]
    assert waits == [child, "h1"]  # the owner's notice, then the root's


@pytest.mark.parametrize("approved", [True, False], ids=["approve", "deny"])
async def test_a_remote_childs_approval_gate_is_decided_at_the_root(approved: bool) -> None:
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with server_b(("rm",)) as (url, remote_store), _transport(url) as transport:
            root = root_agent(remote_tool("child", transport))
            store = MemoryEventStore()
            async with AgentExecutor(store, [root]) as executor:
                handle = await executor.execute(root, "hi", session_id="a1")
                assert (await handle.result()).status == "paused"
                child = "a1-remote-call_0_0"
                (entry,) = await handle.pending_inputs()
                logs = await tree_logs("a1", [store, remote_store])
                assert_entry(
                    entry,
                    kind="approval",
                    tool_name="rm",
                    arguments=RM_ARGS,
                    owner=child,
                    path=["a1", child],
                    logs=logs,
                )
                assert removed == []  # nothing runs before the decision
                if approved:
                    response = await handle.approve(entry.tool_call_id)
                else:
                    response = await handle.deny(entry.tool_call_id, "not on a Friday")
                assert response.resumed
                await _completed(store, "a1")
                result = await handle.result()
            logs = await tree_logs("a1", [store, remote_store])
    assert result.status == "completed"
    rm_result = _results(logs[child])["rm"]
    if approved:
        assert removed == [RM_ARGS["question"]]
        assert not rm_result.is_error
        assert "removed" in result.output
    else:
        assert removed == []
        assert rm_result.is_error
        # The LLM saw the reason: the child's output carries it up to the root's.
        assert "denied by a person: not on a Friday" in rm_result.content
        assert "denied by a person: not on a Friday" in result.output
    assert_every_chunk_once(logs, "a1")
    assert assert_answered_once(logs) == 1


async def test_repeating_an_approved_delegation_while_its_child_waits_changes_nothing() -> None:
    """The approval is in and taken: the root waits on the child's own entry now."""
    with anyio.fail_after(LIMIT):
        async with server_b(("ask_user",)) as (url, remote_store), _transport(url) as transport:
            root = root_agent(remote_tool("child", transport, requires_approval=True))
            store = MemoryEventStore()
            async with AgentExecutor(store, [root]) as executor:
                handle = await executor.execute(root, "hi", session_id="rp")
                await handle.result()
                (gate,) = await handle.pending_inputs()
                assert (gate.kind, gate.tool_name, gate.owner_session_id) == (
                    "approval",
                    "subagent__child",
                    "rp",
                )
                assert (await handle.approve(gate.tool_call_id)).resumed
                await handle.result()
                (ask,) = await handle.pending_inputs()
                assert (ask.kind, ask.owner_session_id) == ("client_tool", "rp-remote-call_0_0")
                before = await log_bytes([store, remote_store])
                again = await handle.approve(gate.tool_call_id)
                assert (again.ok, again.resumed) == (True, False)
                assert await log_bytes([store, remote_store]) == before
                assert (await handle.submit_tool_result(ask.tool_call_id, {"color": "red"})).resumed
                await _completed(store, "rp")
            logs = await tree_logs("rp", [store, remote_store])
    assert project_state(logs["rp"]).status == "completed"
    assert_every_chunk_once(logs, "rp")
    assert assert_answered_once(logs) == 2


# --- a browser, gateway A (the root) and server B (the child) --------------------------------


@asynccontextmanager
async def gateway_a(
    b_url: str, runtime: Runtime
) -> AsyncIterator[tuple[str, EventStore, HttpRemoteAgentTransport]]:
    """Gateway A on ``runtime``: the root (remote child on ``b_url``) and a bystander.

    Yields (URL, store, transport). Server B stays on the built-in runtime: the
    browser talks to gateway A only (and DBOS runs one instance per process).
    """
    store = MemoryEventStore()
    async with _transport(b_url) as transport:
        root = root_agent(remote_tool("child", transport))
        bystander = worker("bystander", ())
        async with (
            runtime.server([root, bystander], store) as server,
            serve(create_http_app(server)) as url,
        ):
            yield url, store, transport


async def test_a_browser_answers_a_remote_tree_through_gateway_a_on_one_stream(
    runtime: Runtime,
) -> None:
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with (
            server_b(("ask_user", "rm")) as (b_url, b_store),
            gateway_a(b_url, runtime) as (a_url, a_store, _),
            httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
            anyio.create_task_group() as tg,
        ):
            started = await browser.post(
                "/start", json={"sessionId": "g1", "agentType": "root", "message": "hi"}
            )
            assert started.status_code == 200, started.text
            assert started.json()["sessionId"] == "g1"
            sse = SSEReader()
            tg.start_soon(sse.read, a_url, "g1")
            _, paused = await sse.until(input_required_of("g1"))
            child = "g1-remote-call_0_0"
            listed = {entry["kind"]: entry for entry in paused["chunk"]["pending"]}

            status = (await browser.get("/status", params={"sessionId": "g1"})).json()
            assert (status["status"], status["awaitingInput"]) == ("paused", True)
            entries = {entry["kind"]: entry for entry in status["pendingInputs"]}
            assert entries == listed  # the chunk and the status list the same entries
            assert entries["client_tool"]["toolName"] == "ask_user"
            assert entries["client_tool"]["arguments"] == ASK_ARGS
            assert entries["approval"]["toolName"] == "rm"
            assert entries["approval"]["arguments"] == RM_ARGS
            logs = await tree_logs("g1", [a_store, b_store])
            for entry in entries.values():
                assert entry["ownerSessionId"] == child
                assert entry["path"] == ["g1", child]
                owned = [getattr(e, "tool_call_id", None) for e in logs[child]]
                assert entry["toolCallId"] in owned

            first = await browser.post(
                "/submit-tool-result",
                json={
                    "sessionId": "g1",
                    "toolCallId": entries["client_tool"]["toolCallId"],
                    "result": {"color": "teal"},
                },
            )
            assert (first.status_code, first.json()) == (200, {"ok": True, "resumed": False})
            still = (await browser.get("/status", params={"sessionId": "g1"})).json()
            assert [e["kind"] for e in still["pendingInputs"]] == ["approval"]

            second = await browser.post(
                "/submit-approval",
                json={
                    "sessionId": "g1",
                    "toolCallId": entries["approval"]["toolCallId"],
                    "approved": True,
                },
            )
            assert (second.status_code, second.json()) == (200, {"ok": True, "resumed": True})
            kind, end = await sse.until(lambda kind, _: kind != "chunk")
            sse.close()
            done = (await browser.get("/status", params={"sessionId": "g1"})).json()
        logs = await tree_logs("g1", [a_store, b_store])
    assert kind == "end"
    assert end["output"].startswith("root got: subagent__child=")
    assert '\\"color\\":\\"teal\\"' in end["output"]
    assert removed == [RM_ARGS["question"]]
    assert (done["status"], done["awaitingInput"], done["pendingInputs"]) == (
        "completed",
        False,
        [],
    )
    # The one connection carried the whole stream: exactly the root log's, then `end`.
    received = [payload["sequence"] for kind, payload in sse.events if kind == "chunk"]
    assert received == [item.sequence for item in project_stream(logs["g1"])]
    assert_every_chunk_once(logs, "g1")
    assert assert_answered_once(logs) == 2


async def _refusal(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code, body
    return str(body["error"])


async def test_every_bad_answer_over_http_is_refused_and_changes_no_log(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            server_b(("ask_user", "rm")) as (b_url, b_store),
            gateway_a(b_url, runtime) as (a_url, a_store, _),
            httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
        ):
            stores = [a_store, b_store]
            for body in (
                {"sessionId": "g2", "agentType": "root", "message": "hi"},
                {"sessionId": "by", "agentType": "bystander", "message": "hi"},
            ):
                assert (await browser.post("/start", json=body)).status_code == 200
            await _paused(a_store, "g2")
            await _completed(a_store, "by")
            status = (await browser.get("/status", params={"sessionId": "g2"})).json()
            entries = {entry["kind"]: entry["toolCallId"] for entry in status["pendingInputs"]}
            tool, gate = entries["client_tool"], entries["approval"]
            before = await log_bytes(stores)

            async def refused(path: str, body: Any, status: int, code: str) -> str:
                if isinstance(body, bytes):
                    response = await browser.post(
                        path, content=body, headers={"content-type": "application/json"}
                    )
                else:
                    response = await browser.post(path, json=body)
                message = await _refusal(response, status, code)
                assert await log_bytes(stores) == before, (path, body)
                return message

            submit, approve = "/submit-tool-result", "/submit-approval"
            await refused(submit, b'{"sessionId": "g2", ', 400, "INVALID_REQUEST")
            assert "toolCallId" in await refused(
                submit, {"sessionId": "g2", "result": 1}, 400, "INVALID_REQUEST"
            )
            assert "approved" in await refused(
                approve, {"sessionId": "g2", "toolCallId": gate}, 400, "INVALID_REQUEST"
            )
            assert "approved" in await refused(
                approve,
                {"sessionId": "g2", "toolCallId": gate, "approved": "yes"},
                400,
                "INVALID_REQUEST",
            )
            assert "sessionId" in await refused(
                submit, {"sessionId": "not/an id", "toolCallId": tool}, 400, "INVALID_REQUEST"
            )
            await refused(submit, {"sessionId": "nobody", "toolCallId": tool}, 404, "NOT_FOUND")
            await refused(submit, {"sessionId": "g2", "toolCallId": "no-such"}, 404, "NOT_FOUND")
            await refused(
                approve,
                {"sessionId": "g2", "toolCallId": "no-such", "approved": True},
                404,
                "NOT_FOUND",
            )
            # A session that exists but is not on the entry's path.
            await refused(submit, {"sessionId": "by", "toolCallId": tool}, 404, "NOT_FOUND")
            # The wrong kind of answer.
            await refused(submit, {"sessionId": "g2", "toolCallId": gate}, 400, "INVALID_REQUEST")
            await refused(
                approve,
                {"sessionId": "g2", "toolCallId": tool, "approved": True},
                400,
                "INVALID_REQUEST",
            )
            # A result that fails the client tool's output schema names the field.
            assert "color" in await refused(
                submit,
                {"sessionId": "g2", "toolCallId": tool, "result": {"colour": "red"}},
                400,
                "INVALID_REQUEST",
            )

            # Answered once; the same answer again is 200 and changes nothing, another is 409.
            answer = {"sessionId": "g2", "toolCallId": tool, "result": {"color": "red"}}
            assert (await browser.post(submit, json=answer)).json() == {
                "ok": True,
                "resumed": False,
            }
            before = await log_bytes(stores)
            again = await browser.post(submit, json=answer)
            assert (again.status_code, again.json()) == (200, {"ok": True, "resumed": False})
            assert await log_bytes(stores) == before
            await refused(
                submit,
                {"sessionId": "g2", "toolCallId": tool, "result": {"color": "blue"}},
                409,
                "ALREADY_ANSWERED",
            )
            await refused(
                submit,
                {"sessionId": "g2", "toolCallId": tool, "error": "the user walked away"},
                409,
                "ALREADY_ANSWERED",
            )

            decision = {"sessionId": "g2", "toolCallId": gate, "approved": False, "reason": "no"}
            assert (await browser.post(approve, json=decision)).json() == {
                "ok": True,
                "resumed": True,
            }
            await _completed(a_store, "g2")
            await _completed(b_store, "g2-remote-call_0_0")
            after = await log_bytes(stores)
            again = await browser.post(approve, json=decision)
            assert (again.status_code, again.json()["ok"]) == (200, True)
            assert await log_bytes(stores) == after
            before = after
            await refused(approve, {**decision, "approved": True}, 409, "ALREADY_ANSWERED")
            await refused(approve, {**decision, "reason": "other"}, 409, "ALREADY_ANSWERED")
            logs = await tree_logs("g2", stores)
    assert project_state(logs["g2"]).status == "completed"
    assert_every_chunk_once(logs, "g2")
    assert assert_answered_once(logs) == 2


async def _serve_until(
    app: Any, port: int, stop: anyio.Event, stopped: anyio.Event, *, task_status: Any
) -> None:
    try:
        async with serve(app, port=port) as url:
            task_status.started(url)
            await stop.wait()
    finally:
        stopped.set()


async def test_an_unreachable_owner_is_a_retryable_500_and_the_retry_is_recorded_once(
    runtime: Runtime,
) -> None:
    port = listen_port()
    remote_store = MemoryEventStore()

    def app() -> Any:  # a fresh server each time, on the same store: a restart
        return create_http_app(AgentServer([worker("child", ("ask_user",))], remote_store))

    with anyio.fail_after(LIMIT):
        async with anyio.create_task_group() as servers:
            stop, stopped = anyio.Event(), anyio.Event()
            b_url = await servers.start(_serve_until, app(), port, stop, stopped)
            async with (
                gateway_a(b_url, runtime) as (a_url, a_store, _),
                httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
            ):
                body = {"sessionId": "u1", "agentType": "root", "message": "hi"}
                assert (await browser.post("/start", json=body)).status_code == 200
                await _paused(a_store, "u1")
                status = (await browser.get("/status", params={"sessionId": "u1"})).json()
                (entry,) = status["pendingInputs"]
                answer = {
                    "sessionId": "u1",
                    "toolCallId": entry["toolCallId"],
                    "result": {"color": "x"},
                }
                stores = [a_store, remote_store]
                stop.set()  # server B goes away
                await stopped.wait()
                before = await log_bytes(stores)
                response = await browser.post("/submit-tool-result", json=answer)
                await _refusal(response, 500, "INTERNAL_ERROR")
                assert await log_bytes(stores) == before  # nothing recorded on either side

                stop, stopped = anyio.Event(), anyio.Event()
                await servers.start(_serve_until, app(), port, stop, stopped)
                retried = await browser.post("/submit-tool-result", json=answer)
                assert (retried.status_code, retried.json()) == (200, {"ok": True, "resumed": True})
                await _completed(a_store, "u1")
                logs = await tree_logs("u1", stores)
                stop.set()
    assert project_state(logs["u1"]).status == "completed"
    assert_every_chunk_once(logs, "u1")
    assert assert_answered_once(logs) == 1


async def test_a_browser_interrupts_a_paused_tree_answers_it_then_resumes_it(
    runtime: Runtime,
) -> None:
    """A paused root has no run to stop: the interrupt takes effect at once, answers wait."""
    with anyio.fail_after(LIMIT):
        async with (
            server_b(("ask_user",)) as (b_url, b_store),
            gateway_a(b_url, runtime) as (a_url, a_store, _),
            httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
            anyio.create_task_group() as tg,
        ):
            body = {"sessionId": "i1", "agentType": "root", "message": "hi"}
            assert (await browser.post("/start", json=body)).status_code == 200
            sse = SSEReader()
            tg.start_soon(sse.read, a_url, "i1")
            await sse.until(input_required_of("i1"))
            stopped = await browser.post("/interrupt", json={"sessionId": "i1", "reason": "later"})
            assert stopped.status_code == 200, stopped.text
            kind, error = await sse.until(lambda kind, _: kind != "chunk")
            sse.close()
            assert (kind, error) == ("error", {"error": "interrupted: later", "recoverable": True})
            status = (await browser.get("/status", params={"sessionId": "i1"})).json()
            assert (status["status"], status["awaitingInput"]) == ("interrupted", False)
            (entry,) = status["pendingInputs"]  # still open, still answerable

            answer = {
                "sessionId": "i1",
                "toolCallId": entry["toolCallId"],
                "result": {"color": "x"},
            }
            assert (await browser.post("/submit-tool-result", json=answer)).status_code == 200
            await _completed(b_store, "i1-remote-call_0_0")  # the owner goes on, on its server
            still = (await browser.get("/status", params={"sessionId": "i1"})).json()
            assert still["status"] == "interrupted"  # the answer did not undo the interrupt

            resumed = await browser.post("/resume", json={"sessionId": "i1"})
            assert resumed.status_code == 200, resumed.text
            await _completed(a_store, "i1")
            logs = await tree_logs("i1", [a_store, b_store])
    assert project_state(logs["i1"]).status == "completed"
    assert project_state(logs["i1"]).output.startswith("root got: subagent__child=")
    assert_every_chunk_once(logs, "i1")
    assert assert_answered_once(logs) == 1


async def test_a_browser_aborts_a_paused_tree_at_once(runtime: Runtime) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            server_b(("ask_user",)) as (b_url, b_store),
            gateway_a(b_url, runtime) as (a_url, a_store, _),
            httpx.AsyncClient(base_url=a_url, timeout=10) as browser,
            anyio.create_task_group() as tg,
        ):
            body = {"sessionId": "x1", "agentType": "root", "message": "hi"}
            assert (await browser.post("/start", json=body)).status_code == 200
            sse = SSEReader()
            tg.start_soon(sse.read, a_url, "x1")
            await sse.until(input_required_of("x1"))
            before = (await browser.get("/status", params={"sessionId": "x1"})).json()
            [entry] = before["pendingInputs"]
            stopped = await browser.post("/abort", json={"sessionId": "x1", "reason": "enough"})
            assert stopped.status_code == 200, stopped.text
            kind, error = await sse.until(lambda kind, _: kind != "chunk")
            sse.close()
            status = (await browser.get("/status", params={"sessionId": "x1"})).json()
            again = await browser.post("/resume", json={"sessionId": "x1"})
            aborted = await log_bytes([a_store, b_store])
            # The remote child was aborted with the tree: an answer to its entry,
            # at the root or at the child's own server, is refused and changes nothing.
            answer = {"toolCallId": entry["toolCallId"], "result": {"color": "red"}}
            late = await browser.post("/submit-tool-result", json={"sessionId": "x1", **answer})
            async with httpx.AsyncClient(base_url=b_url, timeout=10) as direct:
                owner = {"sessionId": entry["ownerSessionId"], **answer}
                late_at_owner = await direct.post("/submit-tool-result", json=owner)
            assert await log_bytes([a_store, b_store]) == aborted
            logs = await tree_logs("x1", [a_store, b_store])
    await _refusal(late, 409, "ALREADY_COMPLETED")
    await _refusal(late_at_owner, 409, "ALREADY_COMPLETED")
    child = project_state(logs[entry["ownerSessionId"]])
    assert (child.status, child.error) == ("failed", "aborted: enough")
    [ref] = project_state(logs["x1"]).sub_sessions.values()
    assert (ref.status, ref.error) == ("failed", "aborted: enough")
    assert (kind, error) == ("error", {"error": "aborted: enough", "recoverable": False})
    assert (status["status"], status["error"]) == ("failed", "aborted: enough")
    assert (status["awaitingInput"], status["pendingInputs"]) == (False, [])
    await _refusal(again, 409, "ALREADY_COMPLETED")
    received = [p["sequence"] for kind, p in sse.events if kind == "chunk"]
    assert received == [item.sequence for item in project_stream(logs["x1"])]
