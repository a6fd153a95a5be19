"""People in the loop over A2A, and bad input at the A2A endpoints (a2a-sdk's client, uvicorn).

A pending client tool or approval is the task's ``input-required`` state: the
stream closes there, its status message lists the pending inputs, and the
next message answers them. Every bad request gets A2A's own JSON-RPC error
and changes nothing: no session is created, no log grows.
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from a2a.types import (
    GetTaskRequest,
    SendMessageRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    TaskState,
)
from a2a.utils.errors import InvalidParamsError, TaskNotFoundError, UnsupportedOperationError
from a2a_kit import a2a_client, collect, gateway, user_message
from hitl_app import ASK_ARGS, RM_ARGS, removed

from helix_agents import EventStore
from helix_agents.bridges.a2a.wire import part_value
from helix_agents.events import ApprovalGiven
from helix_agents.log import project_state

pytestmark = pytest.mark.slow

LIMIT = 30
TEAL = {"color": "teal"}


def _pending(item: StreamResponse) -> list[dict[str, Any]]:
    """The pending inputs an ``input-required`` status lists (its data part)."""
    message = item.status_update.status.message
    (data,) = [part_value(p) for p in message.parts if p.WhichOneof("content") == "data"]
    entries: list[dict[str, Any]] = data["pendingInputs"]
    return entries


async def _log_sizes(store: EventStore) -> dict[str, int]:
    return {sid: len(await store.read(sid)) for sid in await store.list_sessions()}


async def test_a_pending_client_tool_and_approval_are_input_required_answered_by_a_message() -> (
    None
):
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "child")
            first = await collect(client.send_message(SendMessageRequest(message=user_message())))
            task = first[0].task
            waiting = first[-1]
            fetched = await client.get_task(GetTaskRequest(id=task.id))
            entries = {e["kind"]: e for e in _pending(waiting)}
            answer = user_message(
                None,
                message_id="answer-1",
                task_id=task.id,
                data=[
                    {
                        "toolCallId": entries["client_tool"]["toolCallId"],
                        "result": {"color": "teal"},
                    },
                    {
                        "toolCallId": entries["approval"]["toolCallId"],
                        "approved": True,
                        "decidedBy": "Ada",
                    },
                ],
            )
            rest = await collect(client.send_message(SendMessageRequest(message=answer)))
            log = await store.read(task.context_id)
            state = project_state(log)
    # The stream closed at input-required; the task waits, and says for what.
    assert waiting.status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert fetched.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert entries["client_tool"]["toolName"] == "ask_user"
    assert entries["client_tool"]["arguments"] == ASK_ARGS
    assert entries["approval"]["toolName"] == "rm"
    assert entries["approval"]["arguments"] == RM_ARGS
    text = waiting.status_update.status.message.parts[0].text
    assert "ask_user" in text
    assert "approve or deny rm" in text
    # The answer continued the same task to its end.
    assert rest[0].task.id == task.id
    assert rest[0].task.status.state == TaskState.TASK_STATE_WORKING
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert removed == [RM_ARGS["question"]]
    assert state.status == "completed"
    assert state.output == {"answer": 'ask_user={"color":"teal"}; rm={"removed":"/tmp/scratch"}'}
    # Who decided, as the data part named them, is on the session's approval_given.
    (given,) = [e for e in log if isinstance(e, ApprovalGiven)]
    assert (given.approved, given.decided_by) == (True, "Ada")


@pytest.mark.parametrize(("word", "approved"), [("yes", True), ("No.", False)])
async def test_a_single_approval_is_answered_by_a_yes_or_no(word: str, approved: bool) -> None:
    removed.clear()
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "approver")
            first = await collect(client.send_message(SendMessageRequest(message=user_message())))
            context = first[0].task.context_id
            answer = user_message(word, message_id="answer-1", context_id=context)
            rest = await collect(client.send_message(SendMessageRequest(message=answer)))
            state = project_state(await store.read(context))
    assert first[-1].status_update.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert removed == ([RM_ARGS["question"]] if approved else [])
    assert state.status == "completed"


async def test_a_resubscription_to_a_waiting_task_shows_it_and_closes() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, _), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "approver")
            first = await collect(client.send_message(SendMessageRequest(message=user_message())))
            again = await collect(client.subscribe(SubscribeToTaskRequest(id=first[0].task.id)))
    (snapshot,) = again
    assert snapshot.task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    assert snapshot.task.status.message.parts[0].text.startswith("Waiting for approve or deny rm")


def _rpc(method: str, params: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}


def _send(parts: list[dict[str, Any]], **message: Any) -> dict[str, Any]:
    return _rpc(
        "SendMessage",
        {"message": {"role": "ROLE_USER", "messageId": "bad-1", "parts": parts, **message}},
    )


BAD = [
    pytest.param(_send([{"kind": "weird"}]), -32602, id="a-part-of-an-unknown-kind"),
    pytest.param(_send([]), -32602, id="no-parts"),
    pytest.param(_send([{"text": "  "}]), -32602, id="an-empty-message"),
    pytest.param(
        _send([{"url": "https://example.com/x.pdf", "mediaType": "application/pdf"}]),
        -32005,
        id="a-file-part",
    ),
    pytest.param(_send([{"text": "hi"}], role="ROLE_AGENT"), -32602, id="an-agent-message"),
    pytest.param(_send([{"text": "hi"}], contextId="bad id/with spaces"), -32602, id="bad-context"),
    pytest.param(_send([{"text": "hi"}], taskId="nobody~run-1"), -32001, id="unknown-task"),
    pytest.param(_send([{"text": "x" * 70_000}]), -32600, id="an-oversized-part"),
    pytest.param(_rpc("GetTask", {"id": "no-such-task"}), -32001, id="get-unknown-task"),
    pytest.param(_rpc("CancelTask", {"id": "a~run-1"}), -32001, id="cancel-unknown-task"),
    pytest.param(_rpc("NoSuchMethod", {}), -32601, id="unknown-method"),
    pytest.param(
        _rpc("SendMessage", {"message": {"role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
        -32602,
        id="no-message-id",
    ),
    pytest.param(
        _rpc(
            "SendMessage",
            {
                "message": {"role": "ROLE_USER", "messageId": "b", "parts": [{"text": "hi"}]},
                "configuration": {"acceptedOutputModes": ["image/png"]},
            },
        ),
        -32005,
        id="no-output-mode-in-common",
    ),
    pytest.param(
        _rpc(
            "SendMessage",
            {
                "message": {"role": "ROLE_USER", "messageId": "b", "parts": [{"text": "hi"}]},
                "configuration": {"taskPushNotificationConfig": {"url": "http://x"}},
            },
        ),
        -32003,
        id="a-push-config-in-a-message",
    ),
    pytest.param(_rpc("GetExtendedAgentCard", {}), -32007, id="extended-card"),
    pytest.param(
        _rpc("CreateTaskPushNotificationConfig", {"taskId": "a~run-1", "url": "http://x"}),
        -32003,
        id="push-notifications",
    ),
]


@pytest.mark.parametrize(("body", "code"), BAD)
async def test_bad_input_gets_a2a_s_own_error_and_changes_nothing(
    body: dict[str, Any], code: int
) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            gateway(max_body_bytes=64 * 1024) as (url, store),
            httpx.AsyncClient(headers={"A2A-Version": "1.0"}) as http,
        ):
            client = await a2a_client(http, url, "writer")
            seeded = await collect(client.send_message(SendMessageRequest(message=user_message())))
            before = await _log_sizes(store)
            response = await http.post(f"{url}/a2a/writer", json=body)
            after = await _log_sizes(store)
    assert seeded[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED
    assert response.status_code == 200
    assert response.json()["error"]["code"] == code
    assert after == before


async def test_a_message_to_an_ended_task_or_another_agents_context_is_refused() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            writer = await a2a_client(http, url, "writer")
            memo = await a2a_client(http, url, "memo")
            items = await collect(writer.send_message(SendMessageRequest(message=user_message())))
            task = items[0].task
            before = await _log_sizes(store)
            to_ended = user_message("more", message_id="m-2", task_id=task.id)
            with pytest.raises(UnsupportedOperationError):
                await collect(writer.send_message(SendMessageRequest(message=to_ended)))
            elsewhere = user_message("hi", message_id="m-3", context_id=task.context_id)
            with pytest.raises(InvalidParamsError):
                await collect(memo.send_message(SendMessageRequest(message=elsewhere)))
            with pytest.raises(TaskNotFoundError):
                await memo.get_task(GetTaskRequest(id=task.id))
            after = await _log_sizes(store)
    assert after == before


async def test_an_answer_that_fits_no_pending_input_is_refused_and_changes_nothing() -> None:
    with anyio.fail_after(LIMIT):
        async with gateway() as (url, store), httpx.AsyncClient() as http:
            client = await a2a_client(http, url, "child")
            first = await collect(client.send_message(SendMessageRequest(message=user_message())))
            task = first[0].task
            before = await _log_sizes(store)
            vague = user_message("teal", message_id="a-1", task_id=task.id)  # two are open
            with pytest.raises(InvalidParamsError):
                await collect(client.send_message(SendMessageRequest(message=vague)))
            unknown = user_message(
                None, message_id="a-2", task_id=task.id, data=[{"toolCallId": "x", "result": 1}]
            )
            with pytest.raises(InvalidParamsError):
                await collect(client.send_message(SendMessageRequest(message=unknown)))
            after = await _log_sizes(store)
    assert after == before
