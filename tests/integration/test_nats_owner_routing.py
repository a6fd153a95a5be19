"""A fleet answers control requests as one server would: the lease holder decides.

Three hosts (in this process, each with its own NATS connection and store on
one stream) share the requests in their queue group, so a request about a
session lands on any of them. A session runs on one host, blocked in its
model. Its status says ``isExecuting: true`` whichever host is asked, a
resume answers the running run's id (409 ``ALREADY_RUNNING`` with a message)
and never starts a second run, and a Hypothesis-chosen mix of concurrent
status, resume and interrupt requests leaves a log with at most one live run
at every point: no ``run_started`` follows another without the run's end (or
a ``host_claimed``) between them.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import anyio
import nats
import pytest
from conftest import fresh_stream_name
from hypothesis import given, settings, strategies as st
from nats.js.errors import KeyNotFoundError
from nats_server import NatsServer

from helix_agents import AgentConfig, define_agent
from helix_agents.errors import AgentServerError, UsageError
from helix_agents.events import (
    Aborted,
    Completed,
    Event,
    Failed,
    HostClaimed,
    Interrupted,
    RunStarted,
    Suspended,
)
from helix_agents.models import LLMRequest, LLMStreamEvent, ScriptedLLM
from helix_agents.protocol import RemoteResumeRequest, RemoteStartRequest
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime
from helix_agents.server.fleet.leases import lease_key
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 60
TTL = 60.0  # no lease lapses and no takeover scan runs during a test
RUN_ENDS = (Interrupted, Aborted, Suspended, Completed, Failed)


class Gate:
    """A model that blocks every call until ``release``, then says "done"."""

    def __init__(self) -> None:
        self.called = anyio.Event()
        self.release = anyio.Event()

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMStreamEvent]:
        self.called.set()
        await self.release.wait()
        async for event in ScriptedLLM(["done"]).stream(request):
            yield event


def worker(gate: Gate) -> AgentConfig:
    return define_agent("worker", llm=gate)  # type: ignore[arg-type]


@dataclass
class Fleet:
    hosts: list[NatsAgentHost]
    client: NatsRemoteAgentTransport
    store: JetStreamEventStore

    def running_on(self, session_id: str) -> list[str]:
        """The hosts with a run of the session active now."""
        return [h.host_id for h in self.hosts if h.server.executor.is_executing(session_id)]

    async def wait_idle(self, session_id: str) -> None:
        for host in self.hosts:
            await host.server.executor.wait_idle(session_id)


@asynccontextmanager
async def fleet(
    url: str, gate: Gate, size: int = 3, forward_timeout: float = 4.0
) -> AsyncIterator[Fleet]:
    """``size`` hosts of the worker on a fresh stream, and a client."""
    stream = fresh_stream_name()
    async with AsyncExitStack() as stack:
        hosts = []
        for number in range(1, size + 1):
            store = await JetStreamEventStore.connect(url, stream=stream)
            stack.push_async_callback(store.close)
            nc = await nats.connect(url)
            stack.push_async_callback(nc.close)
            fleet = NatsRuntime(nc, host_id=f"H{number}", lease_ttl=TTL)
            server = AgentServer([worker(gate)], store, recover=False, runtime=fleet)
            host = NatsAgentHost(server, forward_timeout=forward_timeout)
            hosts.append(await stack.enter_async_context(host))
        store = await JetStreamEventStore.connect(url, stream=stream)
        stack.push_async_callback(store.close)
        nc = await nats.connect(url)
        stack.push_async_callback(nc.close)
        yield Fleet(hosts, NatsRemoteAgentTransport(nc, store), store)


def single_run_violations(log: list[Event]) -> list[int]:
    """Seqs of ``run_started`` events that began while another run was live."""
    live = False
    bad: list[int] = []
    for event in log:
        if isinstance(event, RunStarted):
            if live:
                bad.append(event.seq)
            live = True
        elif isinstance(event, (*RUN_ENDS, HostClaimed)):
            live = False
    return bad


async def start_blocked(f: Fleet, gate: Gate, session_id: str) -> str:
    """Start the session and wait until its run is in the model; its run id."""
    started = await f.client.start(
        RemoteStartRequest(session_id=session_id, agent_type="worker", message="go")
    )
    await gate.called.wait()
    assert len(f.running_on(session_id)) == 1
    return started.run_id


async def test_status_of_a_running_session_is_executing_whichever_host_answers(
    nats_server: NatsServer,
) -> None:
    gate = Gate()
    session_id = f"route-status-{uuid.uuid4().hex[:8]}"
    async with fleet(nats_server.url, gate) as f:
        with anyio.fail_after(LIMIT):
            await start_blocked(f, gate, session_id)
            statuses = [await f.client.get_status(session_id) for _ in range(20)]
            gate.release.set()
            await f.wait_idle(session_id)
            final = await f.client.get_status(session_id)
    assert [s.is_executing for s in statuses] == [True] * 20
    assert {s.status for s in statuses} == {"running"}
    assert final.status == "completed"
    assert not final.is_executing


async def test_resume_of_a_running_session_never_starts_a_second_run(
    nats_server: NatsServer,
) -> None:
    gate = Gate()
    session_id = f"route-resume-{uuid.uuid4().hex[:8]}"
    async with fleet(nats_server.url, gate) as f:
        with anyio.fail_after(LIMIT):
            run_id = await start_blocked(f, gate, session_id)
            owner = f.running_on(session_id)
            resumed = [
                await f.client.resume(RemoteResumeRequest(session_id=session_id)) for _ in range(8)
            ]
            refusals = []
            for _ in range(4):
                with pytest.raises(AgentServerError) as refused:
                    await f.client.resume(
                        RemoteResumeRequest(session_id=session_id, message="more")
                    )
                refusals.append(refused.value.code)
            assert f.running_on(session_id) == owner
            gate.release.set()
            await f.wait_idle(session_id)
            log = await f.store.read(session_id)
    assert [r.run_id for r in resumed] == [run_id] * 8
    assert refusals == ["ALREADY_RUNNING"] * 4
    assert [e.run_id for e in log if isinstance(e, RunStarted)] == [run_id]
    assert isinstance(log[-1], Completed)


OPS = st.lists(
    st.sampled_from(["status", "resume", "resume_message", "interrupt"]), min_size=1, max_size=10
)


@settings(max_examples=6)
@given(waves=st.lists(OPS, min_size=1, max_size=3))
async def test_concurrent_control_through_three_hosts_keeps_one_live_run(
    nats_server: NatsServer, waves: list[list[str]]
) -> None:
    gate = Gate()
    session_id = f"route-hammer-{uuid.uuid4().hex[:8]}"
    answers: list[tuple[str, str]] = []
    async with fleet(nats_server.url, gate) as f:
        with anyio.fail_after(LIMIT):
            await start_blocked(f, gate, session_id)

            async def send(op: str) -> None:
                try:
                    if op == "status":
                        status = await f.client.get_status(session_id)
                        answers.append((op, status.status))
                    elif op == "interrupt":
                        await f.client.interrupt(session_id, "hammer")
                        answers.append((op, "ok"))
                    else:
                        message = "more" if op == "resume_message" else None
                        request = RemoteResumeRequest(session_id=session_id, message=message)
                        await f.client.resume(request)
                        answers.append((op, "ok"))
                except AgentServerError as exc:
                    answers.append((op, exc.code))
                assert len(f.running_on(session_id)) <= 1

            for wave in waves:
                async with anyio.create_task_group() as tg:
                    for op in wave:
                        tg.start_soon(send, op)
            gate.release.set()
            await f.wait_idle(session_id)
            log = await f.store.read(session_id)
            final = await f.client.get_status(session_id)
    assert single_run_violations(log) == []
    allowed = {
        "status": {"running", "interrupted", "completed"},
        "interrupt": {"ok", "ALREADY_COMPLETED"},
        "resume": {"ok", "ALREADY_COMPLETED"},
        "resume_message": {"ok", "ALREADY_RUNNING", "ALREADY_COMPLETED"},
    }
    assert [(op, a) for op, a in answers if a not in allowed[op]] == []
    assert final.status in {"interrupted", "completed"}
    assert not final.is_executing


async def test_a_host_that_leaves_gives_back_the_leases_of_its_finished_runs(
    nats_server: NatsServer,
) -> None:
    gate = Gate()
    session_id = f"route-leave-{uuid.uuid4().hex[:8]}"
    stream = fresh_stream_name()
    url = nats_server.url
    store = await JetStreamEventStore.connect(url, stream=stream)
    nc = await nats.connect(url)
    try:
        with anyio.fail_after(LIMIT):
            fleet = NatsRuntime(nc, host_id="L", lease_ttl=TTL)
            host = NatsAgentHost(AgentServer([worker(gate)], store, recover=False, runtime=fleet))
            async with host:
                await host.server.start_agent(
                    RemoteStartRequest(session_id=session_id, agent_type="worker", message="go")
                )
                await gate.called.wait()
                held = await host.leases.holder(session_id)
                gate.release.set()  # leaving waits for the run; its releaser is stopped
            kv = await nc.jetstream().key_value("helix_leases")
            with pytest.raises(KeyNotFoundError):
                await kv.get(lease_key(session_id))
    finally:
        await nc.close()
        await store.close()
    assert held == "L"


async def test_a_holder_gone_or_silent_is_never_bypassed(nats_server: NatsServer) -> None:
    """A lease held by a host that is gone (no responders) or silent (no answer in time).

    The hosts asked answer from the log what it alone can say, starting
    nothing: the status (no run executing), 409 ``ALREADY_COMPLETED`` for a
    finished session; a resume of an interrupted one is refused 503
    ``UNAVAILABLE`` until the lease lapses (here: is deleted), after which any
    host resumes it.
    """
    gate = Gate()
    finished = f"route-ghost-done-{uuid.uuid4().hex[:8]}"
    stopped = f"route-ghost-stop-{uuid.uuid4().hex[:8]}"
    async with fleet(nats_server.url, gate, size=2, forward_timeout=0.5) as f:
        with anyio.fail_after(LIMIT):
            await start_blocked(f, gate, stopped)
            await f.client.interrupt(stopped, "pause")
            await f.wait_idle(stopped)
            gate.release.set()
            await f.client.start(
                RemoteStartRequest(session_id=finished, agent_type="worker", message="go")
            )
            await f.wait_idle(finished)
            nc = f.client.nc
            kv = await nc.jetstream().key_value("helix_leases")
            silent = await nc.subscribe("helix.rpc.host.silent.>")  # takes requests, never answers
            answers: dict[str, list[object]] = {}
            for holder in ("ghost", "silent"):
                got: list[object] = []
                for session_id in (finished, stopped):
                    await kv.put(lease_key(session_id), holder.encode())
                    status = await f.client.get_status(session_id)
                    got.append((status.status, status.is_executing))
                    with pytest.raises(AgentServerError) as refused:
                        await f.client.resume(RemoteResumeRequest(session_id=session_id))
                    got.append(refused.value.code)
                answers[holder] = got
            await silent.unsubscribe()
            await kv.delete(lease_key(stopped))  # as its expiry would
            resumed = await f.client.resume(RemoteResumeRequest(session_id=stopped))
            await f.wait_idle(stopped)
            log = await f.store.read(stopped)
    expected = [("completed", False), "ALREADY_COMPLETED", ("interrupted", False), "UNAVAILABLE"]
    assert answers == {"ghost": expected, "silent": expected}
    assert resumed.session_id == stopped
    assert [type(e).__name__ for e in log].count("RunStarted") == 2
    assert isinstance(log[-1], Completed)
    assert single_run_violations(log) == []


@pytest.mark.parametrize(
    "options",
    [
        {"host_id": "has.dot"},
        {"host_id": ""},
        {"host_id": "x" * 65},
        {"lease_ttl": 0},
        {"forward_timeout": -1},
        {"replicas": 0},
        {"replicas": 6},
        {"replicas": True},
    ],
)
def test_bad_host_options_are_refused(options: dict[str, object]) -> None:
    server = AgentServer([worker(Gate())], MemoryEventStore(), recover=False)
    fleet_options = {k: v for k, v in options.items() if k != "forward_timeout"}
    forward_timeout = float(options.get("forward_timeout", 4.0))  # type: ignore[arg-type]
    with pytest.raises(UsageError):
        NatsAgentHost(
            AgentServer(
                [worker(Gate())],
                MemoryEventStore(),
                recover=False,
                runtime=NatsRuntime(object(), **fleet_options),  # type: ignore[arg-type]
            ),
            forward_timeout=forward_timeout,
        )
    assert server.run_guard is None
