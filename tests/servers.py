"""Real servers for integration tests: any ASGI app on uvicorn, on a loopback ephemeral port.

:func:`serve` runs the app in the test's own event loop, in a task group, so
the app and the test share objects freely (``anyio.Event``\\ s, stores, an
``AgentServer``): no threads, no portals. It yields once uvicorn listens and
shuts uvicorn down gracefully on the way out, even when the body raised::

    async with serve(app) as url:
        async with httpx.AsyncClient() as client:
            await client.get(f"{url}/health")

uvicorn is asyncio-only, so tests that use it run on the asyncio backend.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import AsyncIterator, Iterator
from typing import Literal

import anyio
import uvicorn
from anyio.abc import TaskStatus
from starlette.types import ASGIApp

from helix_agents._aio import collapsed_groups

__all__ = ["closed_port", "listen_port", "serve"]

SHUTDOWN_TIMEOUT = 5
"""Seconds uvicorn gets to close its connections before its tasks are cancelled."""


class _Server(uvicorn.Server):
    """uvicorn that reports when it listens, and leaves signal handling to the test runner."""

    def __init__(self, config: uvicorn.Config, task_status: TaskStatus[_Server]) -> None:
        super().__init__(config)
        self._task_status = task_status

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # uvicorn would take over SIGINT/SIGTERM of the whole pytest process.
        yield

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if self.started:
            self._task_status.started(self)


async def _run(
    config: uvicorn.Config, done: anyio.Event, *, task_status: TaskStatus[_Server]
) -> None:
    try:
        await _Server(config, task_status).serve()
    except SystemExit as exc:  # uvicorn exits the process when it cannot start
        raise RuntimeError(f"uvicorn did not start (exit status {exc.code})") from None
    finally:
        done.set()


@contextlib.asynccontextmanager
async def serve(
    app: ASGIApp, *, lifespan: Literal["auto", "on", "off"] = "auto", port: int = 0
) -> AsyncIterator[str]:
    """Serve ``app`` on ``127.0.0.1`` at an ephemeral port; yield its base URL.

    Args:
        app: Any ASGI 3 application.
        lifespan: uvicorn's lifespan mode; ``"auto"`` runs a Starlette app's lifespan.
        port: a fixed port instead (e.g. :func:`closed_port`), to serve again at
            the same address after a stop.

    Yields:
        ``http://127.0.0.1:<port>``, without a trailing slash.

    Raises:
        RuntimeError: If uvicorn could not start (its reason is logged).
    """
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        lifespan=lifespan,
        log_config=None,  # leave pytest's logging setup alone
        log_level="warning",
        ws="none",
        timeout_graceful_shutdown=SHUTDOWN_TIMEOUT,
    )
    done = anyio.Event()
    # The task group wraps what the body raised; hand the test its own exception.
    with collapsed_groups():
        async with anyio.create_task_group() as tg:
            server: _Server = await tg.start(_run, config, done)
            host, port = server.servers[0].sockets[0].getsockname()[:2]
            try:
                yield f"http://{host}:{port}"
            finally:
                server.should_exit = True
                # Shielded, so a test that timed out or failed still shuts uvicorn
                # down cleanly; uvicorn cancels its own tasks after SHUTDOWN_TIMEOUT.
                with anyio.move_on_after(2 * SHUTDOWN_TIMEOUT, shield=True):
                    await done.wait()
                tg.cancel_scope.cancel()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released), for connection-refused tests."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def listen_port() -> int:
    """A free loopback port below the kernel's ephemeral range, for a server started later.

    A port from :func:`closed_port` lies in the ephemeral range, so between
    choosing it and a server binding it, any outgoing connection (a cluster
    node dialing its peers) may be given it as its local port, and the server
    then fails with "address already in use". Ports below the range are never
    handed out that way.
    """
    high = min(_ephemeral_low(), 32768)
    for _ in range(200 if high > 21000 else 0):
        port = random.randrange(20000, high)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    return closed_port()


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
