"""Tenants on a real gateway: every route, the front-end streams, the inspector, MCP and A2A.

Two tenants (``acme``'s alice, ``globex``'s bob), a reader of ``acme`` and an
admin, each a static token mapped to an identity, call one uvicorn server on
loopback. The walk covers every operation of the served ``openapi.json`` and
every mounted entrance (MCP, A2A): a route without a probe here fails the
walk. Neither tenant reads, answers, stops, lists or searches the other's
sessions, and a refusal is the answer a session that does not exist gets
(specs/auth.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import httpx
import httpx2
import pytest
from companion_kit import critic, parent as companion_parent
from hitl_app import Out, Query, root_agent, worker
from hitl_checks import log_bytes, until
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from servers import serve

from helix_agents import PersistentAgent, create_sub_agent_tool, define_agent
from helix_agents.a2a import A2ARemoteAgentTransport, create_a2a_sub_agent_tool
from helix_agents.auth import Identity
from helix_agents.events import ApprovalGiven, Principal, RequestMade, SessionCreated
from helix_agents.mcp import MCPOptions
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.gateway.routes import ENDPOINTS
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

LIMIT = 60

TOKENS = {
    "tok-alice": Identity(user="alice", tenant="acme"),
    "tok-bob": Identity(user="bob", tenant="globex"),
    "tok-rita": Identity(user="rita", tenant="acme", roles=frozenset({"reader"})),
    "tok-root": Identity(user="root", roles=frozenset({"admin"})),
}
ALICE = Principal(tenant="acme", user="alice")
BOB = Principal(tenant="globex", user="bob")
A, B, MISSING = "acme-1", "globex-1", "nobody-1"


def _agents() -> list[Any]:
    solo = worker("solo", ("ask_user", "rm"))  # pauses for a client tool and an approval
    kid = worker("kid", ("rm",))
    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(kid, Query)],
        llm=ScriptedLLM(
            [
                ScriptStep(tool_calls=[ScriptedLLM.call("subagent__kid", {"query": "go"})]),
                ScriptStep(text="done"),
            ]
        ),
    )
    echo = define_agent(
        "echo", llm=ScriptedLLM(lambda request: ScriptStep(text="unique-zebra-words"))
    )
    return [solo, parent, echo]


def _client(url: str, token: str | None) -> httpx.AsyncClient:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return httpx.AsyncClient(base_url=url, headers=headers, timeout=15)


class Walk:
    """What the probes share: the clients, alice's session and its pending inputs."""

    def __init__(self, url: str, store: MemoryEventStore, pending: dict[str, str]) -> None:
        self.url = url
        self.store = store
        self.pending = pending  # kind -> tool call id, on alice's session A
        self.alice = _client(url, "tok-alice")
        self.bob = _client(url, "tok-bob")
        self.rita = _client(url, "tok-rita")
        self.root = _client(url, "tok-root")
        self.anonymous = _client(url, None)

    async def close(self) -> None:
        for client in (self.alice, self.bob, self.rita, self.root, self.anonymous):
            await client.aclose()


async def _as_missing(
    call: Callable[[str], Awaitable[httpx.Response]], expected: int = 404
) -> None:
    """Bob on alice's session gets what he gets on a session that does not exist."""
    theirs, missing = await call(A), await call(MISSING)
    assert theirs.status_code == expected, theirs.text
    assert missing.status_code == expected, missing.text
    assert theirs.json()["code"] == missing.json()["code"] == "NOT_FOUND"
    assert theirs.json()["error"].replace(A, MISSING) == missing.json()["error"]


def _body(session_id: str, **extra: Any) -> dict[str, Any]:
    return {"sessionId": session_id, **extra}


async def _start(w: Walk) -> None:
    # An id taken by another tenant is taken, as any id is; naming it as kin is 404.
    taken = await w.bob.post("/start", json=_body(A, agentType="echo", message="hi"))
    assert taken.status_code == 409, taken.text
    assert taken.json()["code"] == "ALREADY_RUNNING"
    for field in ("parentSessionId", "rootSessionId", "workspaceSessionId"):
        await _as_missing(
            lambda sid, field=field: w.bob.post(
                "/start", json={**_body("bob-kin", agentType="echo", message="hi"), field: sid}
            )
        )
    # Naming another owner is for an identity of every tenant only.
    posed = await w.bob.post(
        "/start",
        json={**_body("bob-posed", agentType="echo", message="hi"), "owner": {"tenant": "acme"}},
    )
    assert posed.status_code == 403, posed.text
    assert posed.json()["code"] == "FORBIDDEN"


async def _resume(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.post("/resume", json=_body(sid, message="x")))


async def _message(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.post("/message", json=_body(sid, message="x")))


async def _interrupt(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.post("/interrupt", json=_body(sid)))


async def _abort(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.post("/abort", json=_body(sid)))


async def _tool_result(w: Walk) -> None:
    call = w.pending["client_tool"]
    await _as_missing(
        lambda sid: w.bob.post(
            "/submit-tool-result", json=_body(sid, toolCallId=call, result={"color": "red"})
        )
    )


async def _approval(w: Walk) -> None:
    call = w.pending["approval"]
    await _as_missing(
        lambda sid: w.bob.post("/submit-approval", json=_body(sid, toolCallId=call, approved=True))
    )


async def _sse(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.get("/sse", params={"sessionId": sid}))
    for fmt in ("ag-ui", "ai-sdk"):
        await _as_missing(lambda sid, fmt=fmt: w.bob.get(f"/sse?format={fmt}&sessionId={sid}"))


async def _sse_run(w: Walk) -> None:
    # A front end's run on alice's thread: neither streamed nor continued.
    ag_ui = {"threadId": A, "runId": "r", "messages": [{"id": "u", "role": "user", "content": "x"}]}
    chat = {
        "id": A,
        "messages": [{"id": "u", "role": "user", "parts": [{"type": "text", "text": "x"}]}],
    }
    for fmt, body in (("ag-ui", ag_ui), ("ai-sdk", chat)):
        for agent in ("", "&agentType=solo"):
            refused = await w.bob.post(f"/sse?format={fmt}{agent}", json=body)
            assert refused.status_code in (404, 409), refused.text
            assert "need" not in refused.text
            assert "rm" not in refused.text


async def _status(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.get("/status", params={"sessionId": sid}))


async def _sessions(w: Walk) -> None:
    bobs = (await w.bob.get("/sessions")).json()["sessions"]
    assert {s["sessionId"] for s in bobs} == {B}
    assert all(s["owner"] == {"tenant": "globex", "user": "bob"} for s in bobs)
    # The search: alice's session's words find nothing for bob, everything for her.
    # The search: words both sessions hold find each tenant its own only.
    for words in ("needs", "solo"):
        found = (await w.bob.get("/sessions", params={"q": words})).json()["sessions"]
        assert [s["sessionId"] for s in found] == [B], words
        found = (await w.alice.get("/sessions", params={"q": words})).json()["sessions"]
        assert [s["sessionId"] for s in found] == [A], words
    alices = (await w.alice.get("/sessions")).json()["sessions"]
    assert A in {s["sessionId"] for s in alices}
    assert B not in {s["sessionId"] for s in alices}
    everyone = (await w.root.get("/sessions")).json()["sessions"]
    assert {A, B} <= {s["sessionId"] for s in everyone}


async def _public(w: Walk, path: str) -> None:
    answer = await w.anonymous.get(path)
    assert answer.status_code == 200, (path, answer.text)
    assert A not in answer.text
    assert B not in answer.text


async def _snapshot(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.get("/snapshot", params={"sessionId": sid}))
    mine = (await w.alice.get("/snapshot", params={"sessionId": A})).json()
    assert mine["view"]["owner"] == {"tenant": "acme", "user": "alice"}


async def _fork(w: Walk) -> None:
    """Bob cannot fork alice's session (404, as a missing one), nor take her id for his
    branch (409, as any taken id); alice's branch is hers, and says who forked it."""
    await _as_missing(lambda sid: w.bob.post("/fork", json=_body(sid, run=False)))
    taken = await w.bob.post("/fork", json=_body(B, newSessionId=A, run=False))
    assert taken.status_code == 409, taken.text
    assert taken.json()["code"] == "ALREADY_RUNNING"
    forked = await w.alice.post("/fork", json=_body(A, newSessionId="acme-branch", run=False))
    assert forked.status_code == 200, forked.text
    branch = await w.store.read("acme-branch")
    created = branch[0]
    assert isinstance(created, SessionCreated)
    assert created.owner == Principal(tenant="acme", user="alice")
    [made] = [e for e in branch if isinstance(e, RequestMade)]
    assert (made.action, made.by, made.ref) == ("fork", created.owner, A)
    hidden = await w.bob.get("/status", params={"sessionId": "acme-branch"})
    assert (hidden.status_code, hidden.json()["code"]) == (404, "NOT_FOUND")
    # Alice's own change, checked: gone again, so the walk's "nothing changed" holds for bob.
    assert await w.store.delete("acme-branch")


async def _diff(w: Walk) -> None:
    await _as_missing(lambda sid: w.bob.get("/diff", params={"a": sid, "b": B}))
    await _as_missing(lambda sid: w.bob.get("/diff", params={"a": B, "b": sid}))
    mine = await w.bob.get("/diff", params={"a": B, "b": B})
    assert mine.status_code == 200, mine.text


_NOTE = {"namespace": "notes.trips", "key": "lyon"}


async def _alices_note(w: Walk) -> None:
    put = await w.alice.put("/memory", json={**_NOTE, "value": {"text": "secret-lyon"}})
    assert put.status_code == 200, put.text
    assert put.json()["namespace"] == ["notes", "trips"]  # below her tenant, as she named it


async def _memory_items(client: httpx.AsyncClient, **params: str) -> list[Any]:
    answer = await client.get("/memory", params=params)
    assert answer.status_code == 200, answer.text
    items: list[Any] = answer.json()["items"]
    return items


async def _memory_get(w: Walk) -> None:
    """Bob reads, searches and lists only globex's items; naming acme is for an admin."""
    await _alices_note(w)
    assert await _memory_items(w.bob, **_NOTE) == []
    assert await _memory_items(w.bob, query="secret-lyon") == []
    assert all(item["namespace"][0] != "acme" for item in await _memory_items(w.bob))
    [mine] = await _memory_items(w.alice, query="secret-lyon")
    assert (mine["namespace"], mine["key"]) == (["notes", "trips"], "lyon")
    assert await _memory_items(w.rita, **_NOTE) == [mine]  # a reader of acme reads acme
    assert await _memory_items(w.root, tenant="acme", **_NOTE) == [mine]
    posed = await w.bob.get("/memory", params={"tenant": "acme", **_NOTE})
    assert (posed.status_code, posed.json()["code"]) == (403, "FORBIDDEN")


async def _memory_put(w: Walk) -> None:
    """Bob's write lands in globex, never over alice's item; a reader writes nothing."""
    await _alices_note(w)
    put = await w.bob.put("/memory", json={**_NOTE, "value": {"text": "bob"}})
    assert put.status_code == 200, put.text
    [alices] = await _memory_items(w.alice, **_NOTE)
    assert alices["value"] == {"text": "secret-lyon"}
    for client, body in (
        (w.bob, {**_NOTE, "value": {}, "tenant": "acme"}),
        (w.rita, {**_NOTE, "value": {}}),
    ):
        refused = await client.put("/memory", json=body)
        assert (refused.status_code, refused.json()["code"]) == (403, "FORBIDDEN"), refused.text
    bad = await w.bob.put("/memory", json={"namespace": "a..b", "key": "k", "value": {}})
    assert (bad.status_code, bad.json()["code"]) == (400, "INVALID_REQUEST")
    assert await w.bob.delete("/memory", params=_NOTE)


async def _memory_delete(w: Walk) -> None:
    """Bob's delete of alice's key deletes nothing of hers; a reader deletes nothing."""
    await _alices_note(w)
    gone = await w.bob.delete("/memory", params=_NOTE)
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"deleted": False}
    refused = await w.rita.delete("/memory", params=_NOTE)
    assert (refused.status_code, refused.json()["code"]) == (403, "FORBIDDEN")
    assert len(await _memory_items(w.alice, **_NOTE)) == 1


ALICE_CRON = "alice-cron"


async def _alice_cron(w: Walk) -> str:
    """Alice's schedule (made once; an identical repeat is the same schedule)."""
    body = {
        "id": ALICE_CRON,
        "intervalSeconds": 3600,
        "start": {"agentType": "echo", "message": "hi"},
    }
    made = await w.alice.post("/crons", json=body)
    assert made.status_code == 200, made.text
    assert made.json()["owner"] == {"tenant": "acme", "user": "alice"}
    return ALICE_CRON


async def _cron_as_missing(call: Callable[[str], Awaitable[httpx.Response]]) -> None:
    """Bob on alice's schedule gets what he gets on a schedule that does not exist."""
    theirs, missing = await call(ALICE_CRON), await call("no-such-cron")
    assert theirs.status_code == missing.status_code == 404, theirs.text
    assert theirs.json()["error"].replace(ALICE_CRON, "no-such-cron") == missing.json()["error"]


async def _create_cron(w: Walk) -> None:
    await _alice_cron(w)
    start = {"agentType": "echo", "message": "hi"}
    # A turn of another tenant's session, or a start naming it as kin: as if it did not exist.
    await _as_missing(
        lambda sid: w.bob.post(
            "/crons", json={"intervalSeconds": 60, "turn": _body(sid, message="x")}
        )
    )
    await _as_missing(
        lambda sid: w.bob.post(
            "/crons", json={"intervalSeconds": 60, "start": {**start, "parentSessionId": sid}}
        )
    )
    posed = await w.bob.post(
        "/crons", json={"intervalSeconds": 60, "start": {**start, "owner": {"tenant": "acme"}}}
    )
    assert posed.status_code == 403, posed.text
    read_only = await w.rita.post("/crons", json={"intervalSeconds": 60, "start": start})
    assert read_only.status_code == 403, read_only.text
    taken = await w.bob.post(
        "/crons", json={"id": ALICE_CRON, "intervalSeconds": 60, "start": start}
    )
    assert taken.status_code == 409, taken.text
    mine = await w.bob.post("/crons", json={"intervalSeconds": 60, "start": start})
    assert mine.status_code == 200, mine.text
    assert mine.json()["owner"] == {"tenant": "globex", "user": "bob"}
    for_alice = await w.root.post(
        "/crons", json={"intervalSeconds": 60, "start": {**start, "owner": {"tenant": "acme"}}}
    )
    assert for_alice.status_code == 200, for_alice.text
    assert for_alice.json()["owner"] == {"tenant": "acme"}


async def _list_crons(w: Walk) -> None:
    await _alice_cron(w)
    listed = {c["id"] for c in (await w.bob.get("/crons")).json()["crons"]}
    assert ALICE_CRON not in listed
    assert ALICE_CRON in {c["id"] for c in (await w.rita.get("/crons")).json()["crons"]}
    assert ALICE_CRON in {c["id"] for c in (await w.root.get("/crons")).json()["crons"]}


async def _get_cron(w: Walk) -> None:
    await _alice_cron(w)
    await _cron_as_missing(lambda cid: w.bob.get(f"/crons/{cid}"))
    seen = await w.rita.get(f"/crons/{ALICE_CRON}")
    assert seen.status_code == 200, seen.text


async def _change_cron(w: Walk, method: str, suffix: str) -> None:
    await _alice_cron(w)
    await _cron_as_missing(lambda cid: w.bob.request(method, f"/crons/{cid}{suffix}"))
    refused = await w.rita.request(method, f"/crons/{ALICE_CRON}{suffix}")
    assert refused.status_code == 403, refused.text
    assert (await w.alice.get(f"/crons/{ALICE_CRON}")).json()["paused"] is False


PROBES: dict[tuple[str, str], Callable[[Walk], Awaitable[None]]] = {
    ("POST", "/start"): _start,
    ("POST", "/resume"): _resume,
    ("POST", "/message"): _message,
    ("POST", "/interrupt"): _interrupt,
    ("POST", "/abort"): _abort,
    ("POST", "/submit-tool-result"): _tool_result,
    ("POST", "/submit-approval"): _approval,
    ("POST", "/fork"): _fork,
    ("GET", "/diff"): _diff,
    ("GET", "/ui/diff"): lambda w: _public(w, "/ui/diff"),
    ("GET", "/sse"): _sse,
    ("POST", "/sse"): _sse_run,
    ("GET", "/status"): _status,
    ("GET", "/sessions"): _sessions,
    ("GET", "/health"): lambda w: _public(w, "/health"),
    ("GET", "/openapi.json"): lambda w: _public(w, "/openapi.json"),
    ("GET", "/ui"): lambda w: _public(w, "/ui"),
    ("GET", "/ui/assets/{name}"): lambda w: _public(w, "/ui/assets/app.js"),
    ("GET", "/snapshot"): _snapshot,
    ("GET", "/memory"): _memory_get,
    ("PUT", "/memory"): _memory_put,
    ("DELETE", "/memory"): _memory_delete,
    ("POST", "/crons"): _create_cron,
    ("GET", "/crons"): _list_crons,
    ("GET", "/crons/{cronId}"): _get_cron,
    ("DELETE", "/crons/{cronId}"): lambda w: _change_cron(w, "DELETE", ""),
    ("POST", "/crons/{cronId}/pause"): lambda w: _change_cron(w, "POST", "/pause"),
    ("POST", "/crons/{cronId}/resume"): lambda w: _change_cron(w, "POST", "/resume"),
}
"""One probe per operation of ``openapi.json``: a route added without one fails the walk."""


async def _mcp(w: Walk) -> None:
    """An MCP call runs a session its caller owns; a reader's call starts nothing."""
    for token, owner in (("tok-bob", BOB), ("tok-rita", None)):
        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
            Client(streamable_http_client(f"{w.url}/mcp", http_client=http)) as mcp,
        ):
            before = set(await w.store.list_sessions())
            result = await mcp.call_tool("echo", {"message": "hi"})
            new = set(await w.store.list_sessions()) - before
            if owner is None:
                assert result.is_error
                assert "may not write" in result.content[0].text  # type: ignore[union-attr]
                assert new == set()
            else:
                assert not result.is_error
                (session_id,) = new
                created = (await w.store.read(session_id))[0]
                assert isinstance(created, SessionCreated)
                assert created.owner == owner


async def _mcp_session(w: Walk) -> None:
    """An MCP session (the initialize handshake) is its opener's: nobody else may use it."""
    accept = {"Accept": "application/json, text/event-stream"}
    hello = {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"},
    }
    opened = await w.alice.post("/mcp", json=_rpc("initialize", hello), headers=accept)
    assert opened.status_code == 200, opened.text
    session = opened.headers["mcp-session-id"]
    listing = _rpc("tools/list", {})
    held = {**accept, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
    taken = await w.bob.post("/mcp", json=listing, headers=held)
    assert taken.status_code == 404, taken.text
    assert "echo" not in taken.text
    mine = await w.alice.post("/mcp", json=listing, headers=held)
    assert mine.status_code in (200, 202), mine.text


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


async def _a2a(w: Walk) -> None:
    """A2A: alice's task is nobody else's to get, list, cancel or continue."""
    headers = {"A2A-Version": "1.0"}
    message = {"role": "ROLE_USER", "messageId": "m-1", "parts": [{"text": "hi"}]}
    sent = await w.alice.post(
        "/a2a/solo", json=_rpc("SendMessage", {"message": message}), headers=headers
    )
    task = sent.json()["result"]["task"]
    task_id, context_id = task["id"], task["contextId"]
    created = (await w.store.read(context_id))[0]
    assert isinstance(created, SessionCreated)
    assert created.owner == ALICE
    before = await log_bytes([w.store])
    for call in (
        _rpc("GetTask", {"id": task_id}),
        _rpc("CancelTask", {"id": task_id}),
        _rpc("SubscribeToTask", {"id": task_id}),
        _rpc("SendMessage", {"message": {**message, "messageId": "m-2", "taskId": task_id}}),
    ):
        refused = await w.bob.post("/a2a/solo", json=call, headers=headers)
        assert refused.status_code == 200, refused.text
        assert "error" in refused.json(), refused.text
        assert "needs a person" not in refused.text
    # Bob's first message of the same id is his own context, not alice's.
    his = await w.bob.post(
        "/a2a/solo", json=_rpc("SendMessage", {"message": message}), headers=headers
    )
    assert his.json()["result"]["task"]["contextId"] != context_id
    listed = await w.bob.post("/a2a/solo", json=_rpc("ListTasks", {}), headers=headers)
    assert context_id not in listed.text
    theirs = await w.alice.post("/a2a/solo", json=_rpc("ListTasks", {}), headers=headers)
    assert context_id in theirs.text
    ctx = await w.bob.post(
        "/a2a/solo", json=_rpc("ListTasks", {"contextId": context_id}), headers=headers
    )
    assert ctx.json()["result"].get("tasks", []) == []
    after = await log_bytes([w.store])
    assert [log for log in after if context_id.encode() in b"".join(log)] == [
        log for log in before if context_id.encode() in b"".join(log)
    ]


async def _cards(w: Walk) -> None:
    for path in ("/.well-known/agent-card.json", "/a2a/solo/.well-known/agent-card.json"):
        await _public(w, path)


MOUNT_PROBES: dict[str, tuple[Callable[[Walk], Awaitable[None]], ...]] = {
    "/mcp": (_mcp, _mcp_session),
    "/a2a": (_a2a,),
    "/a2a/{agent_type}": (_a2a,),
    "/.well-known/agent-card.json": (_cards,),
    "/a2a/{agent_type}/.well-known/agent-card.json": (_cards,),
}
"""The entrances mounted beside the documented routes (specs/mcp.md, specs/a2a.md)."""


async def test_two_tenants_walk_every_route_and_entrance_and_see_only_their_own() -> None:
    store = MemoryEventStore()
    app = create_http_app(AgentServer(_agents(), store), auth=TOKENS, mcp=MCPOptions())
    assert all(endpoint.rule in ("public", "read", "write") for endpoint in ENDPOINTS)
    with anyio.fail_after(LIMIT):
        async with serve(app) as url:
            async with _client(url, "tok-alice") as alice, _client(url, "tok-bob") as bob:
                for client, sid in ((alice, A), (bob, B)):
                    started = await client.post(
                        "/start", json=_body(sid, agentType="solo", message="hi")
                    )
                    assert started.status_code == 200, started.text
                for sid in (A, B):
                    await until(store, sid, lambda state: state.status == "paused")
                status = (await alice.get("/status", params={"sessionId": A})).json()
            pending = {entry["kind"]: entry["toolCallId"] for entry in status["pendingInputs"]}
            walk = Walk(url, store, pending)
            try:
                document = (await walk.anonymous.get("/openapi.json")).json()
                operations = {
                    (method.upper(), path)
                    for path, item in document["paths"].items()
                    for method in item
                    if method in ("get", "post", "put", "patch", "delete")
                }
                assert operations == set(PROBES)  # every documented route has its probe
                documented = {path for _, path in operations}
                mounted = {
                    route.path
                    for route in app.routes
                    if route.path not in documented  # type: ignore[attr-defined]
                }
                assert mounted == set(MOUNT_PROBES)  # and every entrance beside them
                before = await log_bytes([store])
                for key in sorted(PROBES):
                    await PROBES[key](walk)
                after = await log_bytes([store])
                # Nothing bob tried changed a log of alice's (his own refused starts made none).
                assert [log for log in after if log and A.encode() in log[0]] == [
                    log for log in before if log and A.encode() in log[0]
                ]
                for probe in dict.fromkeys(p for ps in MOUNT_PROBES.values() for p in ps):
                    await probe(walk)
            finally:
                await walk.close()


async def test_a_reader_sees_its_tenant_without_changing_it_and_changes_are_recorded() -> None:
    store = MemoryEventStore()
    app = create_http_app(AgentServer(_agents(), store), auth=TOKENS)
    with anyio.fail_after(LIMIT):
        async with serve(app) as url:
            walk = Walk(url, store, {})
            try:
                started = await walk.alice.post(
                    "/start", json=_body(A, agentType="solo", message="hi")
                )
                assert started.status_code == 200, started.text
                await until(store, A, lambda state: state.status == "paused")
                # The reader reads alice's session, and is refused every change (403).
                seen = await walk.rita.get("/status", params={"sessionId": A})
                assert seen.status_code == 200, seen.text
                pending = {e["kind"]: e["toolCallId"] for e in seen.json()["pendingInputs"]}
                listed = (await walk.rita.get("/sessions")).json()["sessions"]
                assert [s["sessionId"] for s in listed] == [A]
                snap = await walk.rita.get("/snapshot", params={"sessionId": A})
                assert snap.status_code == 200
                before = await log_bytes([store])
                for path, body in (
                    ("/start", _body("rita-1", agentType="echo", message="x")),
                    ("/message", _body(A, message="x")),
                    ("/interrupt", _body(A)),
                    ("/abort", _body(A)),
                    ("/submit-approval", _body(A, toolCallId=pending["approval"], approved=True)),
                    ("/fork", _body(A, newSessionId="rita-fork", run=False)),
                    ("/sse?format=ag-ui&agentType=echo", {"threadId": "rita-2", "runId": "r"}),
                ):
                    refused = await walk.rita.post(path, json=body)
                    assert refused.status_code == 403, (path, refused.text)
                    assert refused.json() == {
                        "error": "this identity may not write sessions",
                        "code": "FORBIDDEN",
                    }
                assert await log_bytes([store]) == before
                # Without a token: 401 on every route but the public ones.
                assert (
                    await walk.anonymous.get("/status", params={"sessionId": A})
                ).status_code == 401
                # Alice answers: the decider is her identity, whatever her client said.
                answered = await walk.alice.post(
                    "/submit-tool-result",
                    json=_body(A, toolCallId=pending["client_tool"], result={"color": "red"}),
                )
                assert answered.status_code == 200, answered.text
                approved = await walk.alice.post(
                    "/submit-approval",
                    json=_body(
                        A, toolCallId=pending["approval"], approved=True, decidedBy="Mallory"
                    ),
                )
                assert approved.status_code == 200, approved.text
                await until(store, A, lambda state: state.is_terminal)
                # The identical repeat of an answer changes nothing, who made it included.
                settled = await log_bytes([store])
                again = await walk.alice.post(
                    "/submit-approval",
                    json=_body(A, toolCallId=pending["approval"], approved=True),
                )
                assert again.status_code == 200, again.text
                assert again.json()["resumed"] is False
                assert await log_bytes([store]) == settled
                log = await store.read(A)
            finally:
                await walk.close()
    created = log[0]
    assert isinstance(created, SessionCreated)
    assert created.owner == ALICE
    (given,) = [e for e in log if isinstance(e, ApprovalGiven)]
    assert given.decided_by == "alice"
    made = [(e.action, e.by, e.ref) for e in log if isinstance(e, RequestMade)]
    assert made == [
        ("tool_result", ALICE, pending["client_tool"]),
        ("approval", ALICE, pending["approval"]),
    ]


async def test_a_local_child_belongs_to_its_parents_owner() -> None:
    store = MemoryEventStore()
    app = create_http_app(AgentServer(_agents(), store), auth=TOKENS)
    with anyio.fail_after(LIMIT):
        async with (
            serve(app) as url,
            _client(url, "tok-alice") as alice,
            _client(url, "tok-bob") as bob,
        ):
            started = await alice.post(
                "/start", json=_body("fam-1", agentType="parent", message="go")
            )
            assert started.status_code == 200, started.text
            await until(store, "fam-1", lambda state: state.status == "paused")
            (child,) = [sid for sid in await store.list_sessions() if sid != "fam-1"]
            created = (await store.read(child))[0]
            assert isinstance(created, SessionCreated)
            assert created.owner == ALICE
            assert (await alice.get("/status", params={"sessionId": child})).status_code == 200
            refused = await bob.get("/status", params={"sessionId": child})
            assert refused.status_code == 404


async def test_a_companion_belongs_to_its_parents_owner() -> None:
    lead = companion_parent(
        [
            ScriptedLLM.call(
                "companion__spawnAgent",
                {"agent": "critic", "name": "reviewer", "initialMessage": "Review v1"},
            ),
            "thanks",
        ],
        [PersistentAgent(critic(), mode="blocking")],
    )
    store = MemoryEventStore()
    app = create_http_app(AgentServer([lead], store), auth=TOKENS)
    with anyio.fail_after(LIMIT):
        async with serve(app) as url, _client(url, "tok-alice") as alice:
            body = _body("lead-1", agentType="lead", message="go")
            started = await alice.post("/start", json=body)
            assert started.status_code == 200, started.text
            await until(store, "lead-1", lambda state: state.is_terminal)
    created = (await store.read("lead-1-agent-reviewer"))[0]
    assert isinstance(created, SessionCreated)
    assert created.owner == ALICE


async def test_a_remote_child_over_a2a_belongs_to_its_parents_owner() -> None:
    """Gateway A's root delegates over A2A to gateway B with a service (admin) token."""
    b_store, a_store = MemoryEventStore(), MemoryEventStore()
    b_tokens = {**TOKENS, "tok-svc": Identity(user="gateway-a", roles=frozenset({"admin"}))}
    b_app = create_http_app(AgentServer([worker("child", ("rm",))], b_store), auth=b_tokens)
    with anyio.fail_after(LIMIT):
        async with (
            serve(b_app) as b_url,
            A2ARemoteAgentTransport(
                f"{b_url}/a2a/child", headers={"Authorization": "Bearer tok-svc"}
            ) as to_b,
        ):
            tool = create_a2a_sub_agent_tool(
                "child", input_schema=Query, output_schema=Out, transport=to_b
            )
            a_app = create_http_app(AgentServer([root_agent(tool)], a_store), auth=TOKENS)
            async with (
                serve(a_app) as a_url,
                _client(a_url, "tok-alice") as alice,
                _client(b_url, "tok-alice") as alice_at_b,
                _client(b_url, "tok-bob") as bob_at_b,
            ):
                started = await alice.post(
                    "/start", json=_body("a2a-fam", agentType="root", message="hi")
                )
                assert started.status_code == 200, started.text
                await until(a_store, "a2a-fam", lambda state: state.status == "paused")
                (child,) = await b_store.list_sessions()
                seen = await alice_at_b.get("/status", params={"sessionId": child})
                assert seen.status_code == 200, seen.text
                refused = await bob_at_b.get("/status", params={"sessionId": child})
                assert refused.status_code == 404
    created = (await b_store.read(child))[0]
    assert isinstance(created, SessionCreated)
    assert created.owner == ALICE
