"""A remote child over HTTP: a lead agent here delegates to a researcher served elsewhere.

The researcher is served over the HTTP+SSE protocol (``specs/http.md``); the
lead reaches it with ``create_remote_sub_agent_tool`` and an
``HttpRemoteAgentTransport``. The researcher's chunks flow into the lead's log
and stream like a local child's, and its JSON output is validated into
``Findings`` at the lead. The models are scripted: no LLM is called.

Run it with the server in this process (uvicorn on a free loopback port)::

    python examples/remote_child_http.py

or against a server of its own, started first::

    helix-agents serve examples.remote_child_http:served --port 4100 --store memory://
    python examples/remote_child_http.py --url http://127.0.0.1:4100
"""

from __future__ import annotations

import argparse
import socket

import anyio
import uvicorn
from pydantic import BaseModel

from helix_agents import AgentConfig, AgentExecutor, create_remote_sub_agent_tool, define_agent
from helix_agents.events import ChildChunkForwarded
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport


class Query(BaseModel):
    query: str


class Findings(BaseModel):
    findings: str
    sources: int


class Answer(BaseModel):
    answer: str


researcher = define_agent(
    "researcher",
    output_schema=Findings,
    llm=ScriptedLLM(
        [ScriptedLLM.finish({"findings": "replay rebuilds state", "sources": 3}, text="Found it.")]
    ),
)
served = [researcher]
"""What ``helix-agents serve examples.remote_child_http:served`` serves."""


def lead_agent(url: str) -> AgentConfig[Answer]:
    """The lead, delegating to the researcher served at ``url``."""
    research = create_remote_sub_agent_tool(
        "researcher",
        description="Research a question on the research service",
        input_schema=Query,
        output_schema=Findings,
        transport=HttpRemoteAgentTransport(url),
        remote_agent_type="researcher",
    )
    return define_agent(
        "lead",
        output_schema=Answer,
        tools=[research],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("subagent__researcher", {"query": "Why event logs?"})],
                ScriptedLLM.finish({"answer": "Because replay rebuilds state."}),
            ]
        ),
    )


async def delegate(url: str) -> Answer:
    """Run the lead against the researcher at ``url``; print what reached its log."""
    lead = lead_agent(url)
    store = MemoryEventStore()
    async with AgentExecutor(store, [lead]) as executor:
        answer = await executor.run(lead, "Why event logs?", session_id="lead-1")
    forwarded = [e for e in await store.read("lead-1") if isinstance(e, ChildChunkForwarded)]
    print(f"{len(forwarded)} chunks of the remote researcher reached the lead's log")
    print(f"answer: {answer.answer}")
    await store.close()
    return answer


async def main(url: str | None) -> Answer:
    """Delegate to ``url``, or to a server started here for the run."""
    if url is not None:
        return await delegate(url)
    # Bind first: the port is known and connections queue until uvicorn accepts them.
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    app = create_http_app(AgentServer(served, MemoryEventStore(), owns_store=True))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: server.serve(sockets=[listener]))
        try:
            answer = await delegate(f"http://127.0.0.1:{port}")
        finally:
            server.should_exit = True
    return answer


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running server (default: start one in this process)")
    anyio.run(main, parser.parse_args().url)
