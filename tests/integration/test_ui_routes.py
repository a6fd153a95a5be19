"""The inspector's data routes over real HTTP: ``/snapshot``, its list, the page's files."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import nats
import pytest
from browser.tree_agents import build_tree
from conftest import fresh_stream_name
from nats_server import NatsServer
from pydantic import BaseModel
from servers import serve

from helix_agents import EventStore, define_agent
from helix_agents.events import MessageQueued, RunStarted, SessionCreated, SubSessionStarted
from helix_agents.log.projections import project_stream
from helix_agents.log.usage import get_usage_rollup
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime, create_http_app
from helix_agents.server.ui import fold_view, user_turns
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from helix_agents.transports.nats import NatsRemoteAgentTransport
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

TIMEOUT = 30


class Out(BaseModel):
    """A one-step agent's output."""

    done: bool


def one_step(name: str) -> Any:
    return define_agent(
        name,
        system_prompt="Answer.",
        output_schema=Out,
        llm=ScriptedLLM([ScriptedLLM.finish({"done": True}, text="ok")]),
    )


@asynccontextmanager
async def gateway(
    agents: list[Any], store: EventStore, runtime: Runtime | None = None, **options: Any
) -> AsyncIterator[httpx.AsyncClient]:
    """A gateway of ``agents`` on ``store``, its sessions run on ``runtime`` (default: built-in).

    The snapshot and the session list run on every runtime (``runtime``): they
    read the log, whoever wrote it. The other tests are the edge's own checks.
    """
    runtime = runtime or Runtime("builtin", Path())
    async with (
        runtime.server(agents, store) as server,
        serve(create_http_app(server, **options)) as url,
        httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
    ):
        yield client


async def run(client: httpx.AsyncClient, session_id: str, agent_type: str) -> None:
    """Start a session and read its stream to the end."""
    started = await client.post(
        "/start", json={"sessionId": session_id, "agentType": agent_type, "message": "go"}
    )
    assert started.status_code == 200, started.text
    async with client.stream("GET", "/sse", params={"sessionId": session_id}) as stream:
        async for text in stream.aiter_lines():
            if text in ("event: end", "event: error"):
                return
    raise AssertionError("the stream closed early")


def usage_of(node: dict[str, Any]) -> tuple[int, int, int]:
    usage = node["usage"]
    return (usage["inputTokens"], usage["outputTokens"], usage["llmCalls"])


async def test_a_snapshot_is_the_fold_of_the_log_up_to_at(runtime: Runtime) -> None:
    store = MemoryEventStore()
    tree = build_tree()
    tree.release.set()
    with anyio.fail_after(TIMEOUT):
        async with gateway([tree.lead], store, runtime) as client:
            await run(client, "snap-1", "lead")
            log = await store.read("snap-1")
            latest = log[-1].seq

            whole = (await client.get("/snapshot", params={"sessionId": "snap-1"})).json()
            assert whole["at"] == whole["latestSequence"] == latest
            assert whole["status"]["status"] == "completed"
            agents = whole["view"]["agents"]
            assert [node["status"] for node in agents.values()] == ["completed"] * 3
            # Every node's own usage, summed, is the store's rollup of the tree.
            rollup = await get_usage_rollup(store, "snap-1")
            sums = [sum(column) for column in zip(*map(usage_of, agents.values()), strict=True)]
            assert sums == [rollup.input_tokens, rollup.output_tokens, rollup.llm_calls]

            for at in (1, latest // 2, latest - 1):
                cut = await client.get("/snapshot", params={"sessionId": "snap-1", "at": at})
                body = cut.json()
                assert body["at"] == at
                assert body["latestSequence"] == latest
                cut_log = log[:at]
                expected = fold_view("snap-1", "lead", project_stream(cut_log), user_turns(cut_log))
                assert body["view"]["agents"].keys() == expected.agents.keys()
                for agent_id, node in expected.agents.items():
                    shown = body["view"]["agents"][agent_id]
                    assert len(shown["entries"]) == len(node.entries)
            beyond = await client.get("/snapshot", params={"sessionId": "snap-1", "at": 10**6})
            assert beyond.json()["at"] == latest

            # Right after the planner started, nothing of it has reached the root yet.
            spawned = next(e.seq for e in log if isinstance(e, SubSessionStarted))
            early = await client.get("/snapshot", params={"sessionId": "snap-1", "at": spawned})
            assert early.json()["status"]["status"] == "running"
            assert list(early.json()["view"]["agents"]) == ["snap-1"]


async def test_a_running_childs_usage_is_cut_where_the_root_stood() -> None:
    store = MemoryEventStore()
    tree = build_tree()
    with anyio.fail_after(TIMEOUT):
        async with gateway([tree.lead], store) as client:
            started = await client.post(
                "/start", json={"sessionId": "cut-u", "agentType": "lead", "message": "go"}
            )
            assert started.status_code == 200
            await tree.held.wait()
            held = (await client.get("/snapshot", params={"sessionId": "cut-u"})).json()
            tree.release.set()
            async with client.stream("GET", "/sse", params={"sessionId": "cut-u"}) as stream:
                async for text in stream.aiter_lines():
                    if text == "event: end":
                        break
            again = await client.get("/snapshot", params={"sessionId": "cut-u", "at": held["at"]})
            assert again.json()["view"] == held["view"]  # the past does not change
            done = (await client.get("/snapshot", params={"sessionId": "cut-u"})).json()
            writer = "cut-u-sub-call_planner-sub-call_writer"
            assert done["view"]["agents"][writer]["usage"]["llmCalls"] == 2
            if writer in held["view"]["agents"]:
                assert held["view"]["agents"][writer]["usage"]["llmCalls"] <= 1


def _echo(request: LLMRequest) -> ScriptStep:
    said = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return ScriptStep(text=" | ".join(said))


async def follow(client: httpx.AsyncClient, session_id: str) -> None:
    """Read the session's stream until its current run ends."""
    async with client.stream("GET", "/sse", params={"sessionId": session_id}) as stream:
        async for text in stream.aiter_lines():
            if text in ("event: end", "event: error"):
                return
    raise AssertionError("the stream closed early")


def root_entries(snapshot: dict[str, Any]) -> list[tuple[str, Any]]:
    view = snapshot["view"]
    return [
        (entry["kind"], entry.get("text", entry.get("output")))
        for entry in view["agents"][view["rootId"]]["entries"]
    ]


async def test_a_snapshot_shows_what_the_user_sent_each_turn_where_it_was_sent() -> None:
    """The first input, a follow-up (a new run) and one queued while a run went on."""
    store = MemoryEventStore()
    talker = define_agent("talker", llm=ScriptedLLM(_echo, chunk_words=1))
    tree = build_tree()
    with anyio.fail_after(TIMEOUT):
        async with gateway([talker, tree.lead], store) as client:
            await run(client, "talk-1", "talker")
            sent = await client.post("/message", json={"sessionId": "talk-1", "message": "more?"})
            assert sent.status_code == 200, sent.text
            await follow(client, "talk-1")
            snap = (await client.get("/snapshot", params={"sessionId": "talk-1"})).json()
            assert root_entries(snap) == [
                ("user", "go"),
                ("text", "go"),
                ("output", "go"),
                ("user", "more?"),
                ("text", "go | more?"),
                ("output", "go | more?"),
            ]
            log = await store.read("talk-1")
            turns = [
                e.seq for e in log if isinstance(e, SessionCreated | RunStarted) and e.messages
            ]
            users = [e for e in snap["view"]["agents"]["talk-1"]["entries"] if e["kind"] == "user"]
            assert [entry["seq"] for entry in users] == turns
            # Before the follow-up was sent, the view shows only the first turn.
            before = {"sessionId": "talk-1", "at": turns[1] - 1}
            earlier = (await client.get("/snapshot", params=before)).json()
            assert root_entries(earlier) == root_entries(snap)[:3]

            # A message sent while the run goes on is shown where it arrived.
            started = await client.post(
                "/start", json={"sessionId": "q-1", "agentType": "lead", "message": "go"}
            )
            assert started.status_code == 200, started.text
            await tree.held.wait()
            queued = await client.post("/message", json={"sessionId": "q-1", "message": "hurry"})
            assert queued.json()["queued"] is True
            tree.release.set()
            await follow(client, "q-1")
            log = await store.read("q-1")
            (arrived,) = [e.seq for e in log if isinstance(e, MessageQueued)]
            snap = (await client.get("/snapshot", params={"sessionId": "q-1"})).json()
            entries = snap["view"]["agents"]["q-1"]["entries"]
            kinds = [(entry["kind"], entry.get("text")) for entry in entries]
            assert kinds.count(("user", "go")) == kinds.count(("user", "hurry")) == 1
            assert kinds[0] == ("user", "go")
            # What came before it on the stream, and only that, is above it.
            cut = fold_view("q-1", "lead", project_stream(log[: arrived - 1]))
            position = kinds.index(("user", "hurry"))
            assert position == 1 + len(cut.agents["q-1"].entries)
            assert entries[position]["seq"] == arrived


async def test_the_list_names_each_sub_agents_session_and_its_parent() -> None:
    """Without ``topLevel``, the list the page's toggle reads holds the children too."""
    store = MemoryEventStore()
    tree = build_tree()
    tree.release.set()
    with anyio.fail_after(TIMEOUT):
        async with gateway([tree.lead], store) as client:
            await run(client, "kids-1", "lead")
            every = (await client.get("/sessions")).json()["sessions"]
            roots = (await client.get("/sessions", params={"topLevel": "true"})).json()
    planner = "kids-1-sub-call_planner"
    writer = f"{planner}-sub-call_writer"
    assert {row["sessionId"]: row["parentSessionId"] for row in every} == {
        "kids-1": None,
        planner: "kids-1",
        writer: planner,
    }
    assert {row["rootSessionId"] for row in every} == {"kids-1"}
    assert [row["sessionId"] for row in roots["sessions"]] == ["kids-1"]


@pytest.mark.parametrize(
    ("params", "status", "code"),
    [
        ({"sessionId": "nope"}, 404, "NOT_FOUND"),
        ({"sessionId": "a/b"}, 400, "INVALID_REQUEST"),
        ({}, 400, "INVALID_REQUEST"),
        ({"sessionId": "s", "at": "0"}, 400, "INVALID_REQUEST"),
        ({"sessionId": "s", "at": "-3"}, 400, "INVALID_REQUEST"),
        ({"sessionId": "s", "at": "x"}, 400, "INVALID_REQUEST"),
    ],
)
async def test_a_bad_snapshot_request_is_refused(
    params: dict[str, str], status: int, code: str
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with gateway([one_step("a")], MemoryEventStore()) as client:
            await run(client, "s", "a")
            answer = await client.get("/snapshot", params=params)
            assert answer.status_code == status
            assert answer.json()["code"] == code


async def test_the_list_the_page_reads_pages_roots_newest_first_and_filters(
    runtime: Runtime,
) -> None:
    """The page lists ``GET /sessions?topLevel=true`` (``specs/ui.md``): roots only."""
    store = MemoryEventStore()
    tree = build_tree()
    tree.release.set()
    with anyio.fail_after(TIMEOUT):
        async with gateway([one_step("a"), one_step("b"), tree.lead], store, runtime) as client:
            # Ids of this test alone: on Temporal a workflow id is the session id, and
            # another test's workflow still open under the same id would take the start.
            tag = uuid.uuid4().hex[:8]
            order = [f"{tag}-s{number}" for number in range(1, 6)]
            for index, session_id in enumerate(order):
                await run(client, session_id, "a" if index % 2 == 0 else "b")
            await run(client, f"{tag}-tree", "lead")  # its two children are not rows

            seen: list[str] = []
            cursor: str | None = None
            pages = 0
            while True:
                params = {
                    "limit": "2",
                    "topLevel": "true",
                    **({"cursor": cursor} if cursor else {}),
                }
                page = (await client.get("/sessions", params=params)).json()
                pages += 1
                seen += [row["sessionId"] for row in page["sessions"]]
                cursor = page["nextCursor"]
                if cursor is None:
                    break
            assert seen == [f"{tag}-tree", *reversed(order)]
            assert pages == 3

            only_b = (
                await client.get("/sessions", params={"agent": "b", "topLevel": "true"})
            ).json()
            assert [row["sessionId"] for row in only_b["sessions"]] == [order[3], order[1]]
            row = only_b["sessions"][0]
            assert row["status"] == "completed"
            assert row["updatedTs"] >= row["createdTs"]
            failed = (await client.get("/sessions", params={"status": "failed"})).json()
            assert failed == {"sessions": [], "nextCursor": None}

            bad_params: list[dict[str, str]] = [
                {"status": "done"},
                {"limit": "0"},
                {"limit": "501"},
                {"cursor": "zz"},
                {"topLevel": "maybe"},
            ]
            for bad in bad_params:
                answer = await client.get("/sessions", params=bad)
                assert answer.status_code == 400, bad
                assert answer.json()["code"] == "INVALID_REQUEST"


async def test_the_page_is_open_and_the_data_needs_the_token() -> None:
    with anyio.fail_after(TIMEOUT):
        async with gateway([one_step("a")], MemoryEventStore(), auth=["sekrit"]) as client:
            page = await client.get("/ui")
            assert page.status_code == 200
            assert page.headers["content-type"].startswith("text/html")
            assert 'src="ui/assets/app.js"' in page.text
            script = await client.get("/ui/assets/app.js")
            assert script.headers["content-type"].startswith("text/javascript")
            assert (await client.get("/ui/assets/secret.py")).status_code == 404
            # The page is /ui; its assets are only what it loads.
            assert (await client.get("/ui/assets/index.html")).status_code == 404
            for path in ("/snapshot?sessionId=s", "/sessions"):
                refused = await client.get(path)
                assert refused.status_code == 401
                assert refused.json()["code"] == "UNAUTHORIZED"
            allowed = await client.get("/sessions", headers={"Authorization": "Bearer sekrit"})
            assert allowed.json() == {"sessions": [], "nextCursor": None}


async def test_a_gateway_without_a_store_says_so() -> None:
    with anyio.fail_after(TIMEOUT):
        async with (
            gateway([one_step("a")], MemoryEventStore()) as inner,
            HttpRemoteAgentTransport(str(inner.base_url)) as transport,
            serve(create_http_app(transport)) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            answer = await client.get("/snapshot", params={"sessionId": "s"})
            assert answer.status_code == 404
            assert "no event store" in answer.json()["error"]
            assert (await client.get("/ui")).status_code == 200


@pytest.mark.nats
async def test_the_nats_gateway_serves_the_inspector(nats_server: NatsServer) -> None:
    tree = build_tree()
    tree.release.set()
    stream = fresh_stream_name()
    host_store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    gateway_store = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    host_nc = await nats.connect(nats_server.url)
    gateway_nc = await nats.connect(nats_server.url)
    try:
        with anyio.fail_after(TIMEOUT):
            async with NatsAgentHost(
                AgentServer([tree.lead], host_store, runtime=NatsRuntime(host_nc))
            ):
                fleet = NatsRemoteAgentTransport(gateway_nc, gateway_store, timeout=5)
                async with (
                    serve(create_http_app(fleet)) as url,
                    httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
                ):
                    await run(client, "fleet-1", "lead")
                    listed = (await client.get("/sessions", params={"topLevel": "true"})).json()
                    assert [row["sessionId"] for row in listed["sessions"]] == ["fleet-1"]
                    snap = (await client.get("/snapshot", params={"sessionId": "fleet-1"})).json()
                    agents = snap["view"]["agents"]
                    assert [node["agentType"] for node in agents.values()] == [
                        "lead",
                        "planner",
                        "writer",
                    ]
                    assert all(node["usage"]["llmCalls"] == 2 for node in agents.values())
    finally:
        await gateway_nc.close()
        await host_nc.close()
        await gateway_store.close()
        await host_store.close()
