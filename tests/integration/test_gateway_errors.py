"""The gateway's refusals, auth, body limit and SSE plumbing, over real uvicorn with raw httpx.

``create_http_app(AgentServer(...))`` runs in the test's event loop
(``tests/servers.serve``) on a SQLite store wrapped in :class:`WatchedStore`,
which counts the tails open per session, so a test can see the tail behind a
disconnected ``/sse`` client end. Sessions are seeded in-process before any
request: ``done-1`` (completed) and ``wait-1`` ... ``wait-3`` (paused on a
client tool, so their streams stay open).

Every failure must answer ``{"error": "<one line>", "code": "<CODE>"}`` with
the status of ``specs/http.md``, and bad input must change nothing in the
store. The table-driven tests send every case and report all mismatches at once.

The tests on the seeded gateway (``gw``) run on every runtime (built-in,
Temporal, DBOS: the ``runtime`` fixture); those that build a gateway of their
own (body limit, auth, heartbeats) test the HTTP edge, which is the same
``create_http_app`` whatever runs the sessions, and run on the built-in one.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from _served_agents import read_sse
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentConfig, EventStore, define_agent, define_tool
from helix_agents._aio import closing_iter
from helix_agents.events import Event
from helix_agents.log import project_stream
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import SqliteEventStore
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

TIMEOUT = 10
LIMIT = 64  # max_body_bytes of the small-limit gateway
MIB = 1 << 20


# --- a store that shows its open tails ------------------------------------------------


class WatchedStore:
    """An ``EventStore`` that delegates to ``inner`` and counts the open tails per session."""

    def __init__(self, inner: EventStore) -> None:
        self.inner = inner
        self.open_tails: Counter[str] = Counter()
        self._changed = anyio.Event()

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        return await self.inner.append(session_id, events, expected_seq)

    async def read(self, session_id: str, from_seq: int = 0) -> list[Event]:
        return await self.inner.read(session_id, from_seq)

    async def list_sessions(self) -> list[str]:
        return await self.inner.list_sessions()

    async def session_heads(self) -> dict[str, int]:
        return await self.inner.session_heads()

    async def delete(self, session_id: str) -> bool:
        return await self.inner.delete(session_id)

    async def close(self) -> None:
        await self.inner.close()

    async def tail(
        self,
        session_id: str,
        from_seq: int = 0,
        *,
        kinds: tuple[type[Event], ...] | None = None,
    ) -> AsyncIterator[Event]:
        self._count(session_id, +1)
        try:
            async with closing_iter(self.inner.tail(session_id, from_seq, kinds=kinds)) as events:
                async for event in events:
                    yield event
        finally:
            self._count(session_id, -1)

    def _count(self, session_id: str, delta: int) -> None:
        self.open_tails[session_id] += delta
        changed, self._changed = self._changed, anyio.Event()
        changed.set()

    async def wait_tails(self, session_id: str, count: int) -> None:
        """Wait until ``session_id`` has ``count`` open tails (the caller bounds the wait)."""
        while self.open_tails[session_id] != count:
            await self._changed.wait()


async def snapshot(store: EventStore) -> dict[str, list[Event]]:
    """Every session's log, by id."""
    return {session_id: await store.read(session_id) for session_id in await store.list_sessions()}


# --- the gateway ------------------------------------------------------------------------


class Question(BaseModel):
    question: str


def _agents() -> list[AgentConfig]:
    writer = define_agent(
        "writer", llm=ScriptedLLM(["one two three four five six seven"], chunk_words=1)
    )
    asker = define_agent(
        "asker",
        tools=[define_tool("confirm", "Asks the user to confirm.", Question, "client")],
        llm=ScriptedLLM(
            [ScriptedLLM.call("confirm", {"question": "go?"}, id="confirm_1"), "confirmed"]
        ),
    )
    return [writer, asker]


@dataclass
class Gateway:
    """A served gateway: its URL, a client for it, its store and server."""

    url: str
    client: httpx.AsyncClient
    store: WatchedStore
    server: AgentServer


PAUSED = ("wait-1", "wait-2", "wait-3")


@asynccontextmanager
async def gateway(
    directory: Path, runtime: Runtime | None = None, **options: Any
) -> AsyncIterator[Gateway]:
    """Serve ``create_http_app(server, **options)`` on a seeded SQLite store.

    The server runs its sessions on ``runtime`` (default: the built-in one).
    """
    await anyio.Path(directory).mkdir(parents=True, exist_ok=True)
    runtime = runtime or Runtime("builtin", directory)
    store = WatchedStore(SqliteEventStore(directory / "events.db"))
    try:
        async with (
            runtime.server(_agents(), store) as server,
            serve(create_http_app(server, **options)) as url,
            httpx.AsyncClient(base_url=url, timeout=TIMEOUT) as client,
        ):
            with anyio.fail_after(TIMEOUT * 3 if runtime.durable else TIMEOUT):
                seeds = [("done-1", "writer", "Write")] + [(s, "asker", "Ask") for s in PAUSED]
                for session_id, agent_type, message in seeds:
                    await server.start_agent(
                        RemoteStartRequest(
                            session_id=session_id, agent_type=agent_type, message=message
                        )
                    )
                    await runtime.settled(server, session_id)
                statuses = [(await server.get_status(s)).status for s, _, _ in seeds]
                assert statuses == ["completed", "paused", "paused", "paused"]
            yield Gateway(url=url, client=client, store=store, server=server)
    finally:
        await store.close()


@pytest.fixture
async def gw(tmp_path: Path, runtime: Runtime) -> AsyncIterator[Gateway]:
    """The seeded gateway, on each runtime (``runtime``): a client cannot tell which."""
    async with gateway(tmp_path, runtime) as served:
        yield served


# --- checking answers ---------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One request and the failure it must get."""

    label: str
    method: str
    path: str
    status: int
    code: str
    needle: str | None = None  # the error message must contain it
    request: dict[str, Any] = field(default_factory=dict)  # httpx.request keyword arguments


def problem_with(response: httpx.Response, status: int, code: str, needle: str | None) -> str:
    """What is wrong with a failure answer ("" if nothing)."""
    try:
        body = response.json()
    except ValueError:
        return f"{response.status_code} with a non-JSON body {response.text[:120]!r}"
    got = f"{response.status_code} {body!r}"
    if response.status_code != status:
        return f"expected {status} {code}, got {got}"
    if not response.headers.get("content-type", "").startswith("application/json"):
        return f"content-type {response.headers.get('content-type')!r}"
    if not isinstance(body, dict) or set(body) != {"error", "code"} or body["code"] != code:
        return f"expected the shape {{error, code={code}}}, got {got}"
    message = body["error"]
    if not isinstance(message, str) or not message or "\n" in message:
        return f"the error is not one line: {message!r}"
    if needle is not None and needle not in message:
        return f"the error {message!r} does not name {needle!r}"
    return ""


async def check_cases(gw: Gateway, cases: Sequence[Case]) -> None:
    """Send every case; fail listing all mismatches, and if the store changed at all."""
    before = await snapshot(gw.store)
    problems: list[str] = []
    with anyio.fail_after(TIMEOUT):
        for case in cases:
            response = await gw.client.request(case.method, case.path, **case.request)
            problem = problem_with(response, case.status, case.code, case.needle)
            if problem:
                problems.append(f"{case.label} ({case.method} {case.path}): {problem}")
        after = await snapshot(gw.store)
    assert not problems, "\n".join(problems)
    assert after == before, "bad input changed the store"


def post(label: str, path: str, status: int, code: str, needle: str | None, **request: Any) -> Case:
    return Case(label, "POST", path, status, code, needle, request)


def get(label: str, path: str, status: int, code: str, needle: str | None, **request: Any) -> Case:
    return Case(label, "GET", path, status, code, needle, request)


# A valid body for each POST route; the tests only ever send them broken.
BODIES: dict[str, dict[str, Any]] = {
    "/start": {"sessionId": "new-1", "agentType": "writer", "message": "hi"},
    "/resume": {"sessionId": "wait-1"},
    "/interrupt": {"sessionId": "wait-1", "reason": "stop"},
    "/abort": {"sessionId": "wait-1", "reason": "stop"},
    "/submit-tool-result": {"sessionId": "wait-1", "toolCallId": "confirm_1", "result": "yes"},
}
REQUIRED = {
    "/start": ("sessionId", "agentType", "message"),
    "/resume": ("sessionId",),
    "/interrupt": ("sessionId",),
    "/abort": ("sessionId",),
    "/submit-tool-result": ("sessionId", "toolCallId"),
}
WRONG_TYPES: dict[str, dict[str, Any]] = {
    "/start": {
        "sessionId": 5,
        "agentType": ["writer"],
        "message": 5,
        "state": "full",
        "metadata": {"tenant": 1},
        "parentSessionId": 5,
        "rootSessionId": {},
        "parentToolCallId": 1.5,
    },
    "/resume": {"sessionId": None, "message": 5},
    "/interrupt": {"sessionId": ["wait-1"], "reason": 5},
    "/abort": {"sessionId": 1, "reason": False},
    "/submit-tool-result": {"sessionId": 1, "toolCallId": 7, "error": {"e": 1}},
}
MALFORMED = {
    "truncated JSON": b'{"sessionId": "wait-1"',
    "empty body": b"",
    "not UTF-8": b'{"sessionId": "\xff\xfe"}',
    "trailing comma": b'{"sessionId": "wait-1",}',
    "an array": b'["wait-1"]',
    "null": b"null",
    "a string": b'"wait-1"',
    "not JSON at all": b"sessionId=wait-1",
}
BAD_IDS = {
    "empty": "",
    "257 characters": "a" * 257,
    "slash": "a/b",
    "space": "a b",
    "star": "a*b",
    "greater-than": "a>b",
    "newline": "a\nb",
    "unicode": "séance-1",
    "CJK": "会话",
    "NUL": "a\x00b",
}
JSON = {"Content-Type": "application/json"}


async def test_malformed_missing_and_mistyped_bodies_are_400(gw: Gateway) -> None:
    cases: list[Case] = []
    for path, body in BODIES.items():
        for label, raw in MALFORMED.items():
            cases.append(post(label, path, 400, "INVALID_REQUEST", None, content=raw, headers=JSON))
        for name in REQUIRED[path]:
            partial = {key: value for key, value in body.items() if key != name}
            cases.append(post(f"missing {name}", path, 400, "INVALID_REQUEST", name, json=partial))
        for name, value in WRONG_TYPES[path].items():
            cases.append(
                post(
                    f"{name}={value!r}",
                    path,
                    400,
                    "INVALID_REQUEST",
                    name,
                    json={**body, name: value},
                )
            )
    for path in ("/start", "/resume"):
        wrong_role = {**BODIES[path], "message": [{"role": "assistant", "content": "hi"}]}
        cases.append(
            post("assistant message", path, 400, "INVALID_REQUEST", "message", json=wrong_role)
        )
    await check_cases(gw, cases)


async def test_bad_session_ids_are_400_on_every_route(gw: Gateway) -> None:
    cases: list[Case] = []
    for label, bad in BAD_IDS.items():
        for path, body in BODIES.items():
            cases.append(
                post(
                    f"sessionId {label}",
                    path,
                    400,
                    "INVALID_REQUEST",
                    "sessionId",
                    json={**body, "sessionId": bad},
                )
            )
        for name in ("parentSessionId", "rootSessionId"):
            cases.append(
                post(
                    f"{name} {label}",
                    "/start",
                    400,
                    "INVALID_REQUEST",
                    name,
                    json={**BODIES["/start"], name: bad},
                )
            )
        for path in ("/sse", "/status"):
            cases.append(
                get(
                    f"sessionId {label}",
                    path,
                    400,
                    "INVALID_REQUEST",
                    "sessionId",
                    params={"sessionId": bad},
                )
            )
    for path in ("/sse", "/status"):
        cases.append(get("no sessionId", path, 400, "INVALID_REQUEST", "sessionId"))
    await check_cases(gw, cases)


async def test_a_from_sequence_that_is_not_an_integer_is_400(gw: Gateway) -> None:
    bad = ["abc", "-1", "1.5", "", " 1", "0x10", "1e3", "+1", "1_000"]
    cases = [
        get(
            f"fromSequence={value!r}",
            "/sse",
            400,
            "INVALID_REQUEST",
            "fromSequence",
            params={"sessionId": "done-1", "fromSequence": value},
        )
        for value in bad
    ]
    cases += [
        get(
            f"Last-Event-ID {value!r}",
            "/sse",
            400,
            "INVALID_REQUEST",
            "Last-Event-ID",
            params={"sessionId": "done-1"},
            headers={"Last-Event-ID": value},
        )
        for value in bad
        if value and value == value.strip()  # h11 refuses to send the others
    ]
    await check_cases(gw, cases)


async def test_a_non_ascii_digit_from_sequence_is_400_not_500(gw: Gateway) -> None:
    """``str.isdigit`` accepts '²', which ``int`` refuses: the check must not crash.

    ``fromSequence=²`` (or ``Last-Event-ID: ²``) passes ``raw.isdigit()`` in
    ``http_app.sse`` and then ``int(raw)`` raises ``ValueError``, answered
    ``500 INTERNAL_ERROR`` instead of ``400 INVALID_REQUEST``.
    """
    await check_cases(
        gw,
        [
            get(
                "fromSequence='²'",
                "/sse",
                400,
                "INVALID_REQUEST",
                "fromSequence",
                params={"sessionId": "done-1", "fromSequence": "²"},
            ),
            get(
                "Last-Event-ID: '²' (latin-1)",
                "/sse",
                400,
                "INVALID_REQUEST",
                "Last-Event-ID",
                params={"sessionId": "done-1"},
                headers={"Last-Event-ID": b"\xb2"},
            ),
        ],
    )


async def test_unknown_routes_are_404_and_wrong_methods_405(gw: Gateway) -> None:
    cases = [
        Case("unknown route", "GET", "/nope", 404, "NOT_FOUND", "/nope"),
        Case("unknown route", "POST", "/starts", 404, "NOT_FOUND", "/starts"),
        Case("root", "GET", "/", 404, "NOT_FOUND"),
        Case("nested", "GET", "/sse/done-1", 404, "NOT_FOUND"),
        Case("wrong method", "GET", "/start", 405, "METHOD_NOT_ALLOWED", "GET"),
        Case("wrong method", "PUT", "/resume", 405, "METHOD_NOT_ALLOWED", "PUT"),
        Case("wrong method", "PUT", "/sse", 405, "METHOD_NOT_ALLOWED", "PUT"),
        Case("wrong method", "DELETE", "/status", 405, "METHOD_NOT_ALLOWED", "DELETE"),
        Case("wrong method", "GET", "/interrupt", 405, "METHOD_NOT_ALLOWED"),
        Case("wrong method", "PATCH", "/abort", 405, "METHOD_NOT_ALLOWED"),
        Case("wrong method", "GET", "/submit-tool-result", 405, "METHOD_NOT_ALLOWED"),
        Case("wrong method", "POST", "/health", 405, "METHOD_NOT_ALLOWED"),
    ]
    await check_cases(gw, cases)


async def test_unknown_sessions_and_conflicts_have_their_codes(gw: Gateway) -> None:
    longest = "a" * 256  # valid, and unknown
    cases = [
        get("unknown session", "/sse", 404, "NOT_FOUND", "nope", params={"sessionId": "nope"}),
        get("unknown session", "/status", 404, "NOT_FOUND", "nope", params={"sessionId": "nope"}),
        get("256 characters", "/sse", 404, "NOT_FOUND", None, params={"sessionId": longest}),
        get("256 characters", "/status", 404, "NOT_FOUND", None, params={"sessionId": longest}),
        get(
            "unknown session, late cursor",
            "/sse",
            404,
            "NOT_FOUND",
            None,
            params={"sessionId": "nope", "fromSequence": "7"},
        ),
        post(
            "unknown agent type",
            "/start",
            404,
            "NOT_FOUND",
            "nope",
            json={**BODIES["/start"], "agentType": "nope"},
        ),
        post("unknown session", "/resume", 404, "NOT_FOUND", "nope", json={"sessionId": "nope"}),
        post("unknown session", "/interrupt", 404, "NOT_FOUND", "nope", json={"sessionId": "nope"}),
        post("unknown session", "/abort", 404, "NOT_FOUND", "nope", json={"sessionId": "nope"}),
        post(
            "unknown tool call",
            "/submit-tool-result",
            404,
            "NOT_FOUND",
            "nope",
            json={**BODIES["/submit-tool-result"], "toolCallId": "nope"},
        ),
        post(
            "same id, other request",
            "/start",
            409,
            "ALREADY_RUNNING",
            "done-1",
            json={**BODIES["/start"], "sessionId": "done-1", "message": "other"},
        ),
        post(
            "same id, same request, finished",
            "/start",
            409,
            "ALREADY_COMPLETED",
            "done-1",
            json={"sessionId": "done-1", "agentType": "writer", "message": "Write"},
        ),
        post(
            "finished", "/resume", 409, "ALREADY_COMPLETED", "done-1", json={"sessionId": "done-1"}
        ),
        post(
            "finished",
            "/interrupt",
            409,
            "ALREADY_COMPLETED",
            "done-1",
            json={"sessionId": "done-1"},
        ),
        post(
            "finished", "/abort", 409, "ALREADY_COMPLETED", "done-1", json={"sessionId": "done-1"}
        ),
    ]
    await check_cases(gw, cases)


# --- the body limit -----------------------------------------------------------------------


def padded(session_id: str, size: int) -> bytes:
    """A valid ``/interrupt`` body of exactly ``size`` bytes."""
    bare = msgspec.json.encode({"sessionId": session_id, "reason": ""})
    return msgspec.json.encode({"sessionId": session_id, "reason": "x" * (size - len(bare))})


async def chunked(data: bytes, pieces: int = 4) -> AsyncIterator[bytes]:
    """``data`` as a streamed body: httpx sends it chunked, without Content-Length."""
    step = -(-len(data) // pieces)
    for start in range(0, len(data), step):
        yield data[start : start + step]


async def test_bodies_over_the_limit_are_413(tmp_path: Path) -> None:
    async with gateway(tmp_path / "small", max_body_bytes=LIMIT) as gw:
        assert len(padded("nope", LIMIT)) == LIMIT
        await check_cases(
            gw,
            [
                post(
                    "over",
                    "/interrupt",
                    413,
                    "PAYLOAD_TOO_LARGE",
                    None,
                    content=padded("wait-1", LIMIT + 1),
                    headers=JSON,
                ),
                post(
                    "way over",
                    "/start",
                    413,
                    "PAYLOAD_TOO_LARGE",
                    None,
                    json={**BODIES["/start"], "message": "x" * 1000},
                ),
                post(
                    "chunked, over",
                    "/interrupt",
                    413,
                    "PAYLOAD_TOO_LARGE",
                    None,
                    content=chunked(padded("wait-1", LIMIT + 1)),
                    headers=JSON,
                ),
                post(
                    "chunked, far over",
                    "/submit-tool-result",
                    413,
                    "PAYLOAD_TOO_LARGE",
                    None,
                    content=chunked(b"x" * 10_000, pieces=10),
                    headers=JSON,
                ),
                # At the limit the body is read: these reach the target, which knows no "nope".
                post(
                    "at the limit",
                    "/interrupt",
                    404,
                    "NOT_FOUND",
                    "nope",
                    content=padded("nope", LIMIT),
                    headers=JSON,
                ),
                post(
                    "chunked, at the limit",
                    "/interrupt",
                    404,
                    "NOT_FOUND",
                    "nope",
                    content=chunked(padded("nope", LIMIT)),
                    headers=JSON,
                ),
            ],
        )
    async with gateway(tmp_path / "default") as gw:
        await check_cases(
            gw,
            [
                post(
                    "over 1 MiB",
                    "/interrupt",
                    413,
                    "PAYLOAD_TOO_LARGE",
                    None,
                    content=padded("wait-1", MIB + 1),
                    headers=JSON,
                ),
                post(
                    "1 MiB",
                    "/interrupt",
                    404,
                    "NOT_FOUND",
                    "nope",
                    content=padded("nope", MIB),
                    headers=JSON,
                ),
            ],
        )


async def test_a_chunked_body_is_sent_without_content_length(tmp_path: Path) -> None:
    """The premise of the chunked cases above: httpx streams such a body chunked."""
    seen: list[dict[str, str]] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        seen.append({k.decode(): v.decode() for k, v in scope["headers"]})
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    with anyio.fail_after(TIMEOUT):
        async with serve(app, lifespan="off") as url, httpx.AsyncClient() as client:
            await client.post(url, content=chunked(b"x" * 100))
    assert "content-length" not in seen[0]
    assert seen[0]["transfer-encoding"] == "chunked"


# --- SSE: cursors, disconnects, heartbeats -------------------------------------------------


async def test_last_event_id_is_the_cursor_when_from_sequence_is_absent(gw: Gateway) -> None:
    with anyio.fail_after(TIMEOUT):
        full = await read_sse(gw.client, gw.url, "done-1")
        chunks = [event for event in full if isinstance(event, ChunkEvent)]
        middle, last = chunks[len(chunks) // 2].sequence, chunks[-1].sequence
        by_header = await read_sse(
            gw.client, gw.url, "done-1", None, headers={"Last-Event-ID": str(middle)}
        )
        query_wins = await read_sse(
            gw.client, gw.url, "done-1", 0, headers={"Last-Event-ID": str(middle)}
        )
        # A malformed header is refused even when the query wins (issue 12, finding 7:
        # the schema's pattern holds for every request).
        garbage_with_query = await gw.client.get(
            "/sse",
            params={"sessionId": "done-1", "fromSequence": "0"},
            headers={"Last-Event-ID": "garbage"},
        )
        past_the_end = await read_sse(
            gw.client, gw.url, "done-1", None, headers={"Last-Event-ID": str(last)}
        )
        log = await gw.store.read("done-1")

    end = EndEvent(output="one two three four five six seven", state={})
    assert full == [
        *(ChunkEvent(chunk=item.chunk, sequence=item.sequence) for item in project_stream(log)),
        end,
    ]
    assert by_header == [event for event in chunks if event.sequence > middle] + [end]
    assert 1 < len(by_header) < len(full)
    assert query_wins == full
    assert garbage_with_query.status_code == 400
    assert garbage_with_query.json()["code"] == "INVALID_REQUEST"
    assert past_the_end == [end]


async def test_a_client_that_disconnects_mid_stream_frees_the_tail(gw: Gateway) -> None:
    params = {"sessionId": "wait-1", "fromSequence": "0"}
    with anyio.fail_after(TIMEOUT):
        assert gw.store.open_tails["wait-1"] == 0
        async with gw.client.stream("GET", "/sse", params=params) as response:
            assert response.status_code == 200
            received = b""
            async for data in response.aiter_bytes():
                received += data
                if b"event: chunk" in received:
                    break
            # The paused session's stream stays open, served by one tail of its log.
            await gw.store.wait_tails("wait-1", 1)
        # Leaving the block closes the connection mid-stream; the server's tail must end.
        await gw.store.wait_tails("wait-1", 0)
        # The gateway still answers, and the session is as it was.
        status = (await gw.client.get("/status", params={"sessionId": "wait-1"})).json()
    assert status["status"] == "paused"
    assert status["pendingClientToolCallIds"] == ["confirm_1"]


async def _frames_between_heartbeats(tmp_path: Path, params: dict[str, str]) -> list[bytes]:
    """Follow the paused ``wait-1`` until three heartbeats came; the whole frames among them.

    Its one tail is open while the stream is, and gone once the client leaves.
    """
    async with gateway(tmp_path, heartbeat_interval=0.05) as gw:
        with anyio.fail_after(TIMEOUT):
            async with gw.client.stream("GET", "/sse", params=params) as response:
                assert response.status_code == 200
                received = b""
                async for data in response.aiter_raw():
                    received += data
                    if received.count(b":heartbeat\n\n") >= 3:
                        break
                await gw.store.wait_tails("wait-1", 1)  # the paused session's stream stays open
            await gw.store.wait_tails("wait-1", 0)
    blocks = received.split(b"\n\n")[:-1]  # whole blocks only
    frames = [block for block in blocks if block != b":heartbeat"]
    assert len(blocks) - len(frames) >= 3
    assert frames, "no frame before the heartbeats"
    return frames


async def test_heartbeats_arrive_between_frames(tmp_path: Path) -> None:
    frames = await _frames_between_heartbeats(
        tmp_path, {"sessionId": "wait-1", "fromSequence": "0"}
    )
    for frame in frames:
        lines = frame.split(b"\n")
        assert lines[0].startswith(b"id: "), frame
        assert lines[1:2] == [b"event: chunk"], frame
        assert lines[2].startswith(b"data: {"), frame  # a heartbeat never splits a frame


@pytest.mark.parametrize("fmt", ["ai-sdk", "ag-ui"])
async def test_front_end_streams_share_heartbeats_and_free_the_tail_on_disconnect(
    tmp_path: Path, fmt: str
) -> None:
    """The front ends' streams run on /sse's own writer: heartbeats between whole frames,
    and a client that leaves frees the tail behind its stream at once."""
    frames = await _frames_between_heartbeats(tmp_path, {"sessionId": "wait-1", "format": fmt})
    for frame in frames:
        data = frame.split(b"\n")[-1]
        assert data.startswith(b"data: {"), frame  # a heartbeat never splits a frame
        json.loads(data[len(b"data: ") :])


async def test_a_cursor_past_sqlite_integers_does_not_break_the_stream(gw: Gateway) -> None:
    """``fromSequence=2**63`` is digits, so it passes the check; on SQLite it then breaks.

    ``stream_session`` tails the log from it; ``SqliteEventStore.read`` binds
    it as a parameter and sqlite3 raises ``OverflowError`` (not a store error),
    which escapes ``SSEResponse``: the 200 stream is cut without an ``error``
    event and the server logs "Exception in ASGI application". Either answer
    would do: ``400 INVALID_REQUEST`` up front, or a stream that stays open
    (as it does for ``2**63 - 1``) or ends with an ``error`` event.
    """
    params = {"sessionId": "wait-1", "fromSequence": str(2**63)}
    received = b""
    with anyio.fail_after(TIMEOUT):
        async with gw.client.stream("GET", "/sse", params=params) as response:
            if response.status_code != 200:
                await response.aread()
                assert not problem_with(response, 400, "INVALID_REQUEST", "fromSequence")
                return
            broken: Exception | None = None
            with anyio.move_on_after(1):  # a paused session's stream may stay open
                try:
                    async for data in response.aiter_bytes():
                        received += data
                except httpx.TransportError as exc:
                    broken = exc
    assert broken is None, f"the stream broke off after {received!r}: {broken!r}"
    assert b"event: chunk" not in received


async def test_head_on_an_open_stream_ends_and_frees_the_connection(gw: Gateway) -> None:
    """Starlette answers ``HEAD`` on every ``GET`` route; on ``/sse`` that response never ends.

    The headers come back (200, text/event-stream), but the server keeps the
    response open, tailing the log: the HTTP client takes the connection back
    for its next request, which then hangs, and the tail stays open until the
    client closes the connection. ``405 METHOD_NOT_ALLOWED`` or a finished
    header-only answer would both do.
    """
    params = {"sessionId": "wait-1"}
    with anyio.fail_after(TIMEOUT):
        head = await gw.client.head("/sse", params=params)
        # Bounded, short waits: a finished HEAD answer frees both at once. (While the
        # bug stands, uvicorn's graceful shutdown then waits for the stuck connection.)
        with anyio.move_on_after(1) as next_request:
            status = await gw.client.get("/status", params=params)
        with anyio.move_on_after(1) as tail_gone:
            await gw.store.wait_tails("wait-1", 0)
    assert head.status_code in (200, 405), head
    assert not next_request.cancelled_caught, "the request after HEAD /sse hung"
    assert status.status_code == 200, status
    assert not tail_gone.cancelled_caught, "HEAD /sse left a tail of the log open"


# --- auth -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["tokens", "callable"])
async def test_auth_refuses_every_route_but_health_without_the_right_token(
    tmp_path: Path, kind: str
) -> None:
    asked: list[str] = []

    async def check(token: str) -> bool:
        asked.append(token)
        await anyio.lowlevel.checkpoint()
        return token == "gamma-token"

    auth: Any = ["alpha-token", "beta-token"] if kind == "tokens" else check
    right = "beta-token" if kind == "tokens" else "gamma-token"
    # One valid request per route; in this order each succeeds once authorized.
    requests: list[tuple[str, str, dict[str, Any]]] = [
        ("GET", "/status", {"params": {"sessionId": "wait-1"}}),
        ("GET", "/sse", {"params": {"sessionId": "done-1"}}),
        ("POST", "/submit-tool-result", {"json": BODIES["/submit-tool-result"]}),
        ("POST", "/resume", {"json": {"sessionId": "wait-1"}}),
        ("POST", "/start", {"json": BODIES["/start"]}),
        ("POST", "/interrupt", {"json": {"sessionId": "wait-2"}}),
        ("POST", "/abort", {"json": {"sessionId": "wait-3"}}),
    ]
    refused_headers = {
        "no header": {},
        "wrong token": {"Authorization": "Bearer wrong-token"},
        "another scheme": {"Authorization": f"Basic {right}"},
        "no scheme": {"Authorization": right},
        "scheme only": {"Authorization": "Bearer"},
    }
    async with gateway(tmp_path, auth=auth) as gw:
        await check_cases(
            gw,
            [
                Case(
                    label, method, path, 401, "UNAUTHORIZED", None, {**request, "headers": headers}
                )
                for method, path, request in requests
                for label, headers in refused_headers.items()
            ],
        )
        with anyio.fail_after(TIMEOUT):
            health = await gw.client.get("/health")
            answers = []
            for method, path, request in requests:
                response = await gw.client.request(
                    method, path, headers={"Authorization": f"Bearer {right}"}, **request
                )
                answers.append((path, response.status_code, response.text[:200]))
            lower_case = await gw.client.get(
                "/status",
                params={"sessionId": "done-1"},
                headers={"Authorization": f"bearer {right}"},
            )
            await gw.server.executor.wait_idle("wait-1")
            await gw.server.executor.wait_idle("new-1")
            resumed = await gw.server.get_status("wait-1")

    assert (health.status_code, health.json()) == (
        200,
        {"status": "ok", "agents": ["asker", "writer"]},
    )
    assert [(path, status) for path, status, _ in answers] == [
        (path, 200) for _, path, _ in requests
    ], answers
    assert lower_case.status_code == 200  # the scheme is case-insensitive (RFC 9110)
    assert (resumed.status, resumed.output) == ("completed", "confirmed")
    if kind == "callable":
        # Asked only about bearer tokens that were actually sent.
        assert set(asked) == {"wrong-token", right}
