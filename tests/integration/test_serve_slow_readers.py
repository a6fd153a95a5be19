"""Readers of a finished session's stream that never read: a window each, cut after a timeout.

The real ``serve`` on loopback (both event loops). First a completed session
whose stream is about 1.8 MB (a 900 KB message repeated in the answer and the
output): twenty raw sockets with small receive buffers ask for it and never
read; each connection is cut once its client has taken nothing for
``--write-timeout``, and the memory comes back. Then 200 raw sockets ask for
a finished session of 10 MB, and of 50 MB, and never read: each holds a
window (the log is read in pages as the socket drains), so the server's RSS
grows by the same few tens of MB whatever the session's size, ``/health``
answers quickly meanwhile, and the memory returns once they close. Before,
each held its decoded log (RSS 72 -> 956 MB for the 10 MB session, 662 MB
10 s after they closed, ``/health`` up to 1.3 s).
"""

from __future__ import annotations

import json
import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from _serve_process import ServeProcess

from helix_agents.events import Completed, Event, RunStarted, SessionCreated, TextDelta
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

SLOW = "tests.integration.slow_app:agents"
LIMIT = 60  # seconds for a whole test; generous, the machine is shared
WRITE_TIMEOUT = 2.0
READERS = 20
TCP_CLOSE = 7  # tcpi_state of a connection reset by its peer


@pytest.fixture(params=["uvloop", "asyncio"])
async def served(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ServeProcess]:
    server = ServeProcess(
        tmp_path,
        SLOW,
        "--loop",
        request.param,
        "--write-timeout",
        str(WRITE_TIMEOUT),
        env={"SLOW_APP_QUICK": "1"},
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def _rss(server: ServeProcess) -> int:
    """The server's resident memory, in bytes."""
    assert server.process is not None
    status = Path(f"/proc/{server.process.pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) * 1024


def _state(sock: socket.socket) -> int:
    return int(struct.unpack("B", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[:1])[0])


def _non_reader(port: int, session_id: str) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # before connect: a small window
    sock.connect(("127.0.0.1", port))
    sock.sendall(f"GET /sse?sessionId={session_id} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    return sock


async def _finished_session(server: ServeProcess, client: httpx.AsyncClient) -> tuple[str, int]:
    """Start a session with a 900 KB message, read its stream to the end; its id and length."""
    session_id = "big-log"
    message = "x" * 900_000
    started = await client.post(
        f"{server.url}/start",
        json={"sessionId": session_id, "agentType": "sleeper", "message": message},
    )
    assert started.status_code == 200, started.text
    return session_id, await _read_whole(server, client, session_id)


async def _read_whole(server: ServeProcess, client: httpx.AsyncClient, session_id: str) -> int:
    """Read the session's stream to its end (the run's end); its length."""
    async with client.stream("GET", f"{server.url}/sse", params={"sessionId": session_id}) as sse:
        body = b"".join([chunk async for chunk in sse.aiter_bytes()])
    assert body.rstrip().split(b"\n\n")[-1].startswith(b"event: end")
    return len(body)


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="reads TCP_INFO (Linux)")
async def test_non_reading_readers_of_a_finished_stream_are_cut_and_their_memory_returns(
    served: ServeProcess,
) -> None:
    async with httpx.AsyncClient(timeout=10) as client:
        with anyio.fail_after(LIMIT):
            session_id, length = await _finished_session(served, client)
            assert length > 1_700_000
            before = _rss(served)
            readers = [_non_reader(served.port, session_id) for _ in range(READERS)]
            try:
                opened = time.monotonic()
                peak = before
                # The server cuts each once its client has taken nothing for the timeout.
                while any(_state(sock) != TCP_CLOSE for sock in readers):
                    peak = max(peak, _rss(served))
                    health = await client.get(f"{served.url}/health")
                    assert health.status_code == 200
                    await anyio.sleep(0.1)  # polling: the kernel's socket state has no event
                cut_after = time.monotonic() - opened
            finally:
                for sock in readers:
                    sock.close()
            after = _rss(served)
            # What was cut was never whole: a reader got a fraction of its stream.
            assert cut_after < WRITE_TIMEOUT + 20
            # Memory while held is bounded per reader (the decoded log and one page), and it
            # comes back once they are cut.
            assert (peak - before) / READERS < 2 * length, (before, peak, after)
            assert after - before < 40 * 1024 * 1024, (before, peak, after)
            # The session is still served whole to a reader that reads.
            assert await _read_whole(served, client, session_id) == length
    print(
        f"\nRSS {before >> 20} MB -> peak {peak >> 20} MB with {READERS} non-readers of a "
        f"{length >> 10} KiB stream -> {after >> 20} MB after the cut ({cut_after:.1f}s)"
    )


# --- a window per reader -------------------------------------------------------------------

WINDOW_READERS = 200
GROWTH_LIMIT = 60 * 1024 * 1024  # for all of them: a window each (~160 KiB measured), not the log
RETURN_LIMIT = 50 * 1024 * 1024  # RSS within this of the start, 10 s after they close
HEALTH_P99 = 0.2  # seconds
DELTA = 2400  # characters in each chunk of the big log


async def _fill(db: Path, session_id: str, chunks: int) -> None:
    """A finished session of ``chunks`` chunks of :data:`DELTA` characters, written directly."""
    store = SqliteEventStore(db)
    try:
        events: list[Event] = [
            SessionCreated(session_id=session_id, seq=1, ts=0.0, agent_type="sleeper", run_id="r"),
            RunStarted(session_id=session_id, seq=2, ts=0.0, run_id="r"),
        ]
        for seq in range(3, chunks + 3):
            text = (f"{seq:08d} " * (DELTA // 9 + 1))[:DELTA]
            events.append(
                TextDelta(
                    session_id=session_id,
                    seq=seq,
                    ts=0.0,
                    agent_id=session_id,
                    agent_type="sleeper",
                    delta=text,
                )
            )
        events.append(Completed(session_id=session_id, seq=chunks + 3, ts=0.0, output="done"))
        for start in range(0, len(events), 500):
            await store.append(session_id, events[start : start + 500], start)
    finally:
        await store.close()


def _still(port: int, session_id: str) -> socket.socket:
    """A raw reader that asks for the stream and never reads (the kernel's default buffers)."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"GET /sse?sessionId={session_id} HTTP/1.1\r\nhost: x\r\n\r\n".encode())
    return sock


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("chunks", [4_000, 20_000], ids=["10MB", "50MB"])
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_readers_that_never_read_hold_a_window_each_whatever_the_session_size(
    tmp_path: Path, loop: str, chunks: int
) -> None:
    session_id = "long-day"
    await _fill(tmp_path / "serve.db", session_id, chunks)
    server = ServeProcess(tmp_path, SLOW, "--loop", loop)
    await server.start()
    readers: list[socket.socket] = []
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            with anyio.fail_after(LIMIT):
                await client.get(f"{server.url}/health")
                before = _rss(server)
                readers = [_still(server.port, session_id) for _ in range(WINDOW_READERS)]
                peak, waits = before, []
                held = time.monotonic()
                while time.monotonic() - held < 6:  # the readers stay, reading nothing
                    asked = time.perf_counter()
                    health = await client.get(f"{server.url}/health")
                    waits.append(time.perf_counter() - asked)
                    assert health.status_code == 200
                    peak = max(peak, _rss(server))
                    await anyio.sleep(0.05)  # sampling RSS: /proc has no event
                for sock in readers:
                    sock.close()
                readers = []
                closed = time.monotonic()
                after = _rss(server)
                # Given back, not merely bounded: at least half of what they took.
                returned = (peak + before) // 2
                while after > returned and time.monotonic() - closed < 10:
                    await anyio.sleep(0.5)  # polling RSS: /proc has no event
                    after = _rss(server)
                waits.sort()
                p99 = waits[max(int(len(waits) * 0.99) - 1, 0)]
                print(
                    f"\n{loop}, {chunks * DELTA >> 20} MiB of chunks: RSS {before >> 20} -> "
                    f"peak {peak >> 20} MB with {WINDOW_READERS} non-readers "
                    f"({(peak - before) // WINDOW_READERS >> 10} KiB each); /health p99 "
                    f"{p99 * 1000:.0f} ms of {len(waits)}; {after >> 20} MB "
                    f"{time.monotonic() - closed:.1f}s after they closed"
                )
                assert peak - before <= GROWTH_LIMIT, (before, peak)
                assert p99 < HEALTH_P99, waits[-5:]
                assert after - before <= RETURN_LIMIT, (before, peak, after)
                assert after <= returned, (before, peak, after)
                # The session is still served whole to a reader that reads.
                async with client.stream(
                    "GET", f"{server.url}/sse", params={"sessionId": session_id}
                ) as sse:
                    chunks_read = 0
                    async for line in sse.aiter_lines():
                        chunks_read += line == "event: chunk"
                assert chunks_read == chunks
    finally:
        for sock in readers:
            sock.close()
        await server.stop()


# --- the same for A2A resubscribers (issue 34) ----------------------------------------------

A2A_READERS = 50
WINDOW_PER_READER = 256 * 1024


def _a2a_still(port: int, task_id: str) -> socket.socket:
    """A raw A2A client that re-subscribes to ``task_id`` from the start (our extension's
    ``Helix-From-Sequence: 0``, what ``A2ARemoteAgentTransport`` sends) and never reads."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    ).encode()
    head = (
        "POST /a2a HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
        f"A2A-Version: 1.0\r\nHelix-From-Sequence: 0\r\ncontent-length: {len(body)}\r\n\r\n"
    )
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(head.encode() + body)
    return sock


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
async def test_a2a_resubscribers_that_never_read_hold_a_window_each(
    tmp_path: Path, loop: str
) -> None:
    """Fifty A2A clients re-subscribe to a finished 10 MB session's task from its start and
    read nothing: the replay is read from the log a page at a time as each socket drains, so
    the server holds a window per client, not the session (before: each held the decoded
    log, its fold and a first event carrying the whole text)."""
    session_id, chunks = "long-day", 4_000
    await _fill(tmp_path / "serve.db", session_id, chunks)
    server = ServeProcess(tmp_path, SLOW, "--loop", loop)
    await server.start()
    readers: list[socket.socket] = []
    task_id = f"{session_id}~r"
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            with anyio.fail_after(LIMIT):
                # The A2A routes load a2a-sdk on their first use: load it before measuring.
                card = await client.get(f"{server.url}/.well-known/agent-card.json")
                assert card.status_code == 200
                before = _rss(server)
                readers = [_a2a_still(server.port, task_id) for _ in range(A2A_READERS)]
                peak, waits = before, []
                held = time.monotonic()
                while time.monotonic() - held < 6:  # the readers stay, reading nothing
                    asked = time.perf_counter()
                    health = await client.get(f"{server.url}/health")
                    waits.append(time.perf_counter() - asked)
                    assert health.status_code == 200
                    peak = max(peak, _rss(server))
                    await anyio.sleep(0.05)  # sampling RSS: /proc has no event
                for sock in readers:
                    sock.close()
                readers = []
                closed = time.monotonic()
                after = _rss(server)
                while after - before > RETURN_LIMIT and time.monotonic() - closed < 10:
                    await anyio.sleep(0.5)  # polling RSS: /proc has no event
                    after = _rss(server)
                waits.sort()
                p99 = waits[max(int(len(waits) * 0.99) - 1, 0)]
                print(
                    f"\nA2A, {loop}, {chunks * DELTA >> 20} MiB of chunks: RSS {before >> 20} -> "
                    f"peak {peak >> 20} MB with {A2A_READERS} non-reading resubscribers "
                    f"({(peak - before) // A2A_READERS >> 10} KiB each); /health p99 "
                    f"{p99 * 1000:.0f} ms of {len(waits)}; {after >> 20} MB "
                    f"{time.monotonic() - closed:.1f}s after they closed"
                )
                # The target: at most 256 KiB per reader (measured: 33-35 KiB; before,
                # about 39 MiB each, the decoded log and the whole text).
                assert (peak - before) / A2A_READERS <= WINDOW_PER_READER, (before, peak)
                assert p99 < HEALTH_P99, waits[-5:]
                assert after - before <= RETURN_LIMIT, (before, peak, after)
                # A client that reads gets the whole replay: every delta, then the end.
                await _read_a2a_replay(client, server.url, task_id, chunks)
    finally:
        for sock in readers:
            sock.close()
        await server.stop()


async def _read_a2a_replay(client: httpx.AsyncClient, url: str, task_id: str, chunks: int) -> None:
    """Re-subscribe from the start and read to the end: the task, every delta, the end."""
    request = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", "Helix-From-Sequence": "0"}
    deltas, last = 0, ""
    async with client.stream("POST", f"{url}/a2a", json=request, headers=headers) as sse:
        async for line in sse.aiter_lines():
            if line.startswith("data: "):
                result = json.loads(line[6:])["result"]
                deltas += "artifactUpdate" in result
                last = next(iter(result))
                if last == "statusUpdate":
                    state = result["statusUpdate"]["status"]["state"]
    assert deltas == chunks + 1  # each delta, and the output
    assert (last, state) == ("statusUpdate", "TASK_STATE_COMPLETED")
