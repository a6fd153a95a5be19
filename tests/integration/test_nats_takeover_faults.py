"""Taking over a dead host's session, in the ways ``test_nats_soak.py`` found wanting.

- When a NATS node dies, reading the lease bucket fails for a while with
  nats-py's own errors (a timeout, "no response from stream"). A scan that
  met one used to end the host's takeover loop, and with it the host: the
  running sessions of a dead host were then never claimed. Now the scan
  fails, is logged, and runs again at the next round.
- A session whose run was cut can also be resumed by a request (a parent
  re-opening its child) once its lease lapsed. That resume used to append a
  second ``run_started`` with no claim between: now it claims the session
  (``host_claimed``) in the same compare-and-append as its new run.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import nats
import nats.errors
import pytest
from conftest import fresh_stream_name
from nats_server import NatsServer
from pydantic import BaseModel
from test_nats_owner_routing import single_run_violations

from helix_agents import EventStore, define_agent
from helix_agents.events import Completed, Event, HostClaimed, RunStarted, SessionCreated
from helix_agents.messages import UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteResumeRequest
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime
from helix_agents.server.fleet.leases import LEASE_BUCKET, lease_key
from helix_agents.stores import JetStreamEventStore

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 30
TTL = 0.6  # the host scans each TTL / 2


class Found(BaseModel):
    findings: str


class FailingGets:
    """A lease bucket whose first ``failures`` gets time out, as while a node's death is handled."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def get(self, key: str) -> Any:
        if self.failures > 0:
            self.failures -= 1
            raise nats.errors.TimeoutError
        return await self.inner.get(key)


def _researcher() -> Any:
    return define_agent(
        "researcher",
        output_schema=Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "tides"})]),
    )


async def _orphan(store: EventStore, session_id: str) -> None:
    """A session whose host died mid-run: running in the log, no lease."""
    await store.append(
        session_id,
        [
            SessionCreated(
                session_id=session_id,
                seq=1,
                ts=1.0,
                agent_type="researcher",
                run_id="run-dead",
                messages=[UserMessage(content="tides")],
            ),
            RunStarted(session_id=session_id, seq=2, ts=1.0, run_id="run-dead"),
        ],
        0,
    )


async def _completed(store: EventStore, session_id: str) -> None:
    """Wait until the session's log records its completion."""
    tail = store.tail(session_id)
    try:
        async for event in tail:
            if isinstance(event, Completed):
                return
    finally:
        await tail.aclose()  # type: ignore[attr-defined]


@asynccontextmanager
async def _orphaned(
    nats_server: NatsServer, lease_ttl: float
) -> AsyncIterator[tuple[JetStreamEventStore, Any, AgentServer, str]]:
    """A fresh stream holding one session cut mid-run, a connection, and a server for it
    (on the fleet runtime of host ``survivor``, with ``lease_ttl``)."""
    orphan = f"orphan-{uuid.uuid4().hex[:8]}"
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    nc = await nats.connect(nats_server.url)
    try:
        await _orphan(store, orphan)
        fleet = NatsRuntime(nc, host_id="survivor", lease_ttl=lease_ttl)
        yield store, nc, AgentServer([_researcher()], store, recover=False, runtime=fleet), orphan
    finally:
        await nc.close()
        await store.close()


async def test_a_scan_that_meets_a_nats_error_runs_again_and_claims_the_orphan(
    nats_server: NatsServer,
) -> None:
    async with _orphaned(nats_server, TTL) as (store, _nc, server, orphan):
        with anyio.fail_after(LIMIT):
            async with NatsAgentHost(server) as host:
                host.leases.kv = FailingGets(host.leases.kv, failures=3)  # type: ignore[assignment]
                await _completed(store, orphan)  # the host's own loop claims and resumes it
            log = await store.read(orphan)
    claims = [event for event in log if isinstance(event, HostClaimed)]
    assert [claim.host_id for claim in claims] == ["survivor"]
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    assert single_run_violations(log) == []


async def test_a_resume_that_takes_over_a_cut_run_claims_it_first(
    nats_server: NatsServer,
) -> None:
    async with _orphaned(nats_server, 60.0) as (store, _nc, server, orphan):
        with anyio.fail_after(LIMIT):
            # A long TTL: the host's scan never runs; the request takes the session over.
            async with NatsAgentHost(server):
                await server.resume_agent(RemoteResumeRequest(session_id=orphan))
                await _completed(store, orphan)
            log = await store.read(orphan)
    kinds = [type(event).__name__ for event in log[:5]]
    assert kinds == ["SessionCreated", "RunStarted", "HostClaimed", "RunStarted", "StepStarted"]
    claim = log[2]
    assert isinstance(claim, HostClaimed)
    assert (claim.host_id, claim.previous_host_id) == ("survivor", None)
    assert single_run_violations(log) == []
    assert [event.seq for event in log] == list(range(1, len(log) + 1))


async def test_the_orphan_scan_reads_only_the_logs_no_live_lease_covers(
    nats_server: NatsServer,
) -> None:
    """A new index's first round sweeps every log once; later rounds read only orphans.

    Three finished sessions, an orphan and a session a live host ("other")
    holds, written before any host ran (a new running index): the first
    round sweeps, reading each once, indexes the two running ones and claims
    the orphan. Later rounds read nothing: the orphan's run ended here (its
    entry goes without a read), "other" holds the rest. When "other" dies
    (its lease goes), the next round reads the held session afresh and
    claims it.
    """
    tag = uuid.uuid4().hex[:8]
    finished = [f"done-{tag}-{index}" for index in range(3)]
    orphan, held = f"orphan-{tag}", f"held-{tag}"
    store = await JetStreamEventStore.connect(nats_server.url, stream=fresh_stream_name())
    nc = await nats.connect(nats_server.url)
    fleet = NatsRuntime(nc, host_id="survivor", lease_ttl=60.0)
    server = AgentServer([_researcher()], store, recover=False, runtime=fleet)
    reads: list[str] = []
    try:
        for session_id in finished:
            await _orphan(store, session_id)
            await store.append(
                session_id,
                [Completed(session_id=session_id, seq=3, ts=1.0, output={"findings": "old"})],
                2,
            )
        await _orphan(store, orphan)
        await _orphan(store, held)
        with anyio.fail_after(LIMIT):
            # A long TTL: the host's own loop never scans; the test calls the scan.
            async with NatsAgentHost(server) as host:
                leases = await nc.jetstream().key_value(LEASE_BUCKET)
                await leases.put(lease_key(held), b"other")
                read = store.read

                async def counted(session_id: str, from_seq: int = 0) -> list[Event]:
                    reads.append(session_id)
                    return await read(session_id, from_seq)

                store.read = counted  # type: ignore[method-assign]
                assert await host.take_over_orphans() == [orphan]
                # Each once (the orphan's resume reads it again, after the scan).
                assert set(reads) == {*finished, orphan, held}
                assert [reads.count(session_id) for session_id in [*finished, held]] == [1] * 4
                await server.executor.wait_idle(orphan)
                # Its lease given back: the run's index entry went with it (before, a scan
                # could list the entry and find the lease gone, and read the log to be sure).
                # The release gives no event to wait on: polled, bounded by fail_after.
                while await host.leases.holder(orphan) is not None:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
                reads.clear()
                assert await host.take_over_orphans() == []
                assert reads == []  # the orphan's run ended here; "other" holds the rest
                reads.clear()
                assert await host.take_over_orphans() == []
                assert reads == []
                await leases.delete(lease_key(held))  # "other" died: its lease lapsed
                assert await host.take_over_orphans() == [held]
                assert set(reads) == {held}  # the scan's read afresh, then its resume's
                await server.executor.wait_idle(held)
                store.read = read  # type: ignore[method-assign]
                for session_id in (orphan, held):
                    log = await store.read(session_id)
                    claims = [event for event in log if isinstance(event, HostClaimed)]
                    assert [claim.host_id for claim in claims] == ["survivor"]
                    assert isinstance(log[-1], Completed)
    finally:
        await nc.close()
        await store.close()
