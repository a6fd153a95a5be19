"""A schedule on a two-host NATS fleet: each tick starts exactly one run.

Both hosts fire the fleet's schedules (``NatsAgentHost(run_schedules=True)``,
as ``helix-agents host`` does); they wake for the same ticks and race to
claim each on the shared JetStream log. The schedule is made through the
fleet's gateway (``POST /crons``, checked against the agent types the hosts
announce). Every tick claimed has exactly one session, and no session is
started without a claimed tick.
"""

from __future__ import annotations

import anyio
import httpx
import nats
import pytest
from conftest import fresh_stream_name
from cron_app import echo
from nats_server import NatsServer
from servers import serve

from helix_agents.events import ScheduleFired, SessionCreated
from helix_agents.ids import SCHEDULES_LOG
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime, create_http_app
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

pytestmark = [pytest.mark.slow, pytest.mark.nats]

LIMIT = 30
TICKS = 4


async def test_two_hosts_fire_each_tick_of_a_schedule_once(nats_server: NatsServer) -> None:
    stream = fresh_stream_name()
    url = nats_server.url
    stores = [await JetStreamEventStore.connect(url, stream=stream) for _ in range(3)]
    conns = [await nats.connect(url) for _ in range(3)]
    gateway_store, host_stores = stores[0], stores[1:]
    try:
        with anyio.fail_after(LIMIT):
            servers = [
                AgentServer([echo], store, recover=False, runtime=NatsRuntime(nc))
                for store, nc in zip(host_stores, conns[1:], strict=True)
            ]
            async with (
                NatsAgentHost(servers[0], run_schedules=True, schedule_poll=0.2),
                NatsAgentHost(servers[1], run_schedules=True, schedule_poll=0.2),
            ):
                gateway = create_http_app(NatsRemoteAgentTransport(conns[0], gateway_store))
                async with serve(gateway) as base, httpx.AsyncClient(base_url=base) as http:
                    unknown = await http.post(
                        "/crons",
                        json={"intervalSeconds": 1, "start": {"agentType": "x", "message": "m"}},
                    )
                    assert unknown.status_code == 400, unknown.text
                    made = await http.post(
                        "/crons",
                        json={
                            "id": "fleet",
                            "intervalSeconds": 1,
                            "start": {"agentType": "echo", "message": "tick"},
                        },
                    )
                    assert made.status_code == 200, made.text
                    while (await http.get("/crons/fleet")).json()["fired"] < TICKS:  # noqa: ASYNC110
                        await anyio.sleep(0.1)
                    deleted = await http.delete("/crons/fleet")
                    assert deleted.status_code == 200, deleted.text
                    listed = await http.get("/sessions", params={"metadata.cronId": "fleet"})
                    assert listed.status_code == 200, listed.text
            fired = [
                e for e in await gateway_store.read(SCHEDULES_LOG) if isinstance(e, ScheduleFired)
            ]
            sessions = {s["sessionId"] for s in listed.json()["sessions"]}
            # A start under way when the schedule was deleted lands after the list: read its log.
            for event in fired:
                created = (await gateway_store.read(event.run_session_id))[0]
                assert isinstance(created, SessionCreated)
                assert created.metadata["cronId"] == "fleet"
                sessions.add(event.run_session_id)
    finally:
        for nc in conns:
            await nc.close()
        for store in stores:
            await store.close()
    ticks = [event.tick for event in fired]
    assert len(ticks) >= TICKS
    assert len(set(ticks)) == len(ticks), ticks  # each tick claimed by one host
    assert sessions == {f"cron.fleet.{int(tick)}" for tick in ticks}  # and one run each
