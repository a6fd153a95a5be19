"""A local tree: a lead agent delegates to a researcher, which delegates to a fact-checker.

Three agents in one process, each its own session with its own log in one
SQLite file; the lead's stream shows the whole tree (each child's chunks are
copied into its parent's log). The lead's output is typed: ``executor.run``
returns a ``Brief`` instance. The models are scripted (``ScriptedLLM``): no
LLM is called.

Run it::

    python examples/local_tree.py [--store sqlite:///tree.db]

then look at the recorded sessions with ``helix-agents sessions --store ...``
and ``helix-agents replay --store ... tree-demo`` (the session id it prints:
a store that holds ``tree-demo`` already gets ``tree-demo-2``, and so on, so
it runs again and again on one file).
"""

from __future__ import annotations

import argparse

import anyio
from pydantic import BaseModel

from helix_agents import AgentExecutor, create_sub_agent_tool, define_agent
from helix_agents.events import TextDelta
from helix_agents.models import ScriptedLLM
from helix_agents.stores import EventStore, open_store

SESSION = "tree-demo"


class Question(BaseModel):
    question: str


class Verdict(BaseModel):
    verdict: str


class Findings(BaseModel):
    findings: str
    checked: bool


class Brief(BaseModel):
    summary: str
    confidence: float


call, finish = ScriptedLLM.call, ScriptedLLM.finish

fact_checker = define_agent(
    "fact_checker",
    output_schema=Verdict,
    llm=ScriptedLLM([finish({"verdict": "true"}, text="Checked against the log.")]),
)
researcher = define_agent(
    "researcher",
    output_schema=Findings,
    tools=[create_sub_agent_tool(fact_checker, Question)],
    llm=ScriptedLLM(
        [
            [call("subagent__fact_checker", {"question": "Is replay deterministic?"})],
            finish({"findings": "a log replays to the same state", "checked": True}),
        ]
    ),
)
lead = define_agent(
    "lead",
    output_schema=Brief,
    tools=[create_sub_agent_tool(researcher, Question)],
    llm=ScriptedLLM(
        [
            [call("subagent__researcher", {"question": "Why event logs?"})],
            finish({"summary": "Event logs make recovery a replay.", "confidence": 0.9}),
        ]
    ),
)


async def free_session_id(store: EventStore, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... : the first id the store does not hold yet."""
    candidate, n = base, 1
    while await store.read(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


async def main(store_url: str) -> Brief:
    """Run the tree on the store at ``store_url``; print its stream live; return the brief."""
    store = await open_store(store_url)
    try:
        async with AgentExecutor(store, [lead]) as executor:
            session_id = await free_session_id(store, SESSION)
            print(f"session {session_id} in {store_url}")
            handle = await executor.execute(lead, "Why event logs?", session_id=session_id)
            async for item in handle.stream():
                chunk = item.chunk
                text = f" {chunk.delta!r}" if isinstance(chunk, TextDelta) else ""
                print(f"{item.sequence:4} {chunk.agent_type:12} {type(chunk).__name__}{text}")
            brief = (await handle.result()).unwrap()
    finally:
        await store.close()
    print(f"brief: {brief.summary} (confidence {brief.confidence})")
    return brief


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", default="memory://", help="event store URL (default: memory://)")
    anyio.run(main, parser.parse_args().store)
