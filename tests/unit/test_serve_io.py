"""serve's I/O choices: writes of one loop turn leave together; ``--loop`` resolves or refuses."""

from __future__ import annotations

import asyncio
import socket

import anyio
import pytest

from helix_agents.errors import UsageError
from helix_agents.server.cli.options import loop_options, resolve_loop
from helix_agents.server.serving.protocols import bounded_http_protocol
from helix_agents.server.serving.writes import CoalescedWrites


class _Reader(asyncio.Protocol):
    """Collects what arrives on the far end of a socket pair, one entry per read."""

    def __init__(self) -> None:
        self.reads: list[bytes] = []
        self.closed = anyio.Event()

    def data_received(self, data: bytes) -> None:
        self.reads.append(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed.set()


async def _pair() -> tuple[asyncio.Transport, _Reader]:
    loop = asyncio.get_running_loop()
    near, far = socket.socketpair()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, near)
    reader = _Reader()
    await loop.connect_accepted_socket(lambda: reader, far)
    return transport, reader


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_writes_of_one_turn_reach_the_socket_as_one_write() -> None:
    transport, reader = await _pair()
    writes: list[bytes] = []
    real_write = transport.write

    def spy(data: bytes | bytearray | memoryview) -> None:
        writes.append(bytes(data))
        real_write(data)

    transport.write = spy  # type: ignore[method-assign]
    coalesced = CoalescedWrites(transport, asyncio.get_running_loop())
    coalesced.write(b"HTTP/1.1 200 OK\r\n\r\n")
    coalesced.write(b"")
    coalesced.writelines([b"body", b"!"])
    assert writes == []  # nothing before the turn ends
    assert coalesced.get_write_buffer_size() == len(b"HTTP/1.1 200 OK\r\n\r\nbody!")
    await asyncio.sleep(0)
    assert writes == [b"HTTP/1.1 200 OK\r\n\r\nbody!"]
    coalesced.write(b"last")
    coalesced.close()  # what is queued goes out before the close
    with anyio.fail_after(10):
        await reader.closed.wait()
    assert b"".join(reader.reads) == b"HTTP/1.1 200 OK\r\n\r\nbody!last"
    assert coalesced.is_closing()  # the rest is the transport's own


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_abort_drops_what_is_queued() -> None:
    transport, reader = await _pair()
    coalesced = CoalescedWrites(transport, asyncio.get_running_loop())
    coalesced.write(b"never sent")
    coalesced.abort()
    with anyio.fail_after(10):
        await reader.closed.wait()
    assert reader.reads == []


def test_loop_choices_resolve() -> None:
    assert resolve_loop("asyncio") == "asyncio"
    assert resolve_loop("uvloop") == "uvloop"  # a dependency on Linux
    assert resolve_loop("auto") == "uvloop"
    assert loop_options("uvloop") == {"use_uvloop": True}
    assert loop_options("asyncio") == {}
    with pytest.raises(UsageError, match="--loop must be one of"):
        resolve_loop("trio")


def test_an_unknown_http_parser_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="parser must be one of h11, httptools"):
        bounded_http_protocol(10, 1.0, parser="picohttp")
    assert bounded_http_protocol(10, 1.0, parser="httptools").__name__ == (
        "BoundedHttpToolsProtocol"
    )
