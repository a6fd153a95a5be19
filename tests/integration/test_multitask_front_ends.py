"""A second user message while a response streams, through the AI SDK and AG-UI entrances.

The front end posts its next message to ``POST /sse`` while the first answer
still streams (``tests/integration/test_multitask.py``'s tree, its grandchild
napping): the message follows its ``multitask`` choice, carried by the AI
SDK's body (``useChat``'s ``body`` option: ``{"multitask": ...}``) or AG-UI's
``forwardedProps.multitask``. Real HTTP: uvicorn on 127.0.0.1, httpx.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from servers import serve

from helix_agents.events import MessageQueued, RunSuperseded, ToolStart
from helix_agents.log import project_state
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import wait_for
from tests.integration.test_multitask import GRANDCHILD, RELEASED, _agents

LIMIT = 60

JS = Path(__file__).resolve().parents[1] / "js"
NODE = shutil.which("node")
_INSTALLED = (JS / "node_modules" / "ai").is_dir() and (JS / "node_modules" / "@ag-ui").is_dir()
needs_js = pytest.mark.skipif(
    (NODE is None or not _INSTALLED) and os.environ.get("HELIX_REQUIRE_JS") != "1",
    reason=f"needs node and `npm ci` in {JS}",
)


def _body(fmt: str, session_id: str, texts: list[str], multitask: str | None) -> dict[str, Any]:
    """The client's run: its user messages ``texts``, in ``fmt``'s shape, with the choice."""
    if fmt == "ag-ui":
        body: dict[str, Any] = {
            "threadId": session_id,
            "runId": f"run-{len(texts)}",
            "messages": [
                {"id": f"u{n}", "role": "user", "content": text} for n, text in enumerate(texts)
            ],
        }
        if multitask is not None:
            body["forwardedProps"] = {"multitask": multitask}
        return body
    body = {
        "id": session_id,
        "messages": [
            {"id": f"u{n}", "role": "user", "parts": [{"type": "text", "text": text}]}
            for n, text in enumerate(texts)
        ],
    }
    if multitask is not None:
        body["multitask"] = multitask
    return body


def _said(text: str) -> str:
    frames = [
        json.loads(line[5:])
        for line in text.splitlines()
        if line.startswith("data:") and line != "data: [DONE]"
    ]
    return "".join(
        f.get("delta", "") for f in frames if f["type"] in ("TEXT_MESSAGE_CONTENT", "text-delta")
    )


@pytest.mark.parametrize(
    ("fmt", "multitask", "answer"),
    [
        ("ai-sdk", "interrupt", "second done: go | second"),
        ("ag-ui", "rollback", "second done: second"),
        ("ag-ui", "enqueue", "second done: go | second"),
        ("ai-sdk", "steer", "second done: go | second"),
    ],
)
async def test_a_second_message_while_streaming_follows_its_choice(
    fmt: str, multitask: str, answer: str
) -> None:
    """The second request's stream is the turn its choice gives the message (``steer``: the
    rest of the run that takes it in); the first request's stream ends."""
    sid = f"fe-{fmt}-{multitask}"
    store = MemoryEventStore()
    first: dict[str, str] = {}
    with anyio.fail_after(LIMIT):
        async with (
            AgentServer(_agents(), store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url, timeout=LIMIT) as client,
        ):

            async def read_first() -> None:
                body = _body(fmt, sid, ["go"], None)
                reply = await client.post(f"/sse?format={fmt}&agentType=boss", json=body)
                first["text"] = reply.text

            async with anyio.create_task_group() as tg:
                tg.start_soon(read_first)
                await wait_for(
                    store,
                    GRANDCHILD.format(sid),
                    lambda e: isinstance(e, ToolStart) and e.tool_name == "nap",
                )
                if multitask in ("enqueue", "steer"):
                    # The run can end only once the nap does.
                    async def release() -> None:
                        await wait_for(store, sid, lambda e: isinstance(e, MessageQueued))
                        RELEASED.add(sid)

                    tg.start_soon(release)
                second = await client.post(
                    f"/sse?format={fmt}", json=_body(fmt, sid, ["go", "second"], multitask)
                )
                RELEASED.add(sid)
            log = await store.read(sid)
    assert second.status_code == 200
    assert _said(second.text).endswith(answer)
    assert "first done" not in _said(second.text)
    assert "text" in first  # the first stream ended too
    recorded = None if multitask == "steer" else multitask
    queued = [e for e in log if isinstance(e, MessageQueued)]
    assert [(e.messages[0].content, e.multitask) for e in queued] == [("second", recorded)]
    assert any(isinstance(e, RunSuperseded) for e in log) == (multitask == "rollback")
    assert project_state(log).status == "completed"


@pytest.mark.parametrize("fmt", ["ai-sdk", "ag-ui"])
async def test_reject_and_a_bad_choice_refuse_before_anything_changes(fmt: str) -> None:
    """``reject``: ``409 SESSION_BUSY``; an unknown choice: ``400``; the first message
    posted again: ``409 ALREADY_RUNNING``, as before; the log is untouched."""
    sid = f"fe-rej-{fmt}"
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with (
            AgentServer(_agents(), store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url, timeout=LIMIT) as client,
            anyio.create_task_group() as tg,
        ):

            async def read_first() -> None:
                body = _body(fmt, sid, ["go"], None)
                await client.post(f"/sse?format={fmt}&agentType=boss", json=body)

            tg.start_soon(read_first)
            await wait_for(
                store,
                GRANDCHILD.format(sid),
                lambda e: isinstance(e, ToolStart) and e.tool_name == "nap",
            )
            busy = await client.post(
                f"/sse?format={fmt}", json=_body(fmt, sid, ["go", "second"], "reject")
            )
            bad = await client.post(
                f"/sse?format={fmt}", json=_body(fmt, sid, ["go", "second"], "now!")
            )
            # The first message posted again (a retry, a reload) is no new message.
            again = await client.post(f"/sse?format={fmt}", json=_body(fmt, sid, ["go"], "enqueue"))
            log = await store.read(sid)
            RELEASED.add(sid)
    assert busy.status_code == 409
    assert busy.json()["code"] == "SESSION_BUSY"
    assert bad.status_code == 400
    assert bad.json()["code"] == "INVALID_REQUEST"
    assert again.status_code == 409
    assert again.json()["code"] == "ALREADY_RUNNING"
    assert not any(isinstance(e, MessageQueued) for e in log)


async def _node(*args: str) -> dict[str, Any]:
    assert NODE is not None
    done = await anyio.run_process([NODE, str(JS / "second_message.mjs"), *args], check=True)
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@needs_js
@pytest.mark.parametrize(
    ("fmt", "multitask", "answer"),
    [
        ("ai-sdk", "interrupt", "second done: go | second"),
        ("ag-ui", "rollback", "second done: second"),
    ],
)
async def test_the_official_clients_carry_the_choice(fmt: str, multitask: str, answer: str) -> None:
    """The AI SDK's ``DefaultChatTransport`` (``body: {multitask}``) and AG-UI's ``HttpAgent``
    (``forwardedProps.multitask``), unmodified, send the second message while the first
    answer streams: the reply they build is the new turn's."""
    sid = f"js-{fmt}-{multitask}"
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with (
            AgentServer(_agents(), store) as server,
            serve(create_http_app(server)) as url,
            httpx.AsyncClient(base_url=url, timeout=LIMIT) as client,
            anyio.create_task_group() as tg,
        ):

            async def read_first() -> None:
                body = _body(fmt, sid, ["go"], None)
                await client.post(f"/sse?format={fmt}&agentType=boss", json=body)

            tg.start_soon(read_first)
            await wait_for(
                store,
                GRANDCHILD.format(sid),
                lambda e: isinstance(e, ToolStart) and e.tool_name == "nap",
            )
            reply = await _node(url, fmt, sid, multitask)
            RELEASED.add(sid)
            log = await store.read(sid)
    assert reply == {"text": answer, "errors": []}
    [queued] = [e for e in log if isinstance(e, MessageQueued)]
    assert queued.multitask == multitask
    assert project_state(log).status == "completed"
