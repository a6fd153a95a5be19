"""A loopback TCP proxy that breaks connections on command, for network-fault tests.

:func:`tcp_proxy` listens on ``127.0.0.1`` at an ephemeral port and forwards every
connection to a target (a uvicorn server of the test). The test can then:

- :meth:`TcpProxy.cut_all`: close every connection open right now, both ways;
- :meth:`TcpProxy.cut_after`: arm a cut for the next request whose request line
  starts with a prefix (``b"GET /sse"``): its response is forwarded for exactly
  ``nbytes`` bytes, then the connection is closed, so the client sees the
  response stop mid-frame. Arms are used in order, one per matching request.

A request is recognised by its request line at the start of a read from the
client (HTTP/1.1 without pipelining, as httpx speaks it). Closing is graceful
(FIN, no RST), so the client receives exactly the bytes forwarded before it.
Everything runs in the test's event loop, in the proxy's task group::

    async with serve(app) as url, tcp_proxy(url) as proxy:
        proxy.cut_after(120, request_prefix=b"GET /sse")
        ...  # talk to proxy.url
"""

from __future__ import annotations

import contextlib
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import anyio
import httpx
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

__all__ = ["Armed", "TcpProxy", "tcp_proxy"]

_METHODS = (b"GET ", b"POST ", b"PUT ", b"DELETE ", b"HEAD ", b"OPTIONS ", b"PATCH ")


@dataclass
class Armed:
    """One armed cut: ``nbytes`` of the response to forward, and what happened."""

    nbytes: int
    request_prefix: bytes
    delivered: int = 0
    """Bytes of the response forwarded so far (all of them when it did not fire)."""
    fired: bool = False
    """True once the connection was cut after ``nbytes``."""
    used: bool = False
    """True once a request took this arm."""


@dataclass(eq=False)
class _Connection:
    client: SocketStream
    upstream: SocketStream
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    armed: Armed | None = None


class TcpProxy:
    """Forwards loopback TCP connections to ``target``; see the module docstring."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target_host = target_host
        self.target_port = target_port
        self.port = 0
        self.connections = 0
        """How many client connections were accepted."""
        self.arms: list[Armed] = []
        """Every cut armed so far, in order."""
        self._pending: deque[Armed] = deque()
        self._live: set[_Connection] = set()

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def cut_all(self) -> int:
        """Close every open connection, client and server side; return how many."""
        live = list(self._live)
        for connection in live:
            connection.scope.cancel()
        return len(live)

    def cut_after(self, nbytes: int, *, request_prefix: bytes = b"") -> Armed:
        """Cut the next request starting with ``request_prefix`` after ``nbytes`` response bytes."""
        if nbytes < 0:
            raise ValueError(f"nbytes must be >= 0, not {nbytes}")
        armed = Armed(nbytes=nbytes, request_prefix=request_prefix)
        self.arms.append(armed)
        self._pending.append(armed)
        return armed

    def disarm(self) -> None:
        """Forget the cuts no request has taken yet."""
        self._pending.clear()

    async def serve(self, *, task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED) -> None:
        """Listen and forward until cancelled; reports the port through ``task_status``."""
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        async with listener:
            self.port = listener.extra(SocketAttribute.local_port)
            task_status.started(self.port)
            await listener.serve(self._handle)

    async def _handle(self, client: SocketStream) -> None:
        self.connections += 1
        async with client:
            try:
                upstream = await anyio.connect_tcp(self.target_host, self.target_port)
            except OSError:
                return
            connection = _Connection(client=client, upstream=upstream)
            self._live.add(connection)
            try:
                async with upstream:
                    with connection.scope:
                        async with anyio.create_task_group() as tg:
                            tg.start_soon(self._requests, connection, tg.cancel_scope)
                            tg.start_soon(self._responses, connection, tg.cancel_scope)
            finally:
                self._live.discard(connection)

    async def _requests(self, connection: _Connection, scope: anyio.CancelScope) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for data in connection.client:
                if data.startswith(_METHODS):
                    connection.armed = self._take(data)
                await connection.upstream.send(data)
        scope.cancel()

    async def _responses(self, connection: _Connection, scope: anyio.CancelScope) -> None:
        with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
            async for data in connection.upstream:
                armed = connection.armed
                if armed is not None:
                    room = armed.nbytes - armed.delivered
                    if len(data) >= room:
                        if room:
                            await connection.client.send(data[:room])
                        armed.delivered += room
                        armed.fired = True
                        break
                    armed.delivered += len(data)
                await connection.client.send(data)
        scope.cancel()

    def _take(self, request: bytes) -> Armed | None:
        if self._pending and request.startswith(self._pending[0].request_prefix):
            armed = self._pending.popleft()
            armed.used = True
            return armed
        return None


@contextlib.asynccontextmanager
async def tcp_proxy(target_url: str) -> AsyncIterator[TcpProxy]:
    """Run a :class:`TcpProxy` to ``target_url``'s host and port; cut everything on exit."""
    target = httpx.URL(target_url)
    if not target.host or target.port is None:
        raise ValueError(f"need a URL with a host and a port, not {target_url!r}")
    proxy = TcpProxy(target.host, target.port)
    async with anyio.create_task_group() as tg:
        await tg.start(proxy.serve)
        try:
            yield proxy
        finally:
            proxy.cut_all()
            tg.cancel_scope.cancel()
