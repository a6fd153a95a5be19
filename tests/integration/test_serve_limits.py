"""``helix-agents serve`` keeps answering under hostile clients: a bounded loopback slowloris.

The server is the real command, on a loopback port, with an open-file limit
(1,024) below the number of half-open sockets the test holds (2,000): before
the connection cap it stopped accepting for as long as they were held. The
cap closes the connection that has waited longest for its headers; the
header timeout closes a stalled one; beyond the stream cap ``/sse`` answers
503 with ``Retry-After``; asyncio's accept error is logged once per 10 s.
"""

from __future__ import annotations

import logging
import resource
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx
import msgspec
import pytest
from _serve_process import ServeProcess
from anyio.abc import SocketStream
from servers import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Mount, Route

from helix_agents.errors import UsageError
from helix_agents.server import StreamLimit
from helix_agents.server.cli import main as cli
from helix_agents.server.serving.descriptors import quiet_accept_errors

pytestmark = pytest.mark.slow

SLOW = "tests.integration.slow_app:agents"
TIMEOUT = 60  # seconds for a whole test; generous, the machine is shared
HALF_OPEN = 2000
SERVER_NOFILE = 1024
HEALTH_WITHIN = 0.1  # seconds: the bound for /health under the slowloris (median)
PARTIAL = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "  # never finished


@contextmanager
def descriptors(wanted: int) -> Iterator[int]:
    """Raise this process's soft open-file limit towards ``wanted`` (up to the hard limit).

    Yields the limit in force; the old soft limit is restored afterwards.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    raised = soft
    if soft != resource.RLIM_INFINITY and soft < wanted:
        raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    try:
        yield wanted if raised == resource.RLIM_INFINITY else raised
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


async def hold_half_open(port: int, count: int, into: list[SocketStream]) -> None:
    """Open ``count`` connections that each send part of a request and then nothing."""
    limiter = anyio.CapacityLimiter(100)

    async def one() -> None:
        async with limiter:
            stream = await anyio.connect_tcp("127.0.0.1", port)
            into.append(stream)
            await stream.send(PARTIAL)

    async with anyio.create_task_group() as tg:
        for _ in range(count):
            tg.start_soon(one)


async def closed_by_server(stream: SocketStream) -> None:
    """Wait until the server closes ``stream`` without answering.

    A close with unread bytes in the server's buffer arrives as a reset, not
    an end of stream: both mean the server closed it.
    """
    with pytest.raises((anyio.EndOfStream, anyio.BrokenResourceError)):
        await stream.receive()


async def timed_health(url: str) -> float:
    """Seconds one ``GET /health`` on a new connection took (it must answer 200)."""
    async with httpx.AsyncClient(timeout=5) as client:
        started = time.perf_counter()
        response = await client.get(f"{url}/health")
        elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text
    return elapsed


@asynccontextmanager
async def running(server: ServeProcess) -> AsyncIterator[ServeProcess]:
    try:
        await server.start()
        yield server
    finally:
        with anyio.CancelScope(shield=True):
            await server.stop()


async def test_a_slowloris_does_not_stop_the_server(tmp_path: Path) -> None:
    with descriptors(HALF_OPEN + 500) as limit:
        half_open = min(HALF_OPEN, limit - 300)
        server_nofile = min(SERVER_NOFILE, half_open // 2)
        held: list[SocketStream] = []
        server = ServeProcess(tmp_path, SLOW, nofile=server_nofile)
        try:
            with anyio.fail_after(TIMEOUT):
                async with running(server):
                    await hold_half_open(server.port, half_open, held)
                    assert len(held) == half_open
                    # The first answer may wait for the server to work through the
                    # burst of connections; then each answer is timed.
                    assert await timed_health(server.url) < 10
                    times = sorted([await timed_health(server.url) for _ in range(10)])
                    # The bound, for the typical answer; every answer within a
                    # liveness bound (the machine is shared: one answer may be slow).
                    assert times[len(times) // 2] < HEALTH_WITHIN, (times, server.output())
                    assert times[-1] < 1.0, times
        finally:
            with anyio.CancelScope(shield=True):
                for stream in held:
                    await stream.aclose()
    log = server.output()
    assert log.count("socket.accept() out of system resource") <= 1, log
    assert "Traceback" not in log, log


LOOPS = pytest.mark.parametrize("loop", ["asyncio", "uvloop"])  # with h11, with httptools


@LOOPS
async def test_a_stalled_request_is_closed_after_the_header_timeout(
    tmp_path: Path, loop: str
) -> None:
    server = ServeProcess(tmp_path, SLOW, "--header-timeout", "0.5", "--loop", loop)
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            async with await anyio.connect_tcp("127.0.0.1", server.port) as stalled:
                await stalled.send(PARTIAL)
                started = time.perf_counter()
                await closed_by_server(stalled)  # unanswered
                assert time.perf_counter() - started >= 0.4
            # On a keep-alive connection the next request's headers are timed too.
            async with await anyio.connect_tcp("127.0.0.1", server.port) as kept:
                await kept.send(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                answer = b""
                while not answer.endswith(b"}"):
                    answer += await kept.receive()
                assert answer.startswith(b"HTTP/1.1 200 ")
                await kept.send(PARTIAL)
                await closed_by_server(kept)


def _post_head(length: int) -> bytes:
    return (
        b"POST /start HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n" % length
    )


@LOOPS
async def test_a_body_that_stalls_is_closed_after_the_body_timeout(
    tmp_path: Path, loop: str
) -> None:
    """Headers in time, then part of the body and nothing: closed unanswered.

    A body that trickles in within the time is answered as usual.
    """
    server = ServeProcess(
        tmp_path, SLOW, "--header-timeout", "5", "--body-timeout", "0.5", "--loop", loop
    )
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            async with await anyio.connect_tcp("127.0.0.1", server.port) as stalled:
                await stalled.send(_post_head(100) + b'{"sessionId":')
                started = time.perf_counter()
                await closed_by_server(stalled)  # unanswered
                assert time.perf_counter() - started >= 0.4
            body = b'{"sessionId": "s-1", "agentType": "nobody", "message": "hi"}'
            async with await anyio.connect_tcp("127.0.0.1", server.port) as slow:
                await slow.send(_post_head(len(body)) + body[:10])
                await anyio.sleep(0.1)
                await slow.send(body[10:])
                answer = b""
                while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):
                    answer += await slow.receive()
    assert answer.startswith(b"HTTP/1.1 404 "), answer  # answered: no such agent type
    assert b'"code":"NOT_FOUND"' in answer


MALFORMED = [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header: x\r\n\r\n",
    b"POST /start HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    b"POST /start HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -5\r\n\r\n",
    b"POST /start HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
]


async def _answer_to(port: int, request: bytes) -> bytes:
    """Everything the server sends back to ``request`` on a new connection, until it closes."""
    answer = b""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(request)
        try:
            while True:
                answer += await stream.receive()
        except (anyio.EndOfStream, anyio.BrokenResourceError):
            pass
    return answer


@LOOPS
async def test_a_request_that_is_not_http_is_400_in_the_protocols_shape(
    tmp_path: Path, loop: str
) -> None:
    """uvicorn's own answer is ``text/plain``; the protocol's is ``{"error", "code"}``."""
    server = ServeProcess(tmp_path, SLOW, "--loop", loop)
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            answers = [await _answer_to(server.port, request) for request in MALFORMED]
            # A keep-alive connection's second request is answered the same way.
            async with await anyio.connect_tcp("127.0.0.1", server.port) as kept_alive:
                await kept_alive.send(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                first = b""
                while not first.endswith(b"}"):
                    first += await kept_alive.receive()
                await kept_alive.send(b"GARBAGE\r\n\r\n")
                second = b""
                try:
                    while True:
                        second += await kept_alive.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError):
                    pass
            async with httpx.AsyncClient(timeout=10) as client:
                assert (await client.get(f"{server.url}/health")).status_code == 200
    for request, answer in zip(MALFORMED, answers, strict=True):
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), (request, answer)
        assert b"content-type: application/json" in head.lower(), (request, answer)
        assert msgspec.json.decode(body) == {
            "error": "malformed HTTP request",
            "code": "INVALID_REQUEST",
        }
    assert first.startswith(b"HTTP/1.1 200 "), first
    assert second.startswith(b"HTTP/1.1 400 "), second
    assert second.endswith(b'{"error":"malformed HTTP request","code":"INVALID_REQUEST"}'), second


@LOOPS
async def test_an_idle_keep_alive_connection_is_closed_after_keep_alive(
    tmp_path: Path, loop: str
) -> None:
    server = ServeProcess(
        tmp_path, SLOW, "--keep-alive", "1", "--header-timeout", "30", "--loop", loop
    )
    with anyio.fail_after(TIMEOUT):
        async with running(server), await anyio.connect_tcp("127.0.0.1", server.port) as kept:
            await kept.send(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}"):
                answer += await kept.receive()
            answered = time.perf_counter()
            await closed_by_server(kept)  # idle: after the keep-alive, not the header timeout
            assert 0.8 <= time.perf_counter() - answered < 20


@pytest.mark.parametrize(
    "flag",
    [
        "--max-connections 0",
        "--max-streams -1",
        "--header-timeout 0",
        "--body-timeout 0",
        "--body-timeout inf",
        "--keep-alive x",
        "--grace -1",
        "--grace nan",
        "--loop trio",
    ],
)
def test_a_limit_out_of_range_is_a_usage_error(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["serve", SLOW, *flag.split()]) == 2
    err = capsys.readouterr().err
    assert err.startswith("helix-agents: error: ")
    assert len(err.splitlines()) == 1


async def _start_sleepers(client: httpx.AsyncClient, url: str, count: int) -> list[str]:
    ids = [f"sleeper-{index}" for index in range(count)]
    for session_id in ids:
        response = await client.post(
            f"{url}/start",
            json={"sessionId": session_id, "agentType": "sleeper", "message": session_id},
        )
        assert response.status_code == 200, response.text
    return ids


@asynccontextmanager
async def open_stream(client: httpx.AsyncClient, url: str, session_id: str) -> AsyncIterator[int]:
    """An ``/sse`` stream held open (its status), read up to its first bytes when it is 200."""
    async with client.stream("GET", f"{url}/sse", params={"sessionId": session_id}) as response:
        # Held while the stream is: a dropped iterator would close the response.
        chunks = response.aiter_raw()
        if response.status_code == 200:
            await anext(chunks)
        yield response.status_code


async def test_streams_beyond_the_cap_are_refused_with_retry_after(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path, SLOW, "--max-streams", "2")
    with anyio.fail_after(TIMEOUT):
        async with running(server), httpx.AsyncClient(timeout=10) as client:
            first, second, third = await _start_sleepers(client, server.url, 3)
            async with open_stream(client, server.url, first) as status:
                assert status == 200
                async with open_stream(client, server.url, second) as status:
                    assert status == 200
                    refused = await client.get(f"{server.url}/sse", params={"sessionId": third})
                    assert refused.status_code == 503
                    assert refused.headers["retry-after"] == "5"
                    assert refused.json()["code"] == "UNAVAILABLE"
                    assert set(refused.json()) == {"error", "code"}
                    # Other routes are not streams.
                    assert (await client.get(f"{server.url}/health")).status_code == 200
                # A stream closed: room again, once the server has seen it go.
                while True:
                    async with open_stream(client, server.url, third) as status:
                        if status == 200:
                            break
                    assert status == 503
                    await anyio.sleep(0.05)  # polling is the only signal a subprocess gives


@LOOPS
async def test_connections_beyond_the_cap_evict_a_waiting_one_or_get_503(
    tmp_path: Path, loop: str
) -> None:
    server = ServeProcess(tmp_path, SLOW, "--max-connections", "3", "--loop", loop)
    with anyio.fail_after(TIMEOUT):
        async with running(server):
            limits = httpx.Limits(max_keepalive_connections=0)
            async with httpx.AsyncClient(timeout=10, limits=limits) as client:
                ids = await _start_sleepers(client, server.url, 3)
                async with (
                    open_stream(client, server.url, ids[0]),
                    open_stream(client, server.url, ids[1]),
                ):
                    async with await anyio.connect_tcp("127.0.0.1", server.port) as waiting:
                        await waiting.send(PARTIAL)
                        # The cap is reached; the half-sent request makes room.
                        assert (await client.get(f"{server.url}/health")).status_code == 200
                        await closed_by_server(waiting)
                    async with open_stream(client, server.url, ids[2]) as status:
                        assert status == 200
                        # Every connection is busy with a request: the newcomer is refused
                        # (once the server has seen the earlier connections close: until
                        # then each newcomer evicts one of those instead).
                        while True:
                            refused = await client.get(f"{server.url}/health")
                            if refused.status_code != 200:
                                break
                            await anyio.sleep(0.05)  # polling: a subprocess gives no signal
                        assert refused.status_code == 503
                        assert refused.json()["code"] == "UNAVAILABLE"
                        assert refused.headers["retry-after"] == "1"


# --- in process -------------------------------------------------------------------


def _streaming_app(release: anyio.Event) -> Starlette:
    async def sse(request: Request) -> StreamingResponse:
        async def body() -> AsyncIterator[bytes]:
            yield b"data: hello\n\n"
            await release.wait()

        return StreamingResponse(body(), media_type="text/event-stream")

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"status": "ok"})

    inner = Starlette(routes=[Route("/sse", sse), Route("/health", health)])
    return Starlette(routes=[Mount("/agents", StreamLimit(inner, max_streams=1, retry_after=7))])


async def test_stream_limit_applies_below_a_mount_point() -> None:
    release = anyio.Event()
    with anyio.fail_after(TIMEOUT):
        async with (
            serve(_streaming_app(release)) as url,
            httpx.AsyncClient() as client,
            open_stream(client, f"{url}/agents", "any") as status,
        ):
            assert status == 200
            refused = await client.get(f"{url}/agents/sse")
            assert (refused.status_code, refused.headers["retry-after"]) == (503, "7")
            assert refused.json()["code"] == "UNAVAILABLE"
            assert (await client.get(f"{url}/agents/health")).status_code == 200
            release.set()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "2"])
def test_stream_limit_refuses_a_bad_cap(bad: object) -> None:
    with pytest.raises(UsageError):
        StreamLimit(Starlette(), max_streams=bad)  # type: ignore[arg-type]


def test_the_accept_error_is_logged_once_per_interval() -> None:
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(handler)
    try:
        accept_filter = quiet_accept_errors()
        accept_filter.last = float("-inf")  # type: ignore[attr-defined]
        try:
            raise OSError(24, "Too many open files")
        except OSError as exc:
            for _ in range(1000):
                asyncio_log.error(
                    "socket.accept() out of system resource\nsocket: <socket>", exc_info=exc
                )
        asyncio_log.error("something else")
        accept_filter.last = float("-inf")  # type: ignore[attr-defined]  # the interval passed
        asyncio_log.error("socket.accept() out of system resource\nsocket: <socket>")
    finally:
        asyncio_log.removeHandler(handler)
    assert [record.getMessage() for record in records] == [
        "socket.accept() out of system resource",
        "something else",
        "socket.accept() out of system resource (999 more since the last report)",
    ]
    assert records[0].exc_info is None
