"""Workspaces: a scribe writes notes, a reader sub-agent inherits the workspace and reads them.

The scribe declares a ``local`` workspace named ``notes`` (a directory per
session under ``--root``), writes two notes with ``workspace_write``, then
delegates to the reader with ``inherit_workspace=True``: the reader declares no
workspace of its own, runs against the scribe's, lists and reads the notes and
returns a summary. The scribe answers with it. Both models are scripted
(``ScriptedLLM``): no LLM is called. Afterwards the notes are on disk and the
scribe's log, replayed, shows every write.

Run it::

    python examples/workspace_notes.py [--root DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgspec
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    AgentResult,
    create_sub_agent_tool,
    define_agent,
)
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.server.cli.replay import replay_lines
from helix_agents.stores import EventStore, SqliteEventStore
from helix_agents.workspaces import LocalWorkspaceProvider, Workspace

SESSION = "notes-demo"
NOTES = {
    "notes/lyon.md": "Lyon: Roman Lugdunum, silk weaving, the traboules.",
    "notes/nice.md": "Nice: the Promenade des Anglais, Italian until 1860.",
}

call = ScriptedLLM.call
finish = ScriptedLLM.finish


class Topic(BaseModel):
    """What the scribe asks the reader."""

    query: str


class Summary(BaseModel):
    """What the reader returns."""

    summary: str


def _turn(request: LLMRequest) -> int:
    return sum(isinstance(message, AssistantMessage) for message in request.messages)


def _results(request: LLMRequest) -> list[Any]:
    """The latest tool results the model sees, decoded, in call order."""
    found: dict[str, Any] = {}
    for message in reversed(request.messages):
        if isinstance(message, ToolResultMessage):
            found[message.tool_call_id] = msgspec.json.decode(message.content)
        elif isinstance(message, AssistantMessage):
            return [found[tool_call.id] for tool_call in message.tool_calls]
    return []


def reader_model(request: LLMRequest) -> Any:
    """List the notes, read each one, summarise what was read."""
    turn = _turn(request)
    if turn == 0:
        return call("workspace_list", {"prefix": "notes"})
    if turn == 1:
        paths = [entry["path"] for entry in _results(request)[0]["files"]]
        return [call("workspace_read", {"path": path}) for path in paths]
    firsts = [read["content"].split(":")[0] for read in _results(request)]
    return finish({"summary": f"{len(firsts)} notes: {', '.join(firsts)}"})


def scribe_model(request: LLMRequest) -> Any:
    """Write the notes, ask the reader, answer with its summary."""
    turn = _turn(request)
    if turn == 0:
        return [
            call("workspace_write", {"path": path, "content": text}) for path, text in NOTES.items()
        ]
    if turn == 1:
        return call("subagent__reader", {"query": "Summarise my notes"})
    return f"The reader says: {_results(request)[0]['summary']}"


def build_agents() -> AgentConfig:
    """The scribe, with the reader as its inheriting sub-agent."""
    reader = define_agent(
        "reader",
        description="Reads the notes in the shared workspace and summarises them.",
        output_schema=Summary,
        llm=ScriptedLLM(reader_model),
    )
    return define_agent(
        "scribe",
        workspaces=[Workspace("notes", "local", description="Research notes")],
        tools=[create_sub_agent_tool(reader, Topic, inherit_workspace=True)],
        llm=ScriptedLLM(scribe_model),
    )


AGENTS = [build_agents()]
"""The agents, for ``helix-agents replay --rerun examples.workspace_notes:AGENTS``."""


async def free_session_id(store: EventStore, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``... : the first id the store does not hold yet.

    So the example runs again on the same store (a session id is used once).
    """
    candidate, n = base, 1
    while await store.read(candidate):
        n += 1
        candidate = f"{base}-{n}"
    return candidate


async def run(root: Path) -> tuple[AgentResult, list[str]]:
    """Run the scribe with its workspaces under ``root``; its result and its replayed log."""
    [scribe] = AGENTS
    store = SqliteEventStore(root / "events.db")
    try:
        async with AgentExecutor(
            store,
            [scribe],
            workspace_providers={"local": LocalWorkspaceProvider(root / "workspaces")},
            workspace_provider_kinds=["local"],
        ) as executor:
            task = "Take notes on Lyon and Nice"
            session_id = await free_session_id(store, SESSION)
            handle = await executor.execute(scribe, task, session_id=session_id)
            result = await handle.result()
        return result, replay_lines(await store.read(session_id))
    finally:
        await store.close()


def main(argv: list[str] | None = None) -> None:
    """Run the example and print the answer, the files and the scribe's timeline."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--root", type=Path, help="where to keep the store and workspaces")
    args = parser.parse_args(argv)
    root: Path = args.root or Path(tempfile.mkdtemp(prefix="helix-notes-"))
    root.mkdir(parents=True, exist_ok=True)
    result, lines = anyio.run(run, root)
    print(f"status: {result.status}")
    print(f"answer: {result.output}")
    print(f"files under {root / 'workspaces'}:")
    for path in sorted((root / "workspaces").rglob("*.md")):
        print(f"  {path.relative_to(root / 'workspaces')}: {path.read_text()}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
