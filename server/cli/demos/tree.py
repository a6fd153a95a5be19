"""``helix-agents demo``: an orchestrator agent delegates to a researcher sub-agent.

It runs the real runtime (``AgentExecutor``) on a real store: each agent is its
own session with its own log; the researcher runs as a child session reached
through the in-process transport, and the orchestrator forwards its chunks into
its own log, so the orchestrator's stream, printed live, shows the nested
chunks. Only the model is **scripted** (``ScriptedLLM``): no LLM is called.
Then the log is read back and replayed (timeline and projected state).

Deterministic apart from timestamps and ids.
"""

from __future__ import annotations

import os
import shlex
import tempfile
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    EventStore,
    ToolContext,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.server.cli.replay import replay_lines
from helix_agents.server.cli.timeline import StreamPrinter
from helix_agents.stores import open_store

__all__ = ["build_agents", "record_demo", "run_demo"]

PARENT_TYPE = "orchestrator"
CHILD_TYPE = "researcher"
CALL_ID = "call_research_1"
QUESTION = "Why is an append-only event log a good base for a multi-agent system?"
TASK = "Find what an append-only event log gives an agent framework."
NOTES = {
    "projections": "state, status and stream are projections of the log",
    "concurrency": "compare-and-append gives idempotent start and single-writer safety",
    "recovery": "a parent resumes a child's stream from the last child seq it holds",
}
SUMMARY = "Everything is a replay of the log, so crashes, resumes and debugging share one path."

Write = Callable[[str], None]


class Task(BaseModel):
    """What the orchestrator asks the researcher."""

    query: str


class Topic(BaseModel):
    """What ``search_notes`` looks up."""

    topic: str


class Findings(BaseModel):
    """The researcher's typed output."""

    findings: list[str]


class Answer(BaseModel):
    """The orchestrator's typed output."""

    answer: str


async def _search_notes(value: Topic, ctx: ToolContext) -> dict[str, Any]:
    found = NOTES.get(value.topic, "nothing on that")
    # The function form is an atomic read-modify-write: the two searches run
    # concurrently, and neither may lose the other's update.
    await ctx.update_state(
        lambda state: {**state, "topics": [*state.get("topics", []), value.topic]}
    )
    return {"topic": value.topic, "note": found}


def build_agents(pace: float = 0.02) -> AgentConfig:
    """The demo's two agents, with scripted models; returns the orchestrator."""
    say, call, finish = ScriptStep, ScriptedLLM.call, ScriptedLLM.finish
    researcher = define_agent(
        CHILD_TYPE,
        description="Finds facts in the notes",
        system_prompt="You research a question in the notes.",
        tools=[define_tool("search_notes", "Look a topic up in the notes", Topic, _search_notes)],
        output_schema=Findings,
        llm=ScriptedLLM(
            [
                say(
                    text="Let me look through the notes.",
                    tool_calls=[
                        call("search_notes", {"topic": "projections"}, id="call_search_1"),
                        call("search_notes", {"topic": "recovery"}, id="call_search_2"),
                    ],
                ),
                finish(
                    {"findings": [NOTES["projections"], NOTES["recovery"]]},
                    text="Two notes answer it: projections and recovery.",
                    id="call_finish_r",
                ),
            ],
            delta_delay=pace,
        ),
    )
    return define_agent(
        PARENT_TYPE,
        description="Answers questions by delegating research",
        system_prompt="You answer questions; delegate research to the researcher.",
        tools=[create_sub_agent_tool(researcher, Task)],
        output_schema=Answer,
        llm=ScriptedLLM(
            [
                say(
                    text="I will ask the researcher to look this up.",
                    tool_calls=[call(f"subagent__{CHILD_TYPE}", {"query": TASK}, id=CALL_ID)],
                ),
                finish({"answer": SUMMARY}, text=SUMMARY, id="call_finish_o"),
            ],
            delta_delay=pace,
        ),
    )


async def record_demo(
    store: EventStore, parent_id: str, *, write: Write = print, pace: float = 0.02
) -> None:
    """Run the demo session ``parent_id`` on ``store``, printing its stream live."""
    agent = build_agents(pace)
    printer = StreamPrinter(parent_id)
    async with AgentExecutor(store, [agent]) as executor:
        handle = await executor.execute(agent, QUESTION, session_id=parent_id)
        async for item in handle.stream(from_sequence=0):
            line = printer.format(item)
            if line is not None:
                write(line)
        result = await handle.result()
    if result.status != "completed":
        raise RuntimeError(f"the demo session ended {result.status}: {result.error}")


async def run_demo(store_url: str | None = None, *, write: Write = print) -> str:
    """Run the demo on ``store_url`` (default: a fresh SQLite file); return the session id."""
    if store_url is None:
        directory = tempfile.mkdtemp(prefix="helix-demo-")
        store_url = "sqlite:///" + os.path.join(directory, "helix-demo.db")
    parent_id = f"demo-{uuid.uuid4().hex[:8]}"
    store = await open_store(store_url)  # before any output: a bad URL prints only the error
    try:
        _write_header(write, store_url, parent_id)
        await record_demo(store, parent_id, write=write)
        events = await store.read(parent_id)
    finally:
        await store.close()
    write("")
    write(f"timeline of {parent_id}, replayed from the store:")
    for line in replay_lines(events):
        write(line)
    write("")
    child_id = f"{parent_id}-sub-{CALL_ID}"
    if store_url.startswith("memory:"):
        write("memory:// keeps nothing after this process; use a sqlite:/// URL to replay later.")
    else:
        url = shlex.quote(store_url)
        write(f"replay it:       helix-agents replay --store {url} {parent_id}")
        write(f"the child's log: helix-agents replay --store {url} {child_id}")
        write(f"export it:       helix-agents export --store {url} {parent_id} -o demo.jsonl")
    return parent_id


def _write_header(write: Write, store_url: str, parent_id: str) -> None:
    write(f"helix-agents demo: an {PARENT_TYPE} agent delegates to a {CHILD_TYPE} sub-agent.")
    write("The runtime is real (AgentExecutor): each agent is a session with its own log in the")
    write("store below, the researcher runs as a child session, and the orchestrator forwards its")
    write("chunks into its own log. The LLM is SCRIPTED (ScriptedLLM): no model is called.")
    write(f"  store:   {store_url}")
    write(f"  session: {parent_id}")
    write(f"  child:   {parent_id}-sub-{CALL_ID}")
    write("")
    write(f"live stream of {parent_id} (tailing its log; #sequence agent chunk):")
