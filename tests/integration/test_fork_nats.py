"""A fork through the NATS fleet (specs/branches.md): ``POST /fork`` at ``serve --nats``.

Two ``helix-agents host`` processes share a nats-server; the gateway fronts
them and its logs are JetStream's. A researcher session completes; a fork of
it before its last model turn is written by the gateway into JetStream and
resumed through the fleet: a host leases it and runs only that turn (its
log after the ``session_forked`` marker holds one model turn and no lookup).
The origin's log is byte-for-byte as it was.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from remote_app import expected_report
from test_nats_fleet import _fleet

from helix_agents.events import MessageAppended, SessionForked, StepStarted, ToolStart
from helix_agents.log import encode_event, project_state
from helix_agents.messages import AssistantMessage
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats, pytest.mark.anyio]

LIMIT = 90


async def _finished(http: httpx.AsyncClient, session_id: str) -> dict[str, Any]:
    for _ in range(600):
        status = (await http.get("/status", params={"sessionId": session_id})).json()
        if status.get("status") in ("completed", "failed"):
            return dict(status)
        await anyio.sleep(0.1)
    raise AssertionError(f"{session_id} did not finish: {status}")


async def test_post_fork_through_the_fleet_runs_the_branch_on_a_host(tmp_path: Path) -> None:
    with anyio.fail_after(LIMIT):
        async with (
            _fleet(tmp_path) as (nats_url, gateway),
            httpx.AsyncClient(base_url=gateway, timeout=20) as http,
        ):
            started = await http.post(
                "/start",
                json={"sessionId": "n1", "agentType": "researcher", "message": "tides"},
            )
            assert started.status_code == 200, started.text
            assert (await _finished(http, "n1"))["status"] == "completed"
            store = await JetStreamEventStore.connect(nats_url)
            try:
                log = await store.read("n1")
                origin = [encode_event(e) for e in log]
                point = [e.seq for e in log if isinstance(e, StepStarted)][1] - 1
                forked = await http.post(
                    "/fork", json={"sessionId": "n1", "atSeq": point, "newSessionId": "n1b"}
                )
                assert forked.status_code == 200, forked.text
                status = await _finished(http, "n1b")
                branch = await store.read("n1b")
                after = [encode_event(e) for e in await store.read("n1")]
            finally:
                await store.close()
    assert forked.json()["runId"] is not None
    assert (status["status"], status["output"]) == ("completed", expected_report("tides"))
    assert isinstance(branch[point], SessionForked)
    live = branch[point + 1 :]
    turns = [
        e
        for e in live
        if isinstance(e, MessageAppended) and isinstance(e.message, AssistantMessage)
    ]
    assert len(turns) == 1  # only the turn after the point ran (on a host of the fleet)
    # the lookup is not run again (the finish call is the only tool call after the point)
    assert [e.tool_name for e in live if isinstance(e, ToolStart)] == ["__finish__"]
    assert project_state(branch).forked_from == "n1"
    assert after == origin
