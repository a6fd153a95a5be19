"""Readers of a finished session's stream that never read: cut after ``--write-timeout``.

The real ``serve`` on loopback (both event loops) with a completed session
whose stream is about 1.8 MB (a 900 KB message repeated in the answer and the
output). Twenty raw sockets with small receive buffers ask for it and never
read. Before the write timeout each held its whole stream, encoded as one
body, for as long as it stayed (RSS 70 -> 973 MB with 300 of them); now the
stream goes out in pages under flow control, each connection is cut once its
client has taken nothing for the timeout, and the memory comes back.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from _serve_process import ServeProcess

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
