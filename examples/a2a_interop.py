"""A2A both ways: a helix agent served over A2A, and an A2A agent as a helix sub-agent.

1. The gateway serves every agent over A2A with no flag: a2a-sdk's own client
   reads the researcher's card, sends it a message and reads the task's
   stream (its text as an artifact, then its typed output).
2. A lead agent here delegates to an A2A agent with
   ``create_a2a_sub_agent_tool``: its artifacts stream into the lead's log
   and its output is validated into ``Findings``. The A2A agent here is the
   same researcher, reached through its A2A endpoint; any A2A agent's URL
   works the same way (``--url``).

The models are scripted: no LLM is called. Needs ``helix-agents[a2a]``::

    python examples/a2a_interop.py
    python examples/a2a_interop.py --url http://127.0.0.1:9999/some-agent
"""

from __future__ import annotations

import argparse
import socket

import anyio
import httpx
import uvicorn
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, SendMessageRequest, TaskState
from google.protobuf.json_format import MessageToDict
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent
from helix_agents.a2a import A2ARemoteAgentTransport, create_a2a_sub_agent_tool
from helix_agents.events import ChildChunkForwarded
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str
    sources: int


researcher = define_agent(
    "researcher",
    description="Researches a question and reports its findings",
    output_schema=Findings,
    llm=ScriptedLLM(
        [ScriptedLLM.finish({"findings": "replay rebuilds state", "sources": 3}, text="Found it.")]
    ),
)


async def a2a_client_to_helix(base: str) -> None:
    """Part 1: a2a-sdk's client talks to the helix researcher over A2A."""
    async with httpx.AsyncClient() as http:
        card = await A2ACardResolver(http, f"{base}/a2a/researcher").get_agent_card()
        print(f"card: {card.name} at {card.supported_interfaces[0].url}")
        client = ClientFactory(ClientConfig(streaming=True, httpx_client=http)).create(card)
        message = Message(
            role=Role.ROLE_USER, message_id="example-1", parts=[Part(text="Why event logs?")]
        )
        async for item in client.send_message(SendMessageRequest(message=message)):
            kind = item.WhichOneof("payload")
            if kind == "task":
                print(f"task {item.task.id}: {TaskState.Name(item.task.status.state)}")
            elif kind == "artifact_update":
                artifact = MessageToDict(item.artifact_update.artifact)
                print(f"artifact {artifact['artifactId']}: {artifact['parts'][0]}")
            elif kind == "status_update":
                print(f"status: {TaskState.Name(item.status_update.status.state)}")


async def helix_lead_to_a2a(agent_url: str) -> Findings:
    """Part 2: a helix lead delegates to the A2A agent at ``agent_url``."""
    async with A2ARemoteAgentTransport(agent_url) as transport:
        research = create_a2a_sub_agent_tool(
            "researcher",
            description="Research a question with the A2A research agent",
            input_schema=Query,
            output_schema=Findings,
            transport=transport,
        )
        lead = define_agent(
            "lead",
            output_schema=Findings,
            tools=[research],
            llm=ScriptedLLM(
                [
                    [ScriptedLLM.call("subagent__researcher", {"query": "Why event logs?"})],
                    ScriptedLLM.finish({"findings": "logs replay", "sources": 3}),
                ]
            ),
        )
        store = MemoryEventStore()
        async with AgentExecutor(store, [lead]) as executor:
            answer = await executor.run(lead, "Why event logs?", session_id="lead-1")
        forwarded = [e for e in await store.read("lead-1") if isinstance(e, ChildChunkForwarded)]
    print(f"{len(forwarded)} chunks of the A2A agent reached the lead's log")
    print(f"lead: {answer.findings} ({answer.sources} sources)")
    return answer


async def main(url: str | None) -> None:
    """Serve the researcher on a free loopback port, then run both parts."""
    # Listening first: the port is known and connections wait until uvicorn accepts them.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    port = listener.getsockname()[1]
    base = f"http://127.0.0.1:{port}"
    app = create_http_app(AgentServer([researcher], MemoryEventStore(), owns_store=True))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[listener]))
        try:
            await a2a_client_to_helix(base)
            await helix_lead_to_a2a(url or f"{base}/a2a/researcher")
        finally:
            server.should_exit = True


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="an A2A agent for part 2 (default: the researcher here)")
    anyio.run(main, parser.parse_args().url)
