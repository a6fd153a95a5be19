"""``GET /sessions`` search over real uvicorn: q, metadata.KEY, time bounds; hostile input is 400.

Sessions are started through ``POST /start`` and run by a scripted agent, so
what is searched is what the runtime really writes (the user's message, the
assistant's reply, the output).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import define_agent
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

TIMEOUT = 20


class Done(BaseModel):
    text: str


def _writer() -> Any:
    return define_agent(
        "writer",
        output_schema=Done,
        llm=ScriptedLLM(
            lambda request: ScriptedLLM.finish(
                {"text": "report filed"}, text="Here is the quarterly summary"
            )
        ),
    )


@asynccontextmanager
async def _served(tmp_path: Path) -> AsyncIterator[tuple[httpx.AsyncClient, SqliteEventStore]]:
    store = SqliteEventStore(tmp_path / "events.db")
    try:
        async with (
            serve(create_http_app(AgentServer([_writer()], store))) as url,
            httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        ):
            yield client, store
    finally:
        await store.close()


async def _start(
    client: httpx.AsyncClient, session_id: str, said: str, metadata: dict[str, str]
) -> None:
    answer = await client.post(
        "/start",
        json={
            "sessionId": session_id,
            "agentType": "writer",
            "message": [{"role": "user", "content": said}],
            "metadata": metadata,
        },
    )
    assert answer.status_code == 200, answer.text
    while True:
        status = await client.get("/status", params={"sessionId": session_id})
        if status.json()["status"] == "completed":
            return
        await anyio.sleep(0.02)


def _ids(answer: httpx.Response) -> list[str]:
    assert answer.status_code == 200, answer.text
    return [row["sessionId"] for row in answer.json()["sessions"]]


def _bad(answer: httpx.Response) -> str:
    assert answer.status_code == 400, answer.text
    body = answer.json()
    assert set(body) == {"error", "code"}, body
    assert body["code"] == "INVALID_REQUEST", body
    assert len(body["error"]) < 300  # never the whole hostile value echoed back
    return str(body["error"])


async def test_search_text_metadata_and_times_over_http(tmp_path: Path) -> None:
    async with _served(tmp_path) as (client, store):
        with anyio.fail_after(TIMEOUT):
            await _start(client, "s-red", "Deploy the staging cluster", {"team": "red"})
            await _start(client, "s-blue", "Rotate the API keys", {"team": "blue", "env": "prod"})
            created = {s: (await store.read(s))[0].ts for s in ("s-red", "s-blue")}
            get = client.get
            assert _ids(await get("/sessions", params={"q": "staging"})) == ["s-red"]
            # The assistant's reply and the output are searched too.
            assert _ids(await get("/sessions", params={"q": "quarterly filed"})) == [
                "s-blue",
                "s-red",
            ]
            assert _ids(await get("/sessions", params={"q": "rot KEYS"})) == ["s-blue"]
            assert _ids(await get("/sessions", params={"metadata.team": "red"})) == ["s-red"]
            both = {"metadata.team": "blue", "metadata.env": "prod", "q": "rotate"}
            assert _ids(await get("/sessions", params=both)) == ["s-blue"]
            assert _ids(await get("/sessions", params={"metadata.env": "dev"})) == []
            after = {"createdAfter": repr(created["s-blue"])}
            assert _ids(await get("/sessions", params=after)) == ["s-blue"]
            before = {"createdBefore": "2001-09-09T01:46:40Z"}  # epoch 1e9: before both
            assert _ids(await get("/sessions", params=before)) == []
            iso_after = {"updatedAfter": "2001-09-09T01:46:40+00:00", "status": "completed"}
            assert _ids(await get("/sessions", params=iso_after)) == ["s-blue", "s-red"]
            # Paging keeps the filters' order and ends.
            first = await get("/sessions", params={"q": "quarterly", "limit": "1"})
            assert _ids(first) == ["s-blue"]
            cursor = first.json()["nextCursor"]
            second = await get(
                "/sessions", params={"q": "quarterly", "limit": "1", "cursor": cursor}
            )
            assert _ids(second) == ["s-red"]
            assert second.json()["nextCursor"] is None


async def test_hostile_search_input_is_400_and_changes_nothing(tmp_path: Path) -> None:
    async with _served(tmp_path) as (client, store):
        with anyio.fail_after(TIMEOUT):
            await _start(client, "s-1", "hello there", {"team": "red"})
            before = await store.read("s-1")
            get = client.get
            huge = _bad(await get("/sessions", params={"q": "word " * 2000}))
            assert "at most 256 characters" in huge
            # Many words are fine (the length bounds them); none at all is no search.
            many = " ".join(f"w{n}" for n in range(60))
            assert _ids(await get("/sessions", params={"q": many})) == []
            assert _ids(await get("/sessions", params={"q": '"*-- ()'})) == ["s-1"]
            many = {f"metadata.k{n}": "v" for n in range(50)}
            assert "at most 8 metadata" in _bad(await get("/sessions", params=many))
            assert "metadata key" in _bad(await get("/sessions", params={"metadata.": "v"}))
            assert "metadata value" in _bad(
                await get("/sessions", params={"metadata.team": "x" * 10_000})
            )
            twice = [("metadata.team", "red"), ("metadata.team", "blue")]
            assert "twice" in _bad(await get("/sessions", params=twice))
            assert "more than once" in _bad(await get("/sessions", params=[("q", "a"), ("q", "b")]))
            for bad in ("yesterday", "9" * 5000, "2026-13-45", "nan", "١٢٣", ""):
                error = _bad(await get("/sessions", params={"createdAfter": bad}))
                assert "createdAfter must be seconds since the epoch or an ISO 8601" in error
            for far in ("1e400", "1e16", "-2e15"):
                error = _bad(await get("/sessions", params={"createdAfter": far}))
                assert "createdAfter is out of range" in error
            empty = {"updatedAfter": "20", "updatedBefore": "10"}  # no error: nothing in it
            assert _ids(await get("/sessions", params=empty)) == []
            # FTS5 query syntax in the text is only words to us, never an error.
            assert _ids(await get("/sessions", params={"q": "' OR 1=1 --"})) == []
            odd = await get("/sessions", params={"q": 'hello" NEAR(x AND'})
            assert _ids(odd) == []
            assert _ids(await get("/sessions", params={"q": "hello*"})) == ["s-1"]
            assert await store.read("s-1") == before
            assert await store.list_sessions() == ["s-1"]
