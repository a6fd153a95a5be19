"""A damaged session is quarantined: the server starts, serves every other session, says so once.

Issue 12, finding 3: a gap or a damaged row in one session's log used to make
``recover()`` (and so ``serve``) fail at startup, and the session to answer
400, blaming the client, with the database path in the text.
"""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import anyio
import httpx
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, define_agent
from helix_agents.events import RunStarted, SessionCreated
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.anyio


class Out(BaseModel):
    answer: str


def _agent() -> object:
    return define_agent("worker", llm=ScriptedLLM(["done"]))


async def _prepare(path: Path) -> None:
    """Three finished sessions and one left running by a dead process; then damage two."""
    store = SqliteEventStore(path)
    agent = _agent()
    async with AgentExecutor(store, [agent]) as executor:  # type: ignore[list-item]
        for sid in ("ok-1", "gap-1", "bad-1"):
            await (await executor.execute(agent, "go", session_id=sid)).result()  # type: ignore[arg-type]
    # A session a crashed process left running: created and started, nothing more.
    await store.append(
        "left-1",
        [
            SessionCreated(session_id="left-1", seq=1, ts=1.0, agent_type="worker", run_id="r1"),
            RunStarted(session_id="left-1", seq=2, ts=1.0, run_id="r1"),
        ],
        0,
    )
    await store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM helix_events WHERE session_id = 'gap-1' AND seq = 3")
        conn.execute(
            "UPDATE helix_events SET data = CAST('{\"oops\":1}' AS BLOB) "
            "WHERE session_id = 'bad-1' AND seq = 2"
        )


async def test_a_damaged_session_is_quarantined_and_the_others_are_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "store.db"
    await _prepare(path)
    caplog.set_level(logging.ERROR, logger="helix_agents")
    store = SqliteEventStore(path)
    server = AgentServer([_agent()], store, owns_store=True)  # type: ignore[list-item]
    with anyio.fail_after(30):
        async with server, serve(create_http_app(server)) as url:
            # The server started; the crashed session was recovered and finished.
            assert set(server.executor.damaged_sessions) == {"gap-1", "bad-1"}
            await server.executor.wait_idle("left-1")
            async with httpx.AsyncClient(base_url=url) as client:
                left = (await client.get("/status", params={"sessionId": "left-1"})).json()
                assert left["status"] == "completed"
                ok = await client.get("/status", params={"sessionId": "ok-1"})
                assert ok.status_code == 200
                for sid in ("gap-1", "bad-1"):
                    for answer in (
                        await client.get("/status", params={"sessionId": sid}),
                        await client.get("/sse", params={"sessionId": sid}),
                        await client.post("/resume", json={"sessionId": sid}),
                    ):
                        assert answer.status_code == 500, answer.text
                        body = answer.json()
                        assert body["code"] == "INTERNAL_ERROR"
                        assert sid in body["error"]
                        assert str(tmp_path) not in body["error"]
                        assert ".db" not in body["error"]
    # The startup log names the damaged sessions, once.
    startup = [r.getMessage() for r in caplog.records if "quarantined" in r.getMessage()]
    assert len(startup) == 1
    assert "gap-1" in startup[0]
    assert "bad-1" in startup[0]
