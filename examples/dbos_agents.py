"""Agents as DBOS workflows: embedded, on a SQLite system database, no server.

A lead agent looks a city up with a tool, asks a local sub-agent (a child
workflow) for a verdict, and books a visit with a tool that needs a
person's approval: the run pauses, its workflow waits durably
(``DBOS.recv``), and the approval given at the root wakes it. Each model
call and each tool call is a DBOS step; every event still lands in the
session's log in the store, so ``helix-agents replay`` and ``check`` read it
as any other session.

Needs the ``dbos`` extra. Run it::

    python examples/dbos_agents.py [--dbos sqlite:///dbos.sqlite] [--store sqlite:///events.db]

Served over HTTP, the same agents run in the gateway's process (``serve
--dbos sqlite:///FILE``); on Postgres, more processes share the work::

    helix-agents serve examples.dbos_agents:agents --dbos postgresql://... --store URL
    helix-agents worker examples.dbos_agents:agents --dbos postgresql://... --store URL
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import create_sub_agent_tool, define_agent, define_tool
from helix_agents.events import InputRequired, SubAgentStart, TextDelta, ToolEnd, ToolStart
from helix_agents.models import FINISH_TOOL_NAME, ScriptedLLM
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteStartRequest
from helix_agents.stores import open_store


class City(BaseModel):
    city: str


class Verdict(BaseModel):
    verdict: str


def _population(value: City, ctx: Any) -> dict[str, Any]:
    return {"city": value.city, "population": 516_092}


def _book(value: City, ctx: Any) -> str:
    return f"visit to {value.city} booked"


judge = define_agent(
    "judge",
    description="Judges whether a city is big.",
    output_schema=Verdict,
    llm=ScriptedLLM([ScriptedLLM.finish({"verdict": "big enough"}, text="Weighing it up.")]),
)
lead = define_agent(
    "lead",
    description="Looks a city up, asks the judge, books a visit.",
    tools=[
        define_tool("population", "A city's population.", City, _population),
        define_tool("book", "Book a visit.", City, _book, requires_approval=True),
        create_sub_agent_tool(judge, City),
    ],
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("population", {"city": "Lyon"}, id="pop")],
            [ScriptedLLM.call("subagent__judge", {"city": "Lyon"}, id="ask")],
            [ScriptedLLM.call("book", {"city": "Lyon"}, id="book")],
            ScriptedLLM.reply("Lyon has 516092 people: big enough, and the visit is booked."),
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


async def run(system_database: str, store_url: str) -> Any:
    """Run the demo session to its end, approving the booking when asked; its output."""
    from helix_agents.dbos import DbosOptions, dbos_server

    session = f"dbos-demo-{uuid.uuid4().hex[:8]}"
    store = await open_store(store_url)
    try:
        options = DbosOptions(system_database=system_database)
        async with dbos_server(agents, store, options) as server:
            start = RemoteStartRequest(session_id=session, agent_type="lead", message="Lyon?")
            await server.start(start)
            async for event in server.stream(session):
                if isinstance(event, EndEvent):
                    print(f"output: {event.output}")
                    return event.output
                if not isinstance(event, ChunkEvent):
                    continue
                if line := describe(event.chunk):
                    print(line)
                if isinstance(event.chunk, InputRequired) and event.chunk.agent_id == session:
                    for entry in event.chunk.pending:
                        print(f"approving {entry.tool_name} (its paused workflow waits for it)")
                        await server.submit_approval(session, entry.tool_call_id, True)
        raise RuntimeError("the session's stream ended without its end")
    finally:
        await store.close()


def main() -> None:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--dbos", metavar="URL", help="DBOS's system database (default: temporary)")
    parser.add_argument("--store", help="the event store URL (default: a temporary SQLite file)")
    args = parser.parse_args()
    try:
        import dbos  # noqa: F401
    except ImportError:
        needs = "this example needs the dbos extra: pip install 'helix-agents[dbos]'"
        raise SystemExit(needs) from None
    with tempfile.TemporaryDirectory() as directory:
        url = args.store or f"sqlite:///{Path(directory) / 'events.db'}"
        system = args.dbos or f"sqlite:///{Path(directory) / 'dbos.sqlite'}"
        anyio.run(run, system, url)


if __name__ == "__main__":
    main()
