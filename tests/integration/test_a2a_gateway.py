"""Agents out over A2A: the gateway's A2A endpoints, driven by a2a-sdk's own client.

Real uvicorn on loopback, the real SDK client (its card resolver, its
JSON-RPC transport, its SSE parsing). specs/a2a.md is what these check:
cards, a task's stream, follow-ups, retries, cancel as interrupt, a cut
stream resumed without a gap, auth, and a gateway without the SDK.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import httpx
import pytest
from a2a.client import A2ACardResolver, A2AClientError, ClientConfig, ClientFactory
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import (
    InvalidParamsError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a_kit import TYPED_OUTPUT, Gate, a2a_client, collect, gateway, user_message
from tcp_proxy import tcp_proxy

from helix_agents.a2a import EXTENSION_URI
from helix_agents.bridges.a2a.wire import helix_metadata, part_value
from helix_agents.events import RunStarted
from helix_agents.log import project_state

pytestmark = pytest.mark.slow

LIMIT = 30
ROOT = Path(__file__).parents[2]


def _sequence(item: StreamResponse) -> int:
    payload = getattr(item, item.WhichOneof("payload"))
    found = helix_metadata(payload.metadata)["sequence"]
    assert isinstance(found, int)
    return found


def _chunk_type(item: StreamResponse) -> str | None:
    payload = getattr(item, item.WhichOneof("payload"))
    raw = helix_metadata(payload.metadata).get("chunk")
    return json.loads(raw)["type"] if isinstance(raw, str) else None


def _appended_text(items: list[StreamResponse]) -> str:
    """The ``response`` artifact's text as the updates build it."""
    text = ""
    for item in items:
        if (
            item.HasField("artifact_update")
            and item.artifact_update.artifact.artifact_id == "response"
        ):
            chunk = "".join(part.text for part in item.artifact_update.artifact.parts)
            text = text + chunk if item.artifact_update.append else chunk
    return text


def _artifact_text(task: Task, artifact_id: str) -> str:
    return "".join(
        part.text for a in task.artifacts if a.artifact_id == artifact_id for part in a.parts
    )


async def test_cards_list_every_agent_and_point_at_its_endpoint() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _), httpx.AsyncClient() as http:
            root = (await http.get(f"{url}/.well-known/agent-card.json")).json()
            card = (await http.get(f"{url}/a2a/writer/.well-known/agent-card.json")).json()
            missing = await http.get(f"{url}/a2a/nobody/.well-known/agent-card.json")
            call = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x~y"}}
            nobody = await http.post(f"{url}/a2a/nobody", json=call)
    assert {skill["id"] for skill in root["skills"]} == {
        "writer",
        "typed",
        "gated",
        "gated_out",
        "memo",
        "child",
        "approver",
    }
    assert root["supportedInterfaces"][0]["url"] == f"{url}/a2a"
    assert card["name"] == "writer"
    assert card["description"] == "writes four words"
    assert card["supportedInterfaces"] == [
        {"url": f"{url}/a2a/writer", "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}
    ]
    assert card["capabilities"]["streaming"] is True
    assert [ext["uri"] for ext in card["capabilities"]["extensions"]] == [EXTENSION_URI]
    assert "securitySchemes" not in card  # no token set: nothing to present
    assert missing.status_code == 404
    assert missing.json()["code"] == "NOT_FOUND"
    assert nobody.status_code == 404
    assert nobody.json()["error"]["code"] == -32601


async def test_a_streamed_message_opens_a_context_and_its_task_streams_from_the_log() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "writer")
            items = await collect(
                client.send_message(SendMessageRequest(message=user_message("write")))
            )
            first = items[0].task
            fetched = await client.get_task(GetTaskRequest(id=first.id))
            listed = await client.list_tasks(ListTasksRequest(context_id=first.context_id))
            log = await store.read(first.context_id)
    # The first event is the task, working, with the user's message.
    assert items[0].HasField("task")
    assert first.status.state == TaskState.TASK_STATE_WORKING
    assert [m.parts[0].text for m in first.history] == ["write"]
    assert first.history[0].message_id == "m-1"
    # Its text streams as appended chunks of the response artifact, then the output, then done.
    assert _appended_text(items) == "alpha beta gamma delta"
    deltas = [i for i in items if i.HasField("artifact_update")]
    assert len(deltas) == 5  # four words, then the output artifact
    assert deltas[-1].artifact_update.artifact.artifact_id == "output"
    assert items[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    sequences = [_sequence(i) for i in items[1:]]
    assert sequences == sorted(set(sequences))  # log positions: increasing, none twice
    # The context is a session (created by this message), the task its first run.
    state = project_state(log)
    assert state.status == "completed"
    assert state.metadata["a2a.messageId"] == "m-1"
    assert first.id == f"{first.context_id}~{state.run_id}"
    assert fetched.status.state == TaskState.TASK_STATE_COMPLETED
    assert _artifact_text(fetched, "response") == "alpha beta gamma delta"
    assert _artifact_text(fetched, "output") == "alpha beta gamma delta"
    assert [t.id for t in listed.tasks] == [first.id]


async def test_the_root_endpoint_serves_every_agent_by_skill() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            card = await A2ACardResolver(http, url).get_agent_card()
            client = ClientFactory(ClientConfig(streaming=False, httpx_client=http)).create(card)
            named = user_message("go")
            named.metadata.update({"skillId": "typed"})
            (item,) = await collect(client.send_message(SendMessageRequest(message=named)))
            unnamed = SendMessageRequest(message=user_message(message_id="m-2"))
            with pytest.raises(InvalidParamsError):  # several agents: which one?
                await collect(client.send_message(unnamed))
            rooted = await client.get_task(GetTaskRequest(id=item.task.id))
            writer = await a2a_client(http, url, "writer")
            with pytest.raises(TaskNotFoundError):  # another agent's endpoint knows it not
                await writer.get_task(GetTaskRequest(id=item.task.id))
            state = project_state(await store.read(item.task.context_id))
            sessions = await store.list_sessions()
    assert card.supported_interfaces[0].url == f"{url}/a2a"
    assert item.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert state.agent_type == "typed"
    assert sessions == [item.task.context_id]
    assert rooted.id == item.task.id  # the root endpoint finds any agent's task


async def test_a_blocking_send_returns_the_ended_task_with_its_typed_output() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "typed", streaming=False)
            (item,) = await collect(
                client.send_message(SendMessageRequest(message=user_message("go")))
            )
    task = item.task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    (output,) = [a for a in task.artifacts if a.artifact_id == "output"]
    assert part_value(output.parts[0]) == TYPED_OUTPUT  # 42 stays an int


async def test_return_immediately_answers_while_the_task_works() -> None:
    gate = Gate()
    with anyio.fail_after(LIMIT):
        async with gateway(gate) as (url, _), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "gated", streaming=False)
            request = SendMessageRequest(
                message=user_message("go"),
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            (item,) = await collect(client.send_message(request))
            await gate.entered.wait()
            streaming = await a2a_client(http, url, "gated")
            rest: list[StreamResponse] = []
            async for update in streaming.subscribe(SubscribeToTaskRequest(id=item.task.id)):
                rest.append(update)
                gate.release.set()  # it is watched: let it finish
    assert item.task.status.state == TaskState.TASK_STATE_WORKING
    assert rest[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_a_new_message_in_a_context_is_a_follow_up_turn_with_its_memory() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "memo", streaming=False)
            (one,) = await collect(
                client.send_message(SendMessageRequest(message=user_message("first")))
            )
            context = one.task.context_id
            follow = user_message("second", message_id="m-2", context_id=context)
            (two,) = await collect(client.send_message(SendMessageRequest(message=follow)))
            listed = await client.list_tasks(ListTasksRequest(context_id=context))
            log = await store.read(context)
    assert _artifact_text(one.task, "output") == "turn 1: first"
    assert two.task.context_id == context
    assert two.task.id != one.task.id  # a new turn is a new task ...
    assert _artifact_text(two.task, "output") == "turn 2: second"  # ... of the same session
    users = [m.parts[0].text for m in two.task.history if m.role == Role.ROLE_USER]
    assert users == ["second"]
    modes = [e.mode for e in log if isinstance(e, RunStarted)]
    assert modes == ["start", "continue"]
    assert [t.id for t in listed.tasks] == [one.task.id, two.task.id]


async def test_a_retried_message_starts_nothing_twice() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "memo", streaming=False)
            request = SendMessageRequest(message=user_message("first", message_id="same"))
            (one,) = await collect(client.send_message(request))
            (again,) = await collect(client.send_message(request))
            context = one.task.context_id
            follow = SendMessageRequest(
                message=user_message("second", message_id="m-2", context_id=context)
            )
            (two,) = await collect(client.send_message(follow))
            (two_again,) = await collect(client.send_message(follow))
            sessions = await store.list_sessions()
            log = await store.read(context)
    assert again.task.id == one.task.id
    assert two_again.task.id == two.task.id
    assert sessions == [context]
    assert [e.mode for e in log if isinstance(e, RunStarted)] == ["start", "continue"]


async def test_cancel_is_an_interrupt_and_a_new_message_resumes_the_context() -> None:
    gate = Gate()
    with anyio.fail_after(LIMIT):
        async with gateway(gate) as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "gated", streaming=False)
            request = SendMessageRequest(
                message=user_message("go"),
                configuration=SendMessageConfiguration(return_immediately=True),
            )
            (item,) = await collect(client.send_message(request))
            await gate.entered.wait()
            canceled = await client.cancel_task(CancelTaskRequest(id=item.task.id))
            state = project_state(await store.read(item.task.context_id))
            with pytest.raises(TaskNotCancelableError):
                await client.cancel_task(CancelTaskRequest(id=item.task.id))
            gate.release.set()
            again = user_message("go on", message_id="m-2", context_id=item.task.context_id)
            (resumed,) = await collect(client.send_message(SendMessageRequest(message=again)))
    assert canceled.status.state == TaskState.TASK_STATE_CANCELED
    assert state.status == "interrupted"  # soft: the session can go on
    assert resumed.task.id != item.task.id
    assert resumed.task.status.state == TaskState.TASK_STATE_COMPLETED
    assert _artifact_text(resumed.task, "output") == "after the gate"


async def test_a_cut_stream_resubscribed_resumes_without_a_gap() -> None:
    gate = Gate()
    with anyio.fail_after(LIMIT):
        async with gateway(gate) as (url, _), tcp_proxy(url) as proxy:
            async with httpx.AsyncClient() as http:
                client = await a2a_client(http, proxy.url, "gated")
                before: list[StreamResponse] = []

                async def read_until_cut() -> None:
                    request = SendMessageRequest(message=user_message("go"))
                    async for item in client.send_message(request):
                        before.append(item)
                        if _chunk_type(item) == "tool_start":  # it reached the gate: cut
                            assert proxy.cut_all() >= 1

                with pytest.raises(A2AClientError):
                    await read_until_cut()
            async with httpx.AsyncClient() as http:
                client = await a2a_client(http, proxy.url, "gated")
                after: list[StreamResponse] = []
                request = SubscribeToTaskRequest(id=before[0].task.id)
                async for item in client.subscribe(request):
                    after.append(item)
                    gate.release.set()  # subscribed again: let the run go on
    held = _appended_text(before)
    snapshot = after[0].task
    assert held == "before the gate"
    assert _artifact_text(snapshot, "response").startswith(held)  # nothing before the cut lost
    resumed = _artifact_text(snapshot, "response") + _appended_text(after[1:])
    assert resumed == "before the gateafter the gate"  # the gate's text, then the rest, once
    later = [_sequence(i) for i in after[1:]]
    assert later == sorted(set(later))
    assert min(later) > helix_metadata(snapshot.metadata)["sequence"]  # only what came after
    assert after[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_an_ended_task_cannot_be_subscribed_to() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "writer")
            items = await collect(client.send_message(SendMessageRequest(message=user_message())))
            with pytest.raises(UnsupportedOperationError):
                await collect(client.subscribe(SubscribeToTaskRequest(id=items[0].task.id)))


async def test_the_a2a_routes_sit_behind_the_token_and_the_cards_say_so() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway(auth=["s3cret"]) as (url, store):
            async with httpx.AsyncClient() as http:
                card = (await http.get(f"{url}/a2a/writer/.well-known/agent-card.json")).json()
                refused = await http.post(
                    f"{url}/a2a/writer", json={"jsonrpc": "2.0", "id": 1, "method": "GetTask"}
                )
            headers = {"Authorization": "Bearer s3cret"}
            async with httpx.AsyncClient(headers=headers) as http:
                client = await a2a_client(http, url, "writer")
                items = await collect(
                    client.send_message(SendMessageRequest(message=user_message()))
                )
            sessions = await store.list_sessions()
    assert card["securitySchemes"] == {
        "bearer": {
            "httpAuthSecurityScheme": {
                "scheme": "bearer",
                "description": "the gateway's bearer token",
            }
        }
    }
    assert card["securityRequirements"] == [{"schemes": {"bearer": {}}}]
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer")
    assert items[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert len(sessions) == 1


async def test_an_a2a_0_3_client_is_served_on_the_same_endpoint() -> None:
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "message/send",
        "params": {
            "message": {
                "kind": "message",
                "role": "user",
                "messageId": "old-1",
                "parts": [{"kind": "text", "text": "hi"}],
            }
        },
    }
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _), httpx.AsyncClient() as http:
            answer = (await http.post(f"{url}/a2a/writer", json=body)).json()
    assert answer["id"] == 7
    assert answer["result"]["kind"] == "task"
    assert answer["result"]["status"]["state"] == "completed"


def test_the_gateway_serves_its_own_protocol_without_a2a_sdk() -> None:
    script = """
import sys
sys.modules["a2a"] = None  # as if the a2a extra were not installed
import anyio, httpx
from helix_agents import define_agent
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
app = create_http_app(AgentServer([define_agent("w", llm=ScriptedLLM(["hi"]))], MemoryEventStore()))
paths = [getattr(route, "path", "") for route in app.routes]
assert not [p for p in paths if "a2a" in p or "agent-card" in p], paths
async def main():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        assert (await client.get("/health")).json()["agents"] == ["w"]
        assert (await client.get("/.well-known/agent-card.json")).status_code == 404
anyio.run(main)
print("ok")
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_a_gateway_loads_a2a_sdk_only_when_a2a_is_asked_for() -> None:
    script = """
import json, sys
import anyio, httpx
from helix_agents import define_agent
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
app = create_http_app(AgentServer([define_agent("w", llm=ScriptedLLM(["hi"]))], MemoryEventStore()))
def loaded():
    return sorted({name.split(".")[0] for name in sys.modules} & {"a2a", "opentelemetry"})
before = loaded()
async def main():
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        assert (await client.get("/health")).status_code == 200
        mounted = loaded()
        card = await client.get("/a2a/w/.well-known/agent-card.json")
        assert card.json()["name"] == "w"
    print(json.dumps([before, mounted, loaded()]))
anyio.run(main)
"""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    before, mounted, after = json.loads(result.stdout)
    assert before == mounted == []  # the routes are mounted, nothing of the SDK is loaded
    assert "a2a" in after  # the first card read loaded it
