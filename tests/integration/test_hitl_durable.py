"""A tree suspended across processes survives ``kill -9`` of every one of them (specs/hitl.md).

Two ``helix-agents serve`` subprocesses, each on its own SQLite file:
gateway A runs the root, whose remote child runs on server B; there the
child delegates to a local grandchild that calls a client tool and passes an
approval gate. A browser (httpx) starts the root on A and reads its SSE
stream until the root pauses. Then both processes are SIGKILLed and started
again on the same ports and files, the first answer is given at the root,
both are SIGKILLed and restarted again, the second answer is given, and the
browser reconnects from the last id it held: the tree completes, and the
chunks the browser received over its two connections are exactly the
root's stream, each once, holding every chunk of the tree once.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _served_agents import ServedAgents
from hitl_app import ASK_ARGS, RM_ARGS
from hitl_checks import (
    SSEReader,
    assert_answered_once,
    assert_entry,
    assert_every_chunk_once,
    input_required_of,
    tree_logs,
)

from helix_agents import PendingInput
from helix_agents.log import project_state, project_stream
from helix_agents.messages import ToolResultMessage
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

LIMIT = 120  # seconds for the whole scenario: four starts of each server, on a shared machine
ROOT = "d1"
CHILD = f"{ROOT}-remote-call_0_0"
GRAND = f"{CHILD}-sub-call_0_0"


async def _read(url: str, from_sequence: int, predicate: Any) -> list[tuple[str, Any]]:
    """One SSE connection from ``from_sequence`` until an event matches; then drop it."""
    sse = SSEReader()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sse.read, url, ROOT, from_sequence)
        await sse.until(predicate)
        tg.cancel_scope.cancel()
    sse.close()
    return sse.events


async def _restart(*servers: ServedAgents) -> None:
    for server in servers:
        await server.kill()  # SIGKILL: nothing is flushed, nothing is cleaned up
    for server in reversed(servers):
        await server.start()  # same port, same file


async def test_kill_9_of_every_process_of_a_suspended_tree_loses_nothing(tmp_path: Path) -> None:
    b = ServedAgents(
        tmp_path / "b.db",
        tmp_path / "b.log",
        target="tests.integration.hitl_app:child_agents",
        agents=["child"],
    )
    a = ServedAgents(
        tmp_path / "a.db",
        tmp_path / "a.log",
        target="tests.integration.hitl_app:root_agents",
        agents=["root"],
        env={"HITL_CHILD_URL": b.url},
    )
    received: list[tuple[str, Any]] = []
    try:
        with anyio.fail_after(LIMIT):
            await b.start()
            await a.start()
            async with httpx.AsyncClient(base_url=a.url, timeout=10) as browser:
                started = await browser.post(
                    "/start", json={"sessionId": ROOT, "agentType": "root", "message": "hi"}
                )
                assert started.status_code == 200, started.text
                received += await _read(a.url, 0, input_required_of(ROOT))
                status = (await browser.get("/status", params={"sessionId": ROOT})).json()
                assert status["awaitingInput"]

                await _restart(a, b)
                after = (await browser.get("/status", params={"sessionId": ROOT})).json()
                assert (after["status"], after["awaitingInput"]) == ("paused", True)
                assert after["pendingInputs"] == status["pendingInputs"]
                entries = {e["kind"]: e["toolCallId"] for e in after["pendingInputs"]}
                first = await browser.post(
                    "/submit-tool-result",
                    json={
                        "sessionId": ROOT,
                        "toolCallId": entries["client_tool"],
                        "result": {"color": "teal"},
                    },
                )
                assert (first.status_code, first.json()) == (200, {"ok": True, "resumed": False})

                await _restart(a, b)
                left = (await browser.get("/status", params={"sessionId": ROOT})).json()
                assert [e["kind"] for e in left["pendingInputs"]] == ["approval"]
                second = await browser.post(
                    "/submit-approval",
                    json={"sessionId": ROOT, "toolCallId": entries["approval"], "approved": True},
                )
                assert (second.status_code, second.json()) == (200, {"ok": True, "resumed": True})
                held = max(p["sequence"] for kind, p in received if kind == "chunk")
                received += await _read(a.url, held, lambda kind, _: kind != "chunk")
                done = (await browser.get("/status", params={"sessionId": ROOT})).json()
            await a.terminate()
            await b.terminate()
    finally:
        with anyio.CancelScope(shield=True):
            await a.terminate()
            await b.terminate()
    context = f"A:\n{a.output()}\nB:\n{b.output()}"
    async with (
        SqliteEventStore(tmp_path / "a.db") as a_store,
        SqliteEventStore(tmp_path / "b.db") as b_store,
    ):
        logs = await tree_logs(ROOT, [a_store, b_store])

    assert done["status"] == "completed", context
    kind, end = received[-1]
    assert kind == "end", context
    assert "teal" in end["output"], end
    assert "removed" in end["output"], end
    # What the browser received over two connections is the root's stream, once, in order.
    sequences = [p["sequence"] for kind, p in received if kind == "chunk"]
    assert all(x < y for x, y in itertools.pairwise(sequences)), sequences
    assert sequences == [item.sequence for item in project_stream(logs[ROOT])], context
    assert_every_chunk_once(logs, ROOT)
    assert assert_answered_once(logs) == 2
    for entry in status["pendingInputs"]:
        kind = entry["kind"]
        assert_entry(
            PendingInput(
                kind=kind,
                tool_call_id=entry["toolCallId"],
                tool_name=entry["toolName"],
                arguments=entry["arguments"],
                owner_session_id=entry["ownerSessionId"],
                path=entry["path"],
            ),
            kind=kind,
            tool_name="ask_user" if kind == "client_tool" else "rm",
            arguments=ASK_ARGS if kind == "client_tool" else RM_ARGS,
            owner=GRAND,
            path=[ROOT, CHILD, GRAND],
            logs=logs,
        )
    results = {
        m.tool_name: m
        for m in project_state(logs[GRAND]).messages
        if isinstance(m, ToolResultMessage)
    }
    assert results["ask_user"].content == '{"color":"teal"}'
    assert results["rm"].content == '{"removed":"/tmp/scratch"}'
