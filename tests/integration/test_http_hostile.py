"""Hostile and broken clients get a 4xx with the error shape, never a 500 (issue 12, finding 1).

Over real uvicorn on loopback with raw httpx: a bearer token that is not
ASCII, a body nested thousands deep, a message item without its ``role``, a
wrong method (``Allow`` says the right ones), no token (``WWW-Authenticate``
says how to give one). A 500 never echoes the exception's text or a file
path. Bad input changes nothing in the store.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import RemoteAgentTransport, define_agent
from helix_agents.errors import AgentServerError, StoreError
from helix_agents.events import Event, TextDelta
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import ChunkEvent, RemoteStatusResponse, TransportEvent
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.edge import MAX_JSON_DEPTH
from helix_agents.server.gateway.openapi import openapi_document
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.slow

TIMEOUT = 20
TOKEN = "s3cret-token"


class Done(BaseModel):
    text: str


def _writer() -> Any:
    return define_agent(
        "writer",
        output_schema=Done,
        llm=ScriptedLLM(lambda request: ScriptedLLM.finish({"text": "ok"}, text="written")),
    )


@asynccontextmanager
async def _served(
    tmp_path: Path, **options: Any
) -> AsyncIterator[tuple[httpx.AsyncClient, SqliteEventStore]]:
    store = SqliteEventStore(tmp_path / "events.db")
    try:
        async with (
            serve(create_http_app(AgentServer([_writer()], store), **options)) as url,
            httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        ):
            yield client, store
    finally:
        await store.close()


def _shape(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert set(body) == {"error", "code"}, body
    assert body["code"] == code
    assert isinstance(body["error"], str)
    assert "\n" not in body["error"]
    return str(body["error"])


async def test_a_non_ascii_token_is_refused_with_401_never_a_500(tmp_path: Path) -> None:
    auth_tokens = [TOKEN, "été-token"]
    async with _served(tmp_path, auth=auth_tokens) as (client, store):
        with anyio.fail_after(TIMEOUT):
            answers = [
                await client.get(
                    "/status", params={"sessionId": "s1"}, headers={"Authorization": value}
                )
                for value in (
                    b"Bearer \xe9t\xe9",  # Latin-1 bytes on the wire
                    "Bearer été".encode(),  # UTF-8, not a token we take
                    b"Bearer \xff\xfe\x80x",
                )
            ]
            # A non-ASCII token we do take, sent as UTF-8, is compared as bytes and works.
            utf8 = await client.get(
                "/status",
                params={"sessionId": "nope"},
                headers={"Authorization": "Bearer été-token".encode()},
            )
        assert await store.list_sessions() == []
    for answer in answers:
        _shape(answer, 401, "UNAUTHORIZED")
        assert answer.headers["www-authenticate"].startswith("Bearer")
    _shape(utf8, 404, "NOT_FOUND")  # past auth: the session does not exist


async def test_a_callable_auth_gets_a_non_ascii_token_as_text(tmp_path: Path) -> None:
    seen: list[str] = []

    async def check(token: str) -> bool:
        seen.append(token)
        return False

    async with _served(tmp_path, auth=check) as (client, _):
        with anyio.fail_after(TIMEOUT):
            answer = await client.post(
                "/start",
                json={"sessionId": "s", "agentType": "writer", "message": "m"},
                headers={"Authorization": b"Bearer \xe9t\xe9"},
            )
    _shape(answer, 401, "UNAUTHORIZED")
    assert answer.headers["www-authenticate"] == 'Bearer realm="helix-agents"'
    assert seen == ["\xe9t\xe9"]


async def test_every_401_says_how_to_authenticate(tmp_path: Path) -> None:
    async with _served(tmp_path, auth=[TOKEN]) as (client, _):
        with anyio.fail_after(TIMEOUT):
            missing = await client.get("/status", params={"sessionId": "s"})
            wrong = await client.post(
                "/abort", json={"sessionId": "s"}, headers={"Authorization": "Bearer nope"}
            )
            health = await client.get("/health")
            document = await client.get("/openapi.json")
    for answer in (missing, wrong):
        _shape(answer, 401, "UNAUTHORIZED")
        assert answer.headers["www-authenticate"] == 'Bearer realm="helix-agents"'
    assert health.status_code == 200
    assert "www-authenticate" not in health.headers
    # The document is public, and says which operations need the token.
    assert document.status_code == 200
    assert document.json() == json.loads(json.dumps(openapi_document(auth=True)))
    assert document.json()["paths"]["/status"]["get"]["security"] == [{"bearer": []}]


@pytest.mark.parametrize("depth", [MAX_JSON_DEPTH, 2_000])
async def test_a_body_nested_too_deep_is_400_and_changes_nothing(
    tmp_path: Path, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    bodies = {
        "/start": f'{{"sessionId":"s1","agentType":"writer","message":"m","input":{nested}}}',
        "/submit-tool-result": f'{{"sessionId":"s1","toolCallId":"t","result":{nested}}}',
        "/resume": f'{{"sessionId":"s1","message":{nested}}}',
    }
    async with _served(tmp_path) as (client, store):
        with anyio.fail_after(TIMEOUT):
            answers = {
                path: await client.post(
                    path, content=body, headers={"content-type": "application/json"}
                )
                for path, body in bodies.items()
            }
            deep_state = '{"a":' * depth + "1" + "}" * depth
            state = await client.post(
                "/start",
                content=f'{{"sessionId":"s2","agentType":"writer","message":"m","state":{deep_state}}}',
                headers={"content-type": "application/json"},
            )
        assert await store.list_sessions() == []
    for path, answer in answers.items():
        message = _shape(answer, 400, "INVALID_REQUEST")
        if path != "/resume":  # there a list is the wrong type before it is too deep
            assert f"nested deeper than {MAX_JSON_DEPTH} levels" in message, message
    assert "nested deeper" in _shape(state, 400, "INVALID_REQUEST")


async def test_a_message_item_without_its_role_is_400(tmp_path: Path) -> None:
    async with _served(tmp_path) as (client, store):
        with anyio.fail_after(TIMEOUT):
            missing = await client.post(
                "/start",
                json={"sessionId": "s1", "agentType": "writer", "message": [{"content": "hi"}]},
            )
            wrong = await client.post(
                "/start",
                json={
                    "sessionId": "s1",
                    "agentType": "writer",
                    "message": [{"role": "assistant", "content": "hi"}],
                },
            )
            right = await client.post(
                "/start",
                json={
                    "sessionId": "s2",
                    "agentType": "writer",
                    "message": [{"role": "user", "content": "hi"}],
                },
            )
        assert await store.list_sessions() == ["s2"]
    assert "role" in _shape(missing, 400, "INVALID_REQUEST")
    assert "role" in _shape(wrong, 400, "INVALID_REQUEST")
    assert right.status_code == 200


async def test_a_wrong_method_is_405_with_allow(tmp_path: Path) -> None:
    async with _served(tmp_path, auth=[TOKEN]) as (client, _):
        with anyio.fail_after(TIMEOUT):
            answers = {
                (method, path): await client.request(method, path)
                for method, path in (
                    ("GET", "/start"),
                    ("DELETE", "/status"),
                    ("PUT", "/sse"),  # two routes: GET and POST
                    ("PUT", "/health"),
                    ("POST", "/openapi.json"),
                )
            }
    allowed = {"/start": "POST", "/status": "GET, HEAD", "/sse": "GET, HEAD, POST"}
    for (method, path), answer in answers.items():
        assert method in _shape(answer, 405, "METHOD_NOT_ALLOWED")
        assert answer.headers["allow"] == allowed.get(path, "GET, HEAD")


@pytest.mark.parametrize("header", ["x", "-1", "1.5", "9223372036854775808", "0" * 5000 + "x"])
async def test_a_bad_last_event_id_is_400_even_when_the_query_wins(
    tmp_path: Path, header: str
) -> None:
    async with _served(tmp_path) as (client, _):
        with anyio.fail_after(TIMEOUT):
            plain = await client.get(
                "/sse", params={"sessionId": "s"}, headers={"Last-Event-ID": header}
            )
            both = await client.get(
                "/sse",
                params={"sessionId": "s", "fromSequence": "3"},
                headers={"Last-Event-ID": header},
            )
    assert "Last-Event-ID" in _shape(plain, 400, "INVALID_REQUEST")
    assert "Last-Event-ID" in _shape(both, 400, "INVALID_REQUEST")


async def test_a_cursor_of_thousands_of_digits_is_400_not_a_500(tmp_path: Path) -> None:
    # int() of over 4,300 digits raises ValueError: the length is checked first.
    async with _served(tmp_path) as (client, _):
        with anyio.fail_after(TIMEOUT):
            long = await client.get("/sse", params={"sessionId": "s", "fromSequence": "9" * 5000})
            zeros = await client.get(
                "/sse", params={"sessionId": "s", "fromSequence": "0" * 5000 + "7"}
            )
    assert "fromSequence" in _shape(long, 400, "INVALID_REQUEST")
    _shape(zeros, 404, "NOT_FOUND")  # a valid cursor: leading zeros are digits


class _Leaky(HttpRemoteAgentTransport):
    """A transport whose failures carry paths and internals in their text."""

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        raise RuntimeError("cannot open /srv/helix/secret/events.db: permission denied")


async def test_a_500_never_echoes_exception_text_or_paths(tmp_path: Path) -> None:
    class Broken(MemoryEventStore):
        async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
            raise StoreError(f"database {tmp_path}/events.db is locked")

        async def read_page(
            self, session_id: str, from_seq: int, max_bytes: int
        ) -> tuple[list[Event], bool]:
            raise StoreError(f"database {tmp_path}/events.db is locked")  # a stream's reads

    target: RemoteAgentTransport = _Leaky("http://127.0.0.1:9", max_retries=0)
    with anyio.fail_after(TIMEOUT):
        async with (
            serve(create_http_app(AgentServer([], Broken()))) as broken_url,
            serve(create_http_app(target)) as leaky_url,
            httpx.AsyncClient(timeout=TIMEOUT) as client,
        ):
            answers = [
                await client.get(f"{broken_url}/status", params={"sessionId": "s1"}),
                await client.get(f"{broken_url}/sse", params={"sessionId": "s1"}),
                await client.get(f"{leaky_url}/status", params={"sessionId": "s1"}),
                # an unreachable agent host behind a gateway
                await client.post(f"{leaky_url}/abort", json={"sessionId": "s1"}),
            ]
        await target.aclose()
    for answer in answers:
        message = _shape(answer, 500, "INTERNAL_ERROR")
        assert "/" not in message, message
        for leak in ("events.db", "locked", "RuntimeError", "permission", "127.0.0.1"):
            assert leak not in message, message
        assert "(ref " in message


async def test_the_client_still_sees_the_code_of_a_sanitized_500(tmp_path: Path) -> None:
    target: RemoteAgentTransport = _Leaky("http://127.0.0.1:9", max_retries=0)
    with anyio.fail_after(TIMEOUT):
        async with serve(create_http_app(target)) as url:
            client = HttpRemoteAgentTransport(url, max_retries=0)
            with pytest.raises(AgentServerError) as raised:
                await client.get_status("s1")
            await client.aclose()
        await target.aclose()
    assert raised.value.code == "INTERNAL_ERROR"
    assert "secret" not in raised.value.message


class _BrokenStream(HttpRemoteAgentTransport):
    """A transport whose stream yields one chunk, then fails with a path in its text."""

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        return RemoteStatusResponse(
            session_id=session_id,
            run_id="r",
            status="running",
            step_count=0,
            is_executing=True,
            stream_id=session_id,
            latest_sequence=1,
        )

    async def stream(  # type: ignore[override]
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        chunk = TextDelta(
            session_id=session_id, seq=1, ts=0.0, agent_id=session_id, agent_type="a", delta="hi"
        )
        yield ChunkEvent(chunk=chunk, sequence=1)
        raise StoreError("database /srv/helix/secret/events.db is locked")


async def test_a_stream_that_fails_midway_ends_with_an_error_free_of_internals() -> None:
    target: RemoteAgentTransport = _BrokenStream("http://127.0.0.1:9", max_retries=0)
    with anyio.fail_after(TIMEOUT):
        async with (
            serve(create_http_app(target)) as url,
            httpx.AsyncClient(timeout=TIMEOUT) as client,
        ):
            answer = await client.get(f"{url}/sse", params={"sessionId": "s1"})
        await target.aclose()
    assert answer.status_code == 200
    frames = answer.text.split("\n\n")
    assert frames[0].startswith("id: 1\nevent: chunk\n")
    assert frames[1].startswith("event: error\ndata: ")
    error = json.loads(frames[1].split("data: ", 1)[1])
    assert error["recoverable"] is True
    assert error["error"].startswith("internal error (ref ")
    assert "/" not in error["error"]
    assert "locked" not in error["error"]


async def test_a_snapshot_cursor_of_thousands_of_digits_is_400_not_a_500(tmp_path: Path) -> None:
    async with _served(tmp_path) as (client, _):
        with anyio.fail_after(TIMEOUT):
            answer = await client.get("/snapshot", params={"sessionId": "s", "at": "9" * 5000})
    assert "at must be an integer" in _shape(answer, 400, "INVALID_REQUEST")


async def test_a_page_limit_of_thousands_of_digits_is_400_not_a_500(tmp_path: Path) -> None:
    # int() of over 4,300 digits raises ValueError: the length is checked first.
    async with _served(tmp_path) as (client, _):
        with anyio.fail_after(TIMEOUT):
            long = await client.get("/sessions", params={"limit": "9" * 5000})
            zeros = await client.get("/sessions", params={"limit": "0" * 5000 + "2"})
    error = _shape(long, 400, "INVALID_REQUEST")
    assert "limit must be an integer" in error
    assert len(error) < 200  # the value is shown cut short, not echoed whole
    assert zeros.status_code == 200, zeros.text  # leading zeros are digits: a limit of 2
    assert zeros.json() == {"sessions": [], "nextCursor": None}


async def test_an_empty_last_event_id_is_no_cursor(tmp_path: Path) -> None:
    """A client that has received no id yet may send the header empty: the stream from 0."""
    async with _served(tmp_path) as (client, _):
        with anyio.fail_after(TIMEOUT):
            started = await client.post(
                "/start", json={"sessionId": "s", "agentType": "writer", "message": "go"}
            )
            assert started.status_code == 200, started.text
            absent = await client.get("/sse", params={"sessionId": "s"})
            empty = await client.get(
                "/sse", params={"sessionId": "s"}, headers={"Last-Event-ID": ""}
            )
    assert absent.status_code == 200, absent.text
    assert empty.status_code == 200, empty.text
    assert empty.text == absent.text
    assert "event: chunk" in empty.text  # the whole run: its first chunk, then its end
    assert "event: end" in empty.text


async def test_an_empty_session_list_cursor_is_the_first_page(tmp_path: Path) -> None:
    """``GET /sessions?cursor=``: the schema allows an empty cursor; it is no cursor (200)."""
    async with _served(tmp_path) as (client, _):
        with anyio.fail_after(TIMEOUT):
            started = await client.post(
                "/start", json={"sessionId": "s", "agentType": "writer", "message": "go"}
            )
            assert started.status_code == 200, started.text
            absent = await client.get("/sessions")
            empty = await client.get("/sessions", params={"cursor": ""})
    assert absent.status_code == 200, absent.text
    assert empty.status_code == 200, empty.text
    assert empty.json() == absent.json()
    assert [item["sessionId"] for item in empty.json()["sessions"]] == ["s"]
