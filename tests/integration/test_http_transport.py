"""``HttpRemoteAgentTransport`` against fake gateways on real uvicorn (``specs/http.md``).

The fake records every request (method, path, query, headers, JSON body) and
answers as the spec says, unless a test queued ``failures``: replies used
first, one per request, on any route. Streams are scripted byte for byte.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio
import httpx
import msgspec
import pytest
from pydantic import BaseModel
from servers import closed_port, serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.types import Receive, Scope, Send

from helix_agents import RemoteAgentTransport, ToolContext, define_agent, define_tool
from helix_agents.errors import AgentServerError, TransportError, TransportTimeoutError, UsageError
from helix_agents.events import TextDelta
from helix_agents.log import project_stream
from helix_agents.messages import UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import (
    ChunkEvent,
    EndEvent,
    ErrorEvent,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    TransportEvent,
)
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

TIMEOUT = 10
Reply = Callable[[], Response]


# --- the fake gateway ----------------------------------------------------------


@dataclass
class Seen:
    """One request the fake received."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


STATUS = {
    "sessionId": "s-1",
    "runId": "run-1",
    "status": "paused",
    "stepCount": 3,
    "isExecuting": False,
    "streamId": "s-1",
    "latestSequence": 42,
    "output": None,
    "state": {"count": 2},
    "error": None,
    "suspension": "client_tool",
    "pendingClientToolCallIds": ["call-1"],
}


class FakeGateway:
    """A scripted gateway: records requests, plays ``failures`` first, then answers per spec."""

    def __init__(self) -> None:
        self.url = ""
        self.seen: list[Seen] = []
        self.failures: list[Reply] = []
        self.status: Reply = lambda: JSONResponse(STATUS)
        self.sse: Reply = lambda: sse_reply(end())
        self.release = anyio.Event()  # set at teardown: frees handlers that stall
        self.disconnected = anyio.Event()  # set when a held stream's client leaves
        routes = [
            Route("/start", self._start, methods=["POST"]),
            Route("/resume", self._start, methods=["POST"]),
            Route("/status", self._status, methods=["GET"]),
            Route("/sse", self._sse, methods=["GET"]),
            *(Route(path, self._ok, methods=["POST"]) for path in OK_ROUTES),
        ]
        self.app = Starlette(routes=routes)

    async def _record(self, request: Request) -> Response | None:
        body = await request.body()
        self.seen.append(
            Seen(
                method=request.method,
                path=request.url.path,
                query=dict(request.query_params),
                headers=dict(request.headers),
                body=msgspec.json.decode(body) if body else None,
            )
        )
        return self.failures.pop(0)() if self.failures else None

    async def _start(self, request: Request) -> Response:
        failure = await self._record(request)
        session_id = self.seen[-1].body["sessionId"]
        ids = {"sessionId": session_id, "streamId": session_id, "runId": "run-1"}
        return failure or JSONResponse(ids)

    async def _status(self, request: Request) -> Response:
        return await self._record(request) or self.status()

    async def _sse(self, request: Request) -> Response:
        return await self._record(request) or self.sse()

    async def _ok(self, request: Request) -> Response:
        return await self._record(request) or JSONResponse({"ok": True})

    def stall(self) -> Reply:
        """A reply that only comes once the test is over (for timeouts)."""
        return lambda: _Stall(self.release)

    def held(self, *pieces: bytes) -> Reply:
        """A stream that sends ``pieces``, then stays open until the client leaves."""
        return lambda: _SSE(pieces, hold=self.disconnected)


OK_ROUTES = ("/interrupt", "/abort", "/submit-tool-result")


class _Stall(Response):
    """Answers ``{"ok": true}`` only once ``release`` is set."""

    def __init__(self, release: anyio.Event) -> None:
        super().__init__()
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.release.wait()
        await JSONResponse({"ok": True})(scope, receive, send)


class _SSE(Response):
    """An event stream written piece by piece; then it ends, holds, or breaks the connection."""

    def __init__(
        self, pieces: tuple[bytes, ...], *, hold: anyio.Event | None = None, crash: bool = False
    ) -> None:
        super().__init__()
        self.pieces = pieces
        self.hold = hold
        self.crash = crash

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for piece in self.pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        if self.crash:
            raise RuntimeError("the gateway broke off the stream (on purpose)")
        if self.hold is not None:
            while (await receive())["type"] != "http.disconnect":
                pass
            self.hold.set()
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})


def sse_reply(*events: bytes, piece: int | None = None, crash: bool = False) -> Response:
    """A stream of ``events``: one write each, or ``piece``-byte writes cutting through them."""
    body = b"".join(events)
    pieces = tuple(body[i : i + piece] for i in range(0, len(body), piece)) if piece else events
    return _SSE(pieces, crash=crash)


def error(status: int, code: str | None = None, message: str = "refused") -> Reply:
    """The spec's error answer, or (``code=None``) a bare text body such as a proxy's."""
    if code is None:
        return lambda: PlainTextResponse(f"{message}\n  from a proxy", status_code=status)
    return lambda: JSONResponse({"error": message, "code": code}, status_code=status)


# --- SSE frames as the spec writes them -------------------------------------------


def delta(sequence: int, text: str) -> TextDelta:
    return TextDelta(
        session_id="s-1", seq=sequence, ts=1.0, agent_id="s-1", agent_type="writer", delta=text
    )


def chunk(sequence: int, text: str, *, split: bool = False) -> bytes:
    """A ``chunk`` frame; ``split`` spreads its JSON over several ``data:`` lines."""
    data = msgspec.json.encode(ChunkEvent(chunk=delta(sequence, text), sequence=sequence))
    lines = [data]
    if split:
        cut = data.index(b',"sequence"') + 1
        lines = [data[:cut], data[cut:]]
    frame = b"id: %d\nevent: chunk\n" % sequence
    return frame + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"


def end(output: Any = None, state: dict[str, Any] | None = None) -> bytes:
    return (
        b"event: end\ndata: " + msgspec.json.encode(EndEvent(output=output, state=state)) + b"\n\n"
    )


def failure(message: str, recoverable: bool = False) -> bytes:
    event = ErrorEvent(error=message, recoverable=recoverable)
    return b"event: error\ndata: " + msgspec.json.encode(event) + b"\n\n"


HEARTBEAT = b":heartbeat\n\n"


# --- fixtures and helpers ------------------------------------------------------------


@pytest.fixture
async def gateway() -> AsyncIterator[FakeGateway]:
    fake = FakeGateway()
    async with serve(fake.app) as url:
        fake.url = url
        try:
            yield fake
        finally:
            fake.release.set()


def transport(url: str, **options: Any) -> HttpRemoteAgentTransport:
    options.setdefault("retry_base_delay", 0.001)
    return HttpRemoteAgentTransport(url, **options)


async def collect(
    remote: RemoteAgentTransport, session_id: str = "s-1", from_sequence: int = 0
) -> list[TransportEvent]:
    return [event async for event in remote.stream(session_id, from_sequence)]


async def drain(events: AsyncIterator[TransportEvent], *, into: list[TransportEvent]) -> None:
    async for event in events:
        into.append(event)


START = RemoteStartRequest(
    session_id="s-1",
    agent_type="writer",
    message="Write a haiku",
    state={"count": 0},
    metadata={"tenant": "acme"},
    parent_session_id="p-1",
    root_session_id="p-1",
    input={"message": "Write a haiku"},
    parent_tool_call_id="call-9",
)
IDS = RemoteStartResponse(session_id="s-1", stream_id="s-1", run_id="run-1")


# --- the serve() helper itself --------------------------------------------------------


async def test_serve_hands_back_the_body_exception_and_stops_listening() -> None:
    fake = FakeGateway()
    urls: list[str] = []

    async def body() -> None:
        async with serve(fake.app) as url:
            urls.append(url)
            async with transport(url) as remote:
                await remote.abort("s-1")
            raise LookupError("from the body")

    with anyio.fail_after(TIMEOUT):
        with pytest.raises(LookupError, match="from the body"):
            await body()
        async with transport(urls[0], max_retries=0) as remote:
            with pytest.raises(TransportError, match="unreachable"):
                await remote.abort("s-1")
    assert len(fake.seen) == 1


# --- requests and answers ------------------------------------------------------------


async def test_each_call_sends_the_spec_request_and_decodes_the_answer(
    gateway: FakeGateway,
) -> None:
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            assert await remote.start(START) == IDS
            resume = RemoteResumeRequest(session_id="s-1", message=[UserMessage(content="again")])
            assert await remote.resume(resume) == IDS
            status = await remote.get_status("s-1")
            await remote.interrupt("s-1", "user pressed stop")
            await remote.abort("s-1")
            await remote.submit_tool_result("s-1", "call-1", {"rows": [1, 2]})
            await remote.submit_tool_result("s-1", "call-2", error="no such file")

    assert status == RemoteStatusResponse(
        session_id="s-1",
        run_id="run-1",
        status="paused",
        step_count=3,
        is_executing=False,
        stream_id="s-1",
        latest_sequence=42,
        state={"count": 2},
        suspension="client_tool",
        pending_client_tool_call_ids=["call-1"],
    )
    requests = [(seen.method, seen.path, seen.query, seen.body) for seen in gateway.seen]
    assert requests == [
        (
            "POST",
            "/start",
            {},
            {
                "sessionId": "s-1",
                "agentType": "writer",
                "message": "Write a haiku",
                "state": {"count": 0},
                "metadata": {"tenant": "acme"},
                "parentSessionId": "p-1",
                "rootSessionId": "p-1",
                "input": {"message": "Write a haiku"},
                "parentToolCallId": "call-9",
                "ancestors": None,
                "workspaceSessionId": None,  # only an in-process child ever sets it
                "traceContext": None,  # set by a parent that traces (specs/otel.md)
                "owner": None,  # set by a gateway that knows its caller (specs/auth.md)
            },
        ),
        (
            "POST",
            "/resume",
            {},
            {"sessionId": "s-1", "message": [{"role": "user", "content": "again"}]},
        ),
        ("GET", "/status", {"sessionId": "s-1"}, None),
        ("POST", "/interrupt", {}, {"sessionId": "s-1", "reason": "user pressed stop"}),
        ("POST", "/abort", {}, {"sessionId": "s-1"}),
        (
            "POST",
            "/submit-tool-result",
            {},
            {"sessionId": "s-1", "toolCallId": "call-1", "result": {"rows": [1, 2]}, "error": None},
        ),
        (
            "POST",
            "/submit-tool-result",
            {},
            {"sessionId": "s-1", "toolCallId": "call-2", "result": None, "error": "no such file"},
        ),
    ]
    for seen in gateway.seen:
        assert seen.headers["accept"] == "application/json"
        if seen.method == "POST":
            assert seen.headers["content-type"] == "application/json"


async def test_static_headers_go_with_every_request(gateway: FakeGateway) -> None:
    with anyio.fail_after(TIMEOUT):
        headers = {"Authorization": "Bearer static", "Accept": "application/x-custom"}
        async with transport(gateway.url, headers=headers) as remote:
            await remote.get_status("s-1")
            await collect(remote)

    assert [seen.headers["authorization"] for seen in gateway.seen] == ["Bearer static"] * 2
    assert [seen.headers["accept"] for seen in gateway.seen] == ["application/x-custom"] * 2


@pytest.mark.parametrize("kind", ["sync", "async"])
async def test_callable_headers_are_asked_before_every_request(
    gateway: FakeGateway, kind: str
) -> None:
    calls = 0

    def token() -> Mapping[str, str]:
        nonlocal calls
        calls += 1
        return {"Authorization": f"Bearer token-{calls}"}

    async def token_async() -> Mapping[str, str]:
        await anyio.lowlevel.checkpoint()
        return token()

    gateway.failures = [error(503, "INTERNAL_ERROR")]  # the retry gets a fresh token too
    with anyio.fail_after(TIMEOUT):
        async with transport(
            gateway.url, headers=token if kind == "sync" else token_async
        ) as remote:
            await remote.start(START)
            await remote.get_status("s-1")
            await collect(remote)

    assert [seen.headers["authorization"] for seen in gateway.seen] == [
        f"Bearer token-{n}" for n in (1, 2, 3, 4)
    ]


async def test_a_path_prefix_in_the_url_is_kept(gateway: FakeGateway) -> None:
    app = Starlette(routes=[Mount("/agents", app=gateway.app)])
    with anyio.fail_after(TIMEOUT):
        async with serve(app) as url:
            for base in (f"{url}/agents", f"{url}/agents/"):
                async with transport(base) as remote:
                    assert await remote.start(START) == IDS
                    assert await collect(remote) == [EndEvent()]
            async with transport(url) as remote:
                with pytest.raises(AgentServerError) as refused:
                    await remote.start(START)
    assert refused.value.code == "NOT_FOUND"
    assert [seen.path for seen in gateway.seen] == ["/agents/start", "/agents/sse"] * 2


async def test_a_client_passed_in_stays_open(gateway: FakeGateway) -> None:
    with anyio.fail_after(TIMEOUT):
        async with httpx.AsyncClient() as client:
            async with transport(gateway.url, client=client) as remote:
                await remote.get_status("s-1")
            assert not client.is_closed
            await client.get(f"{gateway.url}/status", params={"sessionId": "s-1"})


async def test_a_closed_transport_refuses_calls(gateway: FakeGateway) -> None:
    remote = transport(gateway.url)
    await remote.aclose()
    await remote.aclose()  # idempotent
    with anyio.fail_after(TIMEOUT), pytest.raises(UsageError):
        await remote.get_status("s-1")
    assert gateway.seen == []


def test_bad_options_are_usage_errors() -> None:
    for url in ("ftp://example.com", "not a url", "http://", "http://h/a?x=1", "http://h/#top"):
        with pytest.raises(UsageError):
            HttpRemoteAgentTransport(url)
    with pytest.raises(UsageError):
        HttpRemoteAgentTransport("http://127.0.0.1:1", max_retries=-1)


# --- errors and retries ----------------------------------------------------------------


async def test_5xx_is_retried_until_success(gateway: FakeGateway) -> None:
    gateway.failures = [error(503, "INTERNAL_ERROR"), error(503, "INTERNAL_ERROR")]
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            assert await remote.start(START) == IDS
    assert len(gateway.seen) == 3


async def test_retries_back_off_exponentially(gateway: FakeGateway) -> None:
    gateway.failures = [error(500, "INTERNAL_ERROR")] * 2
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url, retry_base_delay=0.05) as remote:
            began = time.monotonic()
            await remote.get_status("s-1")
            elapsed = time.monotonic() - began
    assert elapsed >= 0.05 + 0.1  # retry 0 waits base, retry 1 waits 2 * base
    assert len(gateway.seen) == 3


@pytest.mark.parametrize("max_retries", [0, 2])
async def test_5xx_past_the_retries_raises_the_server_code(
    gateway: FakeGateway, max_retries: int
) -> None:
    gateway.failures = [error(500, "INTERNAL_ERROR", "database on fire")] * 10
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url, max_retries=max_retries) as remote:
            with pytest.raises(AgentServerError) as raised:
                await remote.interrupt("s-1")
    assert (raised.value.code, raised.value.message) == ("INTERNAL_ERROR", "database on fire")
    assert len(gateway.seen) == max_retries + 1


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (400, "INVALID_REQUEST"),
        (401, "UNAUTHORIZED"),
        (404, "NOT_FOUND"),
        (409, "ALREADY_RUNNING"),
        (409, "ALREADY_COMPLETED"),
        (413, "PAYLOAD_TOO_LARGE"),
    ],
)
async def test_4xx_raises_its_code_after_one_request(
    gateway: FakeGateway, status: int, code: str
) -> None:
    gateway.failures = [error(status, code, "no, because\nreasons")] * 5
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            with pytest.raises(AgentServerError) as raised:
                await remote.start(START)
    assert raised.value.code == code
    assert str(raised.value) == f"{code}: no, because reasons"  # one line
    assert len(gateway.seen) == 1


@pytest.mark.parametrize(
    ("status", "code", "requests"),
    [
        (400, "INVALID_REQUEST", 1),
        (401, "UNAUTHORIZED", 1),
        (403, "UNAUTHORIZED", 1),
        (404, "NOT_FOUND", 1),
        (405, "METHOD_NOT_ALLOWED", 1),
        (409, "ALREADY_RUNNING", 1),
        (413, "PAYLOAD_TOO_LARGE", 1),
        (418, "INVALID_REQUEST", 1),
        (502, "INTERNAL_ERROR", 3),
    ],
)
async def test_an_answer_without_the_error_shape_gets_a_code_by_status(
    gateway: FakeGateway, status: int, code: str, requests: int
) -> None:
    gateway.failures = [error(status)] * 5
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url, max_retries=2) as remote:
            with pytest.raises(AgentServerError) as raised:
                await remote.abort("s-1")
    assert raised.value.code == code
    assert str(raised.value).startswith(f"{code}: HTTP {status} ")
    assert "\n" not in str(raised.value)
    assert len(gateway.seen) == requests


async def test_an_unknown_code_falls_back_to_the_status(gateway: FakeGateway) -> None:
    gateway.failures = [error(404, "TEAPOT", "gone")]
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            with pytest.raises(AgentServerError) as raised:
                await remote.get_status("s-1")
    assert (raised.value.code, raised.value.message) == ("NOT_FOUND", "gone")


@pytest.mark.parametrize(
    "body", [b"not json", b'{"sessionId": "s-1"}', b'{"status": "sleeping"}', b""]
)
async def test_a_malformed_success_body_is_a_transport_error(
    gateway: FakeGateway, body: bytes
) -> None:
    gateway.status = lambda: Response(body, media_type="application/json")
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            with pytest.raises(TransportError) as raised:
                await remote.get_status("s-1")
    assert "unreadable answer" in str(raised.value)
    assert isinstance(raised.value.__cause__, msgspec.DecodeError)
    assert len(gateway.seen) == 1


async def test_connection_refused_is_retried_then_a_transport_error() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with anyio.fail_after(TIMEOUT):
        async with transport(url, max_retries=2) as remote:
            with pytest.raises(TransportError) as raised:
                await remote.start(START)
            with pytest.raises(TransportError) as raised_stream:
                await collect(remote)
    for error_ in (raised.value, raised_stream.value):
        assert type(error_) is TransportError
        assert isinstance(error_.__cause__, httpx.ConnectError)
        assert "unreachable" in str(error_)


async def test_no_answer_in_time_is_a_transport_timeout(gateway: FakeGateway) -> None:
    gateway.failures = [gateway.stall()] * 2
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url, timeout=0.2, max_retries=1) as remote:
            with pytest.raises(TransportTimeoutError) as raised:
                await remote.get_status("s-1")
    assert isinstance(raised.value, TimeoutError)
    assert isinstance(raised.value, TransportError)
    assert isinstance(raised.value.__cause__, httpx.TimeoutException)
    assert str(raised.value) == f"GET {gateway.url}/status: no answer within 0.2 s"
    assert len(gateway.seen) == 2


# --- streams ----------------------------------------------------------------------------


async def test_stream_yields_chunks_then_end(gateway: FakeGateway) -> None:
    gateway.sse = lambda: sse_reply(
        HEARTBEAT,
        chunk(5, "Hel"),
        HEARTBEAT,
        chunk(6, "lo\nwörld 😀", split=True),
        b": a comment\nevent: unknown-kind\ndata: {}\n\n",
        chunk(9, "!"),
        end({"haiku": "..."}, {"count": 1}),
        chunk(10, "after the end: never read"),
    )
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote, "s-1", 4)

    assert events == [
        ChunkEvent(chunk=delta(5, "Hel"), sequence=5),
        ChunkEvent(chunk=delta(6, "lo\nwörld 😀"), sequence=6),
        ChunkEvent(chunk=delta(9, "!"), sequence=9),
        EndEvent(output={"haiku": "..."}, state={"count": 1}),
    ]
    [seen] = gateway.seen
    assert (seen.method, seen.path, seen.query) == (
        "GET",
        "/sse",
        {"sessionId": "s-1", "fromSequence": "4"},
    )
    assert seen.headers["accept"] == "text/event-stream"


async def test_stream_survives_any_write_size_and_crlf(gateway: FakeGateway) -> None:
    frames = (chunk(1, "ünï"), chunk(2, "cødé", split=True), end("done"))
    body = b"".join(frames).replace(b"\n", b"\r\n")
    gateway.sse = lambda: sse_reply(body, piece=3)
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote)
    assert events == [
        ChunkEvent(chunk=delta(1, "ünï"), sequence=1),
        ChunkEvent(chunk=delta(2, "cødé"), sequence=2),
        EndEvent(output="done"),
    ]


async def test_stream_ends_after_an_error_event(gateway: FakeGateway) -> None:
    gateway.sse = lambda: sse_reply(
        chunk(1, "a"), failure("interrupted", recoverable=True), chunk(2, "b")
    )
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote)
    assert events == [
        ChunkEvent(chunk=delta(1, "a"), sequence=1),
        ErrorEvent(error="interrupted", recoverable=True),
    ]


async def test_stream_accepts_untyped_message_events(gateway: FakeGateway) -> None:
    data = msgspec.json.encode(ChunkEvent(chunk=delta(3, "x"), sequence=3))
    gateway.sse = lambda: sse_reply(b"data: " + data + b"\n\n", b'data: {"type":"end"}\n\n')
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote)
    assert events == [ChunkEvent(chunk=delta(3, "x"), sequence=3), EndEvent()]


async def test_stream_closed_early_by_the_server_just_stops(gateway: FakeGateway) -> None:
    gateway.sse = lambda: sse_reply(chunk(1, "a"), chunk(2, "b"), b"event: end\ndata: {")
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote)
    assert events == [
        ChunkEvent(chunk=delta(1, "a"), sequence=1),
        ChunkEvent(chunk=delta(2, "b"), sequence=2),
    ]
    assert len(gateway.seen) == 1  # a drop is not retried: the caller checks /status


async def test_stream_broken_mid_way_just_stops(gateway: FakeGateway) -> None:
    gateway.sse = lambda: sse_reply(chunk(1, "a"), crash=True)
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote)
    assert events == [ChunkEvent(chunk=delta(1, "a"), sequence=1)]
    assert len(gateway.seen) == 1


async def test_stream_broken_before_its_first_event_is_retried(gateway: FakeGateway) -> None:
    gateway.failures = [
        error(503, "INTERNAL_ERROR"),
        lambda: sse_reply(HEARTBEAT, crash=True),
    ]
    gateway.sse = lambda: sse_reply(chunk(1, "a"), end())
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = await collect(remote, "s-1", 0)
    assert events == [ChunkEvent(chunk=delta(1, "a"), sequence=1), EndEvent()]
    assert [seen.query["fromSequence"] for seen in gateway.seen] == ["0"] * 3


async def test_stream_refused_raises_the_server_code(gateway: FakeGateway) -> None:
    gateway.failures = [error(404, "NOT_FOUND", "unknown session 'nope'")] * 5
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            with pytest.raises(AgentServerError) as raised:
                await collect(remote, "nope")
    assert (raised.value.code, raised.value.message) == ("NOT_FOUND", "unknown session 'nope'")
    assert len(gateway.seen) == 1


async def test_stream_with_an_unreadable_event_is_a_transport_error(
    gateway: FakeGateway,
) -> None:
    gateway.sse = lambda: sse_reply(chunk(1, "a"), b"event: chunk\ndata: {oops}\n\n")
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            received: list[TransportEvent] = []
            with pytest.raises(TransportError) as raised:
                await drain(remote.stream("s-1"), into=received)
    assert received == [ChunkEvent(chunk=delta(1, "a"), sequence=1)]
    assert "unreadable 'chunk' event" in str(raised.value)


async def test_cancelling_a_stream_closes_the_connection(gateway: FakeGateway) -> None:
    gateway.sse = gateway.held(HEARTBEAT, chunk(1, "a"))
    first = anyio.Event()
    received: list[TransportEvent] = []

    async def consume(remote: HttpRemoteAgentTransport) -> None:
        async for event in remote.stream("s-1"):
            received.append(event)
            first.set()

    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, remote)
                await first.wait()
                tg.cancel_scope.cancel()
            await gateway.disconnected.wait()  # the server saw the client leave
    assert received == [ChunkEvent(chunk=delta(1, "a"), sequence=1)]


async def test_closing_a_stream_early_closes_the_connection(gateway: FakeGateway) -> None:
    gateway.sse = gateway.held(chunk(1, "a"), chunk(2, "b"))
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            events = remote.stream("s-1")
            assert await anext(events) == ChunkEvent(chunk=delta(1, "a"), sequence=1)
            await events.aclose()
            await gateway.disconnected.wait()


# --- end to end: the real gateway ---------------------------------------------------------


class Topic(BaseModel):
    topic: str


class Poem(BaseModel):
    poem: str


async def test_end_to_end_through_the_real_gateway(runtime: Runtime) -> None:
    """A gateway on uvicorn, reached only through the HTTP transport, on each runtime.

    The other end-to-end tests here are about the connection (reuse, auth
    headers), the same whatever runs the sessions: built-in runtime only.
    """

    async def shout(args: Topic, ctx: ToolContext) -> str:
        return args.topic.upper()

    writer = define_agent(
        "writer",
        output_schema=Poem,
        tools=[define_tool("shout", "Shouts the topic.", Topic, shout)],
        llm=ScriptedLLM(
            [
                ScriptedLLM.call("shout", {"topic": "sea"}, id="t1"),
                ScriptedLLM.finish({"poem": "SEA"}, text="the sea is loud tonight"),
            ],
            chunk_words=1,
        ),
    )
    store = MemoryEventStore()
    request = RemoteStartRequest(session_id="e2e-1", agent_type="writer", message="Write")
    with anyio.fail_after(TIMEOUT):
        async with (
            runtime.server([writer], store) as server,
            serve(create_http_app(server)) as url,
            transport(url) as remote,
        ):
            started = await remote.start(request)
            events = await collect(remote, "e2e-1")
            status = await remote.get_status("e2e-1")
            chunks = [event for event in events if isinstance(event, ChunkEvent)]
            middle = chunks[len(chunks) // 2].sequence
            tail = await collect(remote, "e2e-1", middle)
            log = await store.read("e2e-1")
        await store.close()

    assert (started.session_id, started.stream_id, started.run_id) == (
        "e2e-1",
        "e2e-1",
        status.run_id,
    )
    stream = project_stream(log)
    assert chunks == [ChunkEvent(chunk=item.chunk, sequence=item.sequence) for item in stream]
    assert [type(event.chunk) for event in chunks].count(TextDelta) == 5
    assert events == [*chunks, EndEvent(output={"poem": "SEA"}, state={})]
    assert status.status == "completed"
    assert status.output == {"poem": "SEA"}
    assert status.latest_sequence == log[-1].seq
    assert tail == [event for event in chunks if event.sequence > middle] + [events[-1]]
    assert 1 < len(tail) < len(events)


async def test_starts_and_streams_one_after_another_reuse_one_connection() -> None:
    """A stream read to its end gives its connection back: every request goes over one."""
    writer = define_agent("writer", llm=ScriptedLLM(["one two three"] * 3, chunk_words=1))
    store = MemoryEventStore()
    gateway = create_http_app(AgentServer([writer], store))
    clients: list[tuple[str, int]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            clients.append(scope["client"])
        await gateway(scope, receive, send)

    with anyio.fail_after(TIMEOUT):
        async with serve(app) as url, transport(url) as remote:
            for n in range(3):
                session_id = f"reuse-{n}"
                await remote.start(
                    RemoteStartRequest(session_id=session_id, agent_type="writer", message="go")
                )
                events = await collect(remote, session_id)
                assert isinstance(events[-1], EndEvent)
        await store.close()
    assert len(clients) == 6
    assert len(set(clients)) == 1, clients  # one client address: one TCP connection


async def test_end_to_end_auth_with_refreshed_tokens() -> None:
    """The real gateway with bearer auth: a token source is asked per request; none is 401."""
    issued: list[str] = []

    async def token() -> Mapping[str, str]:
        issued.append(f"tok-{len(issued)}")
        return {"Authorization": f"Bearer {issued[-1]}"}

    async def check(candidate: str) -> bool:
        return candidate in issued

    writer = define_agent("writer", llm=ScriptedLLM(["done"]))
    store = MemoryEventStore()
    app = create_http_app(AgentServer([writer], store), auth=check)
    request = RemoteStartRequest(session_id="e2e-2", agent_type="writer", message="Write")
    with anyio.fail_after(TIMEOUT):
        async with serve(app) as url:
            async with transport(url) as anonymous:
                with pytest.raises(AgentServerError) as refused:
                    await anonymous.start(request)
            async with transport(url, headers=token) as remote:
                await remote.start(request)
                events = await collect(remote, "e2e-2")
                status = await remote.get_status("e2e-2")
        await store.close()
    assert refused.value.code == "UNAUTHORIZED"
    assert events[-1] == EndEvent(output="done", state={})
    assert status.status == "completed"
    assert issued == ["tok-0", "tok-1", "tok-2"]


# --- tracing (specs/otel.md) ---------------------------------------------------------------

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_a_traced_start_sends_the_w3c_headers_and_the_body_field(
    gateway: FakeGateway,
) -> None:
    traced = msgspec.structs.replace(
        START, trace_context={"traceparent": TRACEPARENT, "tracestate": "a=1"}
    )
    with anyio.fail_after(TIMEOUT):
        async with transport(gateway.url) as remote:
            assert await remote.start(traced) == IDS
            assert await remote.start(START) == IDS
    with_context, without = gateway.seen
    assert with_context.headers["traceparent"] == TRACEPARENT
    assert with_context.headers["tracestate"] == "a=1"
    assert with_context.body["traceContext"] == {"traceparent": TRACEPARENT, "tracestate": "a=1"}
    assert "traceparent" not in without.headers
    assert without.body["traceContext"] is None
