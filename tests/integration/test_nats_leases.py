"""A session's lease is taken before its run begins, so no other host can claim it live.

Host A runs the sessions; host B serves the same agent types and looks for
orphans (``take_over_orphans``, what its takeover loop runs) at the moment A's
run has begun: right after a start wrote the session's first events (held
there by A's store), while a local child of a running session waits on its
model, and right after an answer to a paused session resumed it. B claims
none of them. The lease TTL is long, so no renewal of A's can cover a
session in the meantime: only a lease taken before the run began can.

Also: a start that begins no run here gives back the lease it took, and
leaves another host's lease alone.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from nats.aio.client import Client as NatsClient
from nats.js.errors import KeyNotFoundError
from nats_server import NatsServer
from pydantic import BaseModel
from wrapped_store import WrappedStore

from helix_agents import AgentConfig, EventStore, create_sub_agent_tool, define_agent, define_tool
from helix_agents.errors import AgentServerError, HelixError
from helix_agents.events import Event, HostClaimed, RunStarted
from helix_agents.models import LLMRequest, LLMStreamEvent, ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime
from helix_agents.server.fleet.leases import LEASE_BUCKET, lease_key
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 30
TTL = 60.0  # A renews each TTL/3 and B scans by itself each TTL/2: never during a test


class Query(BaseModel):
    query: str


class Found(BaseModel):
    findings: str


class Settings(BaseModel):
    depth: int = 1


class HeldAppend(WrappedStore):
    """Holds, once written, the first append to ``session_id`` that ``holds`` picks.

    ``done`` is set when it is written; the append returns once ``release`` is.
    """

    def __init__(
        self,
        inner: EventStore,
        session_id: str,
        holds: Callable[[Sequence[Event], int], bool] = lambda _events, _expected: False,
    ) -> None:
        super().__init__(inner)
        self.session_id = session_id
        self.holds = holds
        self.done = anyio.Event()
        self.release = anyio.Event()

    async def append(self, session_id: str, events: Sequence[Event], expected_seq: int) -> int:
        last = await super().append(session_id, events, expected_seq)
        mine = session_id == self.session_id and not self.done.is_set()
        if mine and self.holds(events, expected_seq):
            self.done.set()
            await self.release.wait()
        return last


def creation(_events: Sequence[Event], expected_seq: int) -> bool:
    """The append that creates the session."""
    return expected_seq == 0


def resumption(events: Sequence[Event], _expected_seq: int) -> bool:
    """An append that begins a resumed run."""
    return any(isinstance(event, RunStarted) and event.mode == "resume" for event in events)


class HeldLLM:
    """A model that says when it is called, waits for ``release``, then answers as ``inner``."""

    def __init__(self, inner: ScriptedLLM) -> None:
        self.inner = inner
        self.called = anyio.Event()
        self.release = anyio.Event()

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        self.called.set()
        await self.release.wait()
        async for event in self.inner.stream(request):
            yield event


@dataclass
class Fleet:
    """Host A (runs the sessions) and host B (serves the same types, looks for orphans)."""

    a: NatsAgentHost
    b: NatsAgentHost
    store: JetStreamEventStore  # the shared stream, for reading the logs
    nc: NatsClient  # a client connection

    async def lease(self, session_id: str) -> str | None:
        """Who holds the session's lease now, if anyone."""
        kv = await self.nc.jetstream().key_value(LEASE_BUCKET)
        try:
            entry = await kv.get(lease_key(session_id))
        except KeyNotFoundError:
            return None
        return entry.value.decode() if entry.value else None

    async def expire_lease(self, session_id: str) -> None:
        """Remove the session's lease, as its expiry would."""
        kv = await self.nc.jetstream().key_value(LEASE_BUCKET)
        await kv.delete(lease_key(session_id))
        assert await self.lease(session_id) is None

    async def claims(self, session_id: str) -> list[HostClaimed]:
        return [e for e in await self.store.read(session_id) if isinstance(e, HostClaimed)]


@asynccontextmanager
async def fleet(
    url: str,
    a_agents: list[AgentConfig],
    b_agents: list[AgentConfig],
    held: str = "",
    holds: Callable[[Sequence[Event], int], bool] = creation,
) -> AsyncIterator[tuple[Fleet, HeldAppend]]:
    """Two hosts on one stream; A's store holds the append to ``held`` that ``holds`` picks."""
    stream = fresh_stream_name()
    a_store = HeldAppend(await JetStreamEventStore.connect(url, stream=stream), held, holds)
    b_store = await JetStreamEventStore.connect(url, stream=stream)
    reader = await JetStreamEventStore.connect(url, stream=stream)
    a_nc, b_nc, nc = await nats.connect(url), await nats.connect(url), await nats.connect(url)
    try:
        async with (
            NatsAgentHost(
                AgentServer(
                    a_agents,
                    a_store,
                    recover=False,
                    runtime=NatsRuntime(a_nc, host_id="A", lease_ttl=TTL),
                )
            ) as a,
            # B answers on other subjects, so every request reaches A.
            NatsAgentHost(
                AgentServer(
                    b_agents,
                    b_store,
                    recover=False,
                    runtime=NatsRuntime(b_nc, host_id="B", lease_ttl=TTL),
                ),
                prefix="elsewhere.rpc",
            ) as b,
        ):
            yield Fleet(a=a, b=b, store=reader, nc=nc), a_store
    finally:
        for connection in (nc, b_nc, a_nc):
            await connection.close()
        for store in (reader, b_store, a_store):
            await store.close()


def _researcher(llm: object = None) -> AgentConfig:
    return define_agent(
        "researcher",
        output_schema=Found,
        state_schema=Settings,
        llm=llm or ScriptedLLM([ScriptedLLM.finish({"findings": "tides"})]),  # type: ignore[arg-type]
    )


async def test_a_started_session_is_leased_before_its_first_event(
    nats_server: NatsServer,
) -> None:
    session_id = f"lease-start-{uuid.uuid4().hex[:8]}"
    async with fleet(nats_server.url, [_researcher()], [_researcher()], held=session_id) as (
        hosts,
        a_store,
    ):
        with anyio.fail_after(LIMIT):
            client = NatsRemoteAgentTransport(hosts.nc, hosts.store)
            async with anyio.create_task_group() as tg:
                request = RemoteStartRequest(
                    session_id=session_id, agent_type="researcher", message="tides"
                )
                tg.start_soon(client.start, request)
                await a_store.done.wait()  # running in the log; start_agent not returned
                assert await hosts.lease(session_id) == "A"
                assert await hosts.b.take_over_orphans() == []
                a_store.release.set()
            await hosts.a.server.executor.wait_idle(session_id)
            status = await hosts.a.server.get_status(session_id)
            assert await hosts.claims(session_id) == []
    assert status.status == "completed"


async def test_a_local_child_is_leased_before_its_run_begins(nats_server: NatsServer) -> None:
    parent_id = f"lease-child-{uuid.uuid4().hex[:8]}"
    held = HeldLLM(ScriptedLLM([ScriptedLLM.finish({"findings": "tides"})]))
    child = _researcher(held)
    planner = define_agent(
        "planner",
        output_schema=Found,
        tools=[create_sub_agent_tool(child, Query)],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__researcher", {"query": "tides"}, id="r1")],
                ScriptedLLM.finish({"findings": "tides"}),
            ]
        ),
    )
    # B serves the child's type at the top level: it would resume the child.
    async with fleet(nats_server.url, [planner], [_researcher()]) as (hosts, _):
        with anyio.fail_after(LIMIT):
            server = hosts.a.server
            await server.start_agent(
                RemoteStartRequest(session_id=parent_id, agent_type="planner", message="plan")
            )
            await held.called.wait()  # the child runs on A, waiting on its model
            (child_id,) = [s for s in server.executor.active_sessions() if s != parent_id]
            assert await hosts.lease(child_id) == "A"
            assert await hosts.b.take_over_orphans() == []
            held.release.set()
            await server.executor.wait_idle(parent_id)
            parent = await server.get_status(parent_id)
            assert await hosts.claims(child_id) == []
    assert parent.status == "completed"
    assert parent.output == {"findings": "tides"}


async def test_a_start_that_begins_no_run_here_gives_its_lease_back(
    nats_server: NatsServer,
) -> None:
    refused_id = f"lease-refused-{uuid.uuid4().hex[:8]}"
    running_id = f"lease-running-{uuid.uuid4().hex[:8]}"
    held = HeldLLM(ScriptedLLM([ScriptedLLM.finish({"findings": "tides"})]))
    async with fleet(nats_server.url, [_researcher(held)], [_researcher()]) as (hosts, _):
        with anyio.fail_after(LIMIT):
            # Refused (the state does not fit the schema): no run, no lease left.
            with pytest.raises(AgentServerError) as refused:
                await hosts.a.server.start_agent(
                    RemoteStartRequest(
                        session_id=refused_id,
                        agent_type="researcher",
                        message="tides",
                        state={"depth": "deep"},
                    )
                )
            assert refused.value.code == "INVALID_REQUEST"
            assert await hosts.lease(refused_id) is None

            # The same start at B while A runs it: B's guard refuses it (the host
            # forwards such a request to A), B starts nothing, A keeps its lease.
            request = RemoteStartRequest(
                session_id=running_id, agent_type="researcher", message="tides"
            )
            answer = await hosts.a.server.start_agent(request)
            await held.called.wait()
            with pytest.raises(HelixError, match="held by host 'A'"):
                await hosts.b.server.start_agent(request)
            assert not hosts.b.server.executor.is_executing(running_id)
            assert await hosts.lease(running_id) == "A"
            held.release.set()
            await hosts.a.server.executor.wait_idle(running_id)
    assert answer.session_id == running_id


async def test_a_session_resumed_by_an_answer_is_leased_before_its_run_begins(
    nats_server: NatsServer,
) -> None:
    session_id = f"lease-answer-{uuid.uuid4().hex[:8]}"

    def asker() -> AgentConfig:
        return define_agent(
            "asker",
            tools=[define_tool("confirm", "Asks the user to confirm.", Query, "client")],
            llm=ScriptedLLM([ScriptedLLM.call("confirm", {"query": "go?"}, id="c1"), "done"]),
        )

    async with fleet(nats_server.url, [asker()], [asker()], held=session_id, holds=resumption) as (
        hosts,
        a_store,
    ):
        with anyio.fail_after(LIMIT):
            server = hosts.a.server
            await server.start_agent(
                RemoteStartRequest(session_id=session_id, agent_type="asker", message="ask")
            )
            await server.executor.wait_idle(session_id)
            assert (await server.get_status(session_id)).status == "paused"
            await hosts.expire_lease(session_id)  # a person who answers after the TTL
            client = NatsRemoteAgentTransport(hosts.nc, hosts.store)
            async with anyio.create_task_group() as tg:
                tg.start_soon(client.submit_tool_result, session_id, "c1", "yes")
                await a_store.done.wait()  # the resumed run began; the answer not answered
                assert await hosts.lease(session_id) == "A"
                assert await hosts.b.take_over_orphans() == []
                a_store.release.set()
            await server.executor.wait_idle(session_id)
            status = await server.get_status(session_id)
            assert await hosts.claims(session_id) == []
    assert status.status == "completed"


async def test_a_lease_given_back_is_taken_again_and_a_stale_give_back_deletes_nothing(
    nats_server: NatsServer,
) -> None:
    session_id = f"lease-again-{uuid.uuid4().hex[:8]}"
    async with fleet(nats_server.url, [_researcher()], [_researcher()]) as (hosts, _):
        with anyio.fail_after(LIMIT):
            a, b = hosts.a, hosts.b
            first = await a.leases.take(session_id)  # a key never written
            assert first.created is not None
            assert await hosts.lease(session_id) == "A"
            assert await b.leases.take(session_id) == type(first)(holder="A")  # live: refused
            await a.leases.drop(session_id)
            assert await hosts.lease(session_id) is None
            again = await b.leases.take(session_id)  # written over A's delete marker
            assert again.created is not None
            assert again.created > first.created
            assert await hosts.lease(session_id) == "B"
            # A gives back the lease it held before: B's, written since, stays.
            a.leases.held[session_id] = first.created
            await a.leases.drop(session_id)
            assert await hosts.lease(session_id) == "B"
            await b.leases.drop(session_id)
            assert (await a.leases.take(session_id)).created is not None
            assert await hosts.lease(session_id) == "A"
            await a.leases.drop(session_id)
