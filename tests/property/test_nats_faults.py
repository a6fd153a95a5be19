"""NATS under the fault schedules: the transport suite's plans, plus faults on the wire.

The transport fault suite (``test_transport_faults.py``) plays Hypothesis plans
of failed, delayed, dropped and duplicated calls and streams on the
in-process and HTTP transports. Here the same plans run on the NATS
transport (``NatsRemoteAgentTransport`` to a ``NatsAgentHost`` on a real
``nats-server``), and under them a second, Hypothesis-drawn plan faults the
NATS protocol itself: a loopback proxy that parses NATS frames
(``tests/nats_fault_proxy.py``) stands between the client (its requests and
its store's JetStream consumer) and the server, and drops, duplicates,
delays or reorders the control requests, the hosts' replies and the
consumer's deliveries, or cuts the connection as a node's death would.

Asserted, as on the other transports (DESIGN.md section 8):

- the parent's run under the transport plan matches the budget predicate
  (``check_plan``): within budget its output, forwarded chunks and stream
  equal the fault-free run's (exactly once per seq, no gap); over budget a
  prefix, then the failure; the wire faults stay within the NATS transport's
  own retries (at most two requests or replies lost, five tries) and the
  store's, so they change none of it;
- starts are idempotent: a request delivered twice, or retried after its
  reply was lost, makes one session with one ``run_started``, and every log
  the host wrote runs 1..n;
- a store's tail, under delivery faults and connection cuts and resumed by
  sequence after a cut, yields every event after its start exactly once, in
  order, with the poller's sweep turned off: a lost delivery is found by the
  probe (``stores.md``, "tail").

Bounded for CI: a few dozen examples, about half a minute in all.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import anyio
import nats
import pytest
from budgets import budget
from conftest import fresh_stream_name
from hypothesis import event, given, note, settings, strategies as st
from nats_fault_proxy import NatsFaultProxy, WireFault, nats_fault_proxy
from nats_server import NatsServer
from test_transport_faults import (
    CHILD_TYPES,
    FAULT_SETTINGS,
    KINDS,
    PLANS,
    RETRIES,
    ChildKind,
    Gate,
    Remote,
    check_plan,
    remote_agents,
)

from helix_agents.errors import StoreError
from helix_agents.events import Event, RunStarted, SessionCreated, TextDelta
from helix_agents.server import AgentServer
from helix_agents.server.fleet.host import NatsAgentHost
from helix_agents.server.fleet.runtime import NatsRuntime
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports import Fault
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.nats, pytest.mark.slow]

POLL = 0.1
"""The client store's poll interval: a lost delivery is found within two."""

REQUEST_TIMEOUT = 1.0
"""Seconds the NATS transport waits for a host's reply (a lost one costs this)."""


# --- the NATS side: a host on a real nats-server, the client behind the fault proxy ---------


@dataclass
class NatsRemote(Remote):
    """A :class:`Remote` over NATS, with the proxy in the client's way and the host's store."""

    wire: NatsFaultProxy | None = None
    host_store: JetStreamEventStore | None = None


@asynccontextmanager
async def nats_side(server_url: str) -> AsyncIterator[NatsRemote]:
    gate = Gate()
    stream = fresh_stream_name()
    store = await JetStreamEventStore.connect(server_url, stream=stream)
    host_nc = await nats.connect(server_url)
    server = AgentServer(remote_agents(gate), store, runtime=NatsRuntime(host_nc))
    try:
        async with nats_fault_proxy(server_url) as proxy:
            client_nc = await nats.connect(proxy.url, reconnect_time_wait=0.2)
            client_store = await JetStreamEventStore.connect(
                proxy.url, stream=stream, poll_interval=POLL
            )
            client_store._watch.sweep_every = None  # a lost delivery must be found, not swept
            transport = NatsRemoteAgentTransport(
                client_nc,
                client_store,
                timeout=REQUEST_TIMEOUT,
                max_retries=4,  # two lost on the wire, two slow on a loaded machine
                retry_base_delay=0.01,
            )
            try:
                with anyio.CancelScope() as scope:
                    async with NatsAgentHost(server):
                        try:
                            yield NatsRemote(transport, server, gate, wire=proxy, host_store=store)
                        finally:
                            gate.open()
                            scope.cancel()  # children a failed call left running
            finally:
                await client_store.close()
                await client_nc.close()
    finally:
        await host_nc.close()
        await store.close()


@pytest.fixture
async def over_nats(nats_server: NatsServer) -> AsyncIterator[NatsRemote]:
    async with nats_side(nats_server.url) as remote:
        yield remote


# --- wire plans ----------------------------------------------------------------------------

SECONDS = st.just(0.02)
LOSSY = st.builds(
    WireFault,
    target=st.sampled_from(["request", "reply"]),
    kind=st.just("drop"),
    nth=st.integers(0, 3),
)
HARMLESS_RPC = st.builds(
    WireFault,
    target=st.sampled_from(["request", "reply"]),
    kind=st.sampled_from(["duplicate", "delay"]),
    nth=st.integers(0, 3),
    seconds=SECONDS,
)
DELIVERY = st.builds(
    WireFault,
    target=st.just("delivery"),
    kind=st.sampled_from(["drop", "duplicate", "delay", "reorder"]),
    nth=st.integers(0, 15),
    seconds=SECONDS,
)


def _one_per_frame(faults: list[WireFault]) -> list[WireFault]:
    """At most one fault per (target, nth): the proxy plays one."""
    seen: dict[tuple[str, int], WireFault] = {}
    for fault in faults:
        seen.setdefault((fault.target, fault.nth), fault)
    return list(seen.values())


WIRE_PLANS = st.tuples(
    st.lists(LOSSY, max_size=2),  # within the NATS transport's retries (4 tries)
    st.lists(HARMLESS_RPC, max_size=3),
    st.lists(DELIVERY, max_size=4),
).map(lambda parts: _one_per_frame([*parts[0], *parts[1], *parts[2]]))


async def new_child_logs(store: JetStreamEventStore, before: set[str]) -> dict[str, list[Event]]:
    return {
        session_id: list(await store.read(session_id))
        for session_id in await store.list_sessions()
        if session_id not in before
    }


# --- the transport plans, on NATS, over a faulty wire ------------------------------------------


@settings(FAULT_SETTINGS, max_examples=budget(ci=8, long=24))
@given(kind=KINDS, retries=RETRIES, plan=PLANS, wire=WIRE_PLANS)
async def test_fault_schedules_over_nats_with_wire_faults(
    over_nats: NatsRemote,
    kind: ChildKind,
    retries: int,
    plan: list[Fault],
    wire: list[WireFault],
) -> None:
    proxy, store = over_nats.wire, over_nats.host_store
    assert proxy is not None
    assert store is not None
    proxy.play([])
    await over_nats.baseline(CHILD_TYPES[kind])  # fault-free, wire included
    before = set(await store.list_sessions())
    note(f"wire plan: {wire}")

    proxy.play(wire)
    await check_plan(over_nats, kind, retries, plan)
    fired = list(proxy.fired)
    proxy.play([])
    event(f"wire faults fired: {sorted({f'{f.target} {f.kind}' for f in fired})}")

    # Idempotent starts, gap-free logs: whatever the wire did to the requests.
    for session_id, log in (await new_child_logs(store, before)).items():
        assert [e.seq for e in log] == list(range(1, len(log) + 1)), session_id
        assert sum(isinstance(e, SessionCreated) for e in log) == 1, session_id
        assert sum(isinstance(e, RunStarted) for e in log) == 1, session_id


# --- a store's tail under delivery faults and cuts ---------------------------------------------

TAIL_LIMIT = 15.0
"""Seconds one example may take (a cut costs nats-py's reconnect wait, 2 s)."""


def _delta(session_id: str, seq: int) -> TextDelta:
    return TextDelta(
        session_id=session_id, seq=seq, ts=1.0, agent_id=session_id, agent_type="a", delta=str(seq)
    )


@st.composite
def tail_plans(draw: st.DrawFn, deliveries: int) -> list[WireFault]:
    """Faults on the first ``deliveries`` deliveries: at most one cut, the rest harmless kinds."""
    nth = st.integers(0, deliveries - 1)
    faults = draw(
        st.lists(
            st.builds(
                WireFault,
                target=st.just("delivery"),
                kind=st.sampled_from(["drop", "duplicate", "delay", "reorder"]),
                nth=nth,
                seconds=SECONDS,
            ),
            max_size=3,
        )
    )
    if draw(st.integers(0, 5)) == 0:  # a cut costs nats-py's reconnect wait: one in six
        faults.insert(0, WireFault(target="delivery", kind="cut", nth=draw(nth)))
    return _one_per_frame(faults)


@dataclass
class TailSide:
    server: NatsServer
    proxy: NatsFaultProxy
    writer: JetStreamEventStore
    stream: str


@pytest.fixture
async def tail_side(nats_server: NatsServer) -> AsyncIterator[TailSide]:
    stream = fresh_stream_name()
    writer = await JetStreamEventStore.connect(nats_server.url, stream=stream)
    try:
        async with nats_fault_proxy(nats_server.url) as proxy:
            yield TailSide(nats_server, proxy, writer, stream)
    finally:
        await writer.close()


@settings(FAULT_SETTINGS, max_examples=budget(ci=8, long=40))
@given(
    shape=st.integers(1, 6).flatmap(lambda after: st.tuples(st.just(after), tail_plans(after))),
    before=st.integers(1, 3),
    from_seq=st.integers(0, 3),
    burst=st.booleans(),
)
async def test_a_tail_under_delivery_faults_yields_each_event_once_in_order(
    tail_side: TailSide,
    shape: tuple[int, list[WireFault]],
    before: int,
    from_seq: int,
    burst: bool,
) -> None:
    """Appends made elsewhere reach the tail exactly once, in order, sweep off."""
    after, plan = shape
    from_seq = min(from_seq, before - 1)
    total = before + after
    session_id = f"tail-{uuid.uuid4().hex[:10]}"
    writer, proxy = tail_side.writer, tail_side.proxy
    for seq in range(1, before + 1):
        await writer.append(session_id, [_delta(session_id, seq)], seq - 1)
    # A fresh store, so a fault can hit its consumer's very first deliveries.
    tailing = await JetStreamEventStore.connect(
        proxy.url, stream=tail_side.stream, poll_interval=POLL
    )
    tailing._watch.sweep_every = None
    proxy.play(plan)
    got: list[int] = []
    reopened = 0
    seen = {seq: anyio.Event() for seq in range(1, total + 1)}

    async def write() -> None:
        await seen[before].wait()  # the catch-up read is done: the rest is delivered
        for seq in range(before + 1, total + 1):
            if not burst:
                await seen[seq - 1].wait()
            await writer.append(session_id, [_delta(session_id, seq)], seq - 1)

    async def follow() -> None:
        nonlocal reopened
        while not got or got[-1] < total:
            try:
                # Resumed by sequence after a broken connection, as a client does.
                async for item in tailing.tail(session_id, got[-1] if got else from_seq):
                    got.append(item.seq)
                    seen[item.seq].set()
                    if item.seq == total:
                        return
            except StoreError:
                reopened += 1

    try:
        with anyio.fail_after(TAIL_LIMIT):
            async with anyio.create_task_group() as tg:
                tg.start_soon(follow)
                tg.start_soon(write)
    finally:
        fired = list(proxy.fired)
        proxy.play([])
        await tailing.close()
    event(f"fired: {sorted({f.kind for f in fired})}")
    note(f"fired {fired}, reopened {reopened}")
    assert got == list(range(from_seq + 1, total + 1))
