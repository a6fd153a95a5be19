"""A retried answer after the root died between forward and record resumes the root.

Server A (a real ``helix-agents serve``) runs the root; server B runs its
remote child, which waits for an approval. The client approves at the root:
A forwards the decision to B (the child takes it and completes), then A is
SIGKILLed before it records the decision (specs/hitl.md: "forward first,
record second"). A is started again on the same port and file and the client
retries the same answer: the root must not stay paused with nothing pending;
it resumes and completes with the child's result.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from _served_agents import ServedAgents
from hitl_checks import SSEReader, input_required_of

from helix_agents.events import ApprovalGiven
from helix_agents.log import project_state
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

LIMIT = 90  # seconds: three server starts on a shared machine
ROOT = "k1"
CHILD = f"{ROOT}-remote-call_0_0"


def _ended(kind: str, payload: Any) -> bool:
    return kind != "chunk"


async def _read_until(url: str, session_id: str, predicate: Any) -> list[tuple[str, Any]]:
    sse = SSEReader()
    async with anyio.create_task_group() as tg:
        tg.start_soon(sse.read, url, session_id, 0)
        await sse.until(predicate)
        tg.cancel_scope.cancel()
    sse.close()
    return sse.events


async def test_a_retry_after_the_root_died_between_forward_and_record_resumes_it(
    tmp_path: Path,
) -> None:
    b = ServedAgents(
        tmp_path / "b.db",
        tmp_path / "b.log",
        target="tests.integration.parity_app:child_agents",
        agents=["child"],
    )
    a = ServedAgents(
        tmp_path / "a.db",
        tmp_path / "a.log",
        target="tests.integration.parity_app:crash_root_agents",
        agents=["root"],
        env={"PARITY_CHILD_URL": b.url, "PARITY_CRASH_AFTER_FORWARD": "1"},
    )
    try:
        with anyio.fail_after(LIMIT):
            await b.start()
            await a.start()
            async with httpx.AsyncClient(timeout=10) as client:
                started = await client.post(
                    f"{a.url}/start",
                    json={"agentType": "root", "sessionId": ROOT, "message": "hi"},
                )
                assert started.status_code == 200, started.text
                await _read_until(a.url, ROOT, input_required_of(ROOT))
                (entry,) = (await client.get(f"{a.url}/status", params={"sessionId": ROOT})).json()[
                    "pendingInputs"
                ]
                assert entry["ownerSessionId"] == CHILD
                answer = {"sessionId": ROOT, "toolCallId": entry["toolCallId"], "approved": True}
                with pytest.raises(httpx.TransportError):
                    await client.post(f"{a.url}/submit-approval", json=answer)
                assert await a.wait() == -signal.SIGKILL
                # B took the decision and its child finished; A recorded nothing.
                child_events = await _read_until(b.url, CHILD, _ended)
                assert child_events[-1][0] == "end", child_events[-3:]
                async with SqliteEventStore(tmp_path / "a.db") as a_store:
                    root_log = await a_store.read(ROOT)
                assert project_state(root_log).status == "paused"
                assert not [e for e in root_log if isinstance(e, ApprovalGiven)]

                a.env.pop("PARITY_CRASH_AFTER_FORWARD")
                await a.start()
                retried = await client.post(f"{a.url}/submit-approval", json=answer)
                assert retried.status_code == 200, retried.text
                assert retried.json()["ok"] is True
                events = await _read_until(a.url, ROOT, _ended)
                assert events[-1][0] == "end", events[-3:]
                status = (await client.get(f"{a.url}/status", params={"sessionId": ROOT})).json()
    finally:
        await a.terminate()
        await b.terminate()
    assert status["status"] == "completed", status
    assert status["pendingInputs"] == []
    assert status["output"].startswith("root got: subagent__child="), status
