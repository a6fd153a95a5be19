"""Where the companion tests' children run: in the parent's executor, behind HTTP, behind NATS.

:func:`children_of` yields a :class:`Children`: for ``local``, the parent's
own store and no transport (the children run in the parent's executor); for
``http``, an ``AgentServer`` on its own store served by real uvicorn on
127.0.0.1; for ``nats``, an ``AgentServer`` behind a ``NatsAgentHost`` on the
session's nats-server, its own JetStream stream. A remote host can be stopped
(its runs end where they are, as in a crash) and started again (the new
server recovers what was running).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import nats
import pytest
from anyio.abc import TaskGroup
from conftest import fresh_stream_name
from servers import listen_port, serve

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    EventStore,
    PersistentAgent,
    RemoteAgentTransport,
)
from helix_agents.events import Event
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.fleet.host import NatsAgentHost
from helix_agents.server.fleet.runtime import NatsRuntime
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from helix_agents.transports.nats import NatsRemoteAgentTransport

__all__ = ["KINDS", "Children", "children_of", "until"]

KINDS = [
    pytest.param("local", id="local"),
    pytest.param("http", id="http"),
    pytest.param("nats", id="nats", marks=pytest.mark.nats),
]


@dataclass
class Children:
    """Where the children run: their store, and (remote) the transport and a restart."""

    kind: str
    store: EventStore
    agents: list[AgentConfig]
    transport: RemoteAgentTransport | None = None
    tg: TaskGroup | None = None
    _stop: anyio.Event = field(default_factory=anyio.Event)
    _stopped: anyio.Event = field(default_factory=anyio.Event)
    _port: int = 0
    _nats_url: str = ""

    def entry(self, agent: AgentConfig, mode: str = "blocking") -> PersistentAgent:
        return PersistentAgent(agent, mode=mode, transport=self.transport)  # type: ignore[arg-type]

    async def log(self, session_id: str) -> list[Event]:
        return list(await self.store.read(session_id))

    def control(self, executor: AgentExecutor) -> RemoteAgentTransport:
        """How the test reaches a child directly: its transport, or the parent's executor."""
        return self.transport or executor.service

    async def start_host(self) -> None:
        """Serve the children (again): a new ``AgentServer`` that recovers what was running."""
        assert self.tg is not None
        self._stop, self._stopped = anyio.Event(), anyio.Event()
        await self.tg.start(self._host)

    async def stop_host(self) -> None:
        """Stop the children's host as a crash would: its runs end where they are."""
        self._stop.set()
        await self._stopped.wait()

    async def _host(self, *, task_status: Any) -> None:
        try:
            with anyio.CancelScope() as scope:
                nc = None if self.kind == "http" else await nats.connect(self._nats_url)
                runtime = None if nc is None else NatsRuntime(nc)
                try:
                    async with AgentServer(self.agents, self.store, runtime=runtime) as server:
                        if self.kind == "http":
                            async with serve(create_http_app(server), port=self._port):
                                task_status.started()
                                await self._stop.wait()
                        else:
                            async with NatsAgentHost(server):
                                task_status.started()
                                await self._stop.wait()
                        scope.cancel()
                finally:
                    if nc is not None:
                        with anyio.CancelScope(shield=True):  # the scope is cancelled by now
                            await nc.close()
        finally:
            self._stopped.set()


@asynccontextmanager
async def children_of(
    kind: str, parent_store: EventStore, agents: list[AgentConfig], request: pytest.FixtureRequest
) -> AsyncIterator[Children]:
    if kind == "local":
        yield Children(kind, parent_store, agents)
        return
    async with anyio.create_task_group() as tg:
        if kind == "http":
            port = listen_port()
            host = Children(kind, MemoryEventStore(), agents, tg=tg, _port=port)
            async with HttpRemoteAgentTransport(
                f"http://127.0.0.1:{port}", max_retries=6, retry_base_delay=0.05, timeout=10
            ) as transport:
                host.transport = transport
                await host.start_host()
                yield host
                await host.stop_host()
        else:
            server = request.getfixturevalue("nats_server")
            stream = fresh_stream_name()
            store = await JetStreamEventStore.connect(server.url, stream=stream)
            client_store = await JetStreamEventStore.connect(server.url, stream=stream)
            client = await nats.connect(server.url)
            host = Children(kind, store, agents, tg=tg, _nats_url=server.url)
            host.transport = NatsRemoteAgentTransport(
                client, client_store, timeout=10, max_retries=6, retry_base_delay=0.05
            )
            try:
                await host.start_host()
                yield host
                await host.stop_host()
            finally:
                await client.close()
                await client_store.close()
                await store.close()


async def until(store: EventStore, session_id: str, test: Any) -> list[Event]:
    """Wait, tailing the log (no polling), until ``test(log)`` holds."""
    log = list(await store.read(session_id))
    if log and test(log):
        return log
    async for _ in store.tail(session_id, 0):
        log = list(await store.read(session_id))
        if test(log):
            return log
    raise AssertionError("tail ended")
