"""``helix-agents demo hitl``: a tree pauses for a person's approval in a grandchild.

An editor delegates to a writer, which delegates to a publisher whose
``publish`` tool needs a person's approval. The publisher pauses, the pause
cascades up to the editor (the root), the terminal asks, and the answer typed
there is submitted at the root, which routes it to the publisher and resumes
the whole tree (``specs/hitl.md``). The models are scripted: no LLM is called.
"""

from __future__ import annotations

import getpass
import os
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    PendingInput,
    ToolContext,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.errors import AgentServerError
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.protocol import checked_decided_by
from helix_agents.server.cli.timeline import StreamPrinter, json_text
from helix_agents.stores import open_store

__all__ = ["build_hitl_agents", "run_hitl_demo"]

Write = Callable[[str], None]
Ask = Callable[[str], Awaitable[str | None]]
"""Show a prompt and return the line typed (None at the end of input)."""

QUESTION = "Write and publish a two-line note on why agents need an event log."
NOTE = "Every session is a log.\nState, streams and recovery are replays of it."


class Brief(BaseModel):
    """What one agent asks the next."""

    query: str


class Post(BaseModel):
    """What ``publish`` publishes."""

    title: str
    body: str


class Done(BaseModel):
    """An agent's typed output."""

    result: str


published: list[str] = []


async def _publish(value: Post, ctx: ToolContext) -> dict[str, Any]:
    published.append(value.title)
    return {"published": value.title, "url": f"https://example.invalid/{ctx.tool_call_id}"}


def build_hitl_agents(pace: float = 0.01) -> AgentConfig:
    """The demo's three agents (scripted models); returns the editor, the root."""
    say, call, finish = ScriptStep, ScriptedLLM.call, ScriptedLLM.finish
    publish = define_tool(
        "publish", "Publish a post on the blog", Post, _publish, requires_approval=True
    )
    publisher = define_agent(
        "publisher",
        tools=[publish],
        output_schema=Done,
        llm=ScriptedLLM(
            [
                say(
                    text="Publishing the note.",
                    tool_calls=[call("publish", {"title": "Why a log", "body": NOTE})],
                ),
                finish({"result": "publish step done"}, text="Done."),
            ],
            delta_delay=pace,
        ),
    )
    writer = define_agent(
        "writer",
        tools=[create_sub_agent_tool(publisher, Brief)],
        output_schema=Done,
        llm=ScriptedLLM(
            [
                say(
                    text="Here is the note; handing it to the publisher.",
                    tool_calls=[call("subagent__publisher", {"query": NOTE})],
                ),
                finish({"result": "written and handed over"}, text="Handed over."),
            ],
            delta_delay=pace,
        ),
    )
    return define_agent(
        "editor",
        tools=[create_sub_agent_tool(writer, Brief)],
        llm=ScriptedLLM(
            [
                say(
                    text="Asking the writer.",
                    tool_calls=[call("subagent__writer", {"query": QUESTION})],
                ),
                "The note went through the human check.",
            ],
            delta_delay=pace,
        ),
    )


def _describe(entry: PendingInput) -> str:
    where = " > ".join(entry.path) if entry.path else entry.owner_session_id
    return f"{entry.kind} for {entry.tool_name} {json_text(entry.arguments)} in {where}"


async def run_hitl_demo(
    store_url: str | None, *, ask: Ask, write: Write = print, answer: str | None = None
) -> str:
    """Run the demo; ``answer`` ("approve" or "deny") skips the prompt. Returns the root's id."""
    if store_url is None:
        directory = tempfile.mkdtemp(prefix="helix-demo-")
        store_url = "sqlite:///" + os.path.join(directory, "helix-demo.db")
    root_id = f"hitl-{uuid.uuid4().hex[:8]}"
    store = await open_store(store_url)
    try:
        write("helix-agents demo hitl: editor > writer > publisher; publishing needs your OK.")
        write("The models are scripted: no LLM is called.")
        write(f"  store:   {store_url}")
        write(f"  session: {root_id}")
        write("")
        editor = build_hitl_agents()
        printer = StreamPrinter(root_id)
        async with AgentExecutor(store, [editor]) as executor:
            handle = await executor.execute(editor, QUESTION, session_id=root_id)
            cursor = 0
            while True:
                async for item in handle.stream(from_sequence=cursor):
                    line = printer.format(item)
                    if line is not None:
                        write(line)
                    cursor = item.sequence
                await executor.wait_idle(root_id)
                state = await executor.state(root_id)
                if state.status != "paused":
                    break
                cursor = state.last_seq
                for entry in await executor.pending_inputs(root_id):
                    write("")
                    write(f"waiting: {_describe(entry)}")
                    await _decide(executor, root_id, entry, ask=ask, write=write, answer=answer)
                    write("")
        write("")
        write(f"the session ended {state.status}: {json_text(state.output or state.error)}")
    finally:
        await store.close()
    return root_id


async def _decide(
    executor: AgentExecutor,
    root_id: str,
    entry: PendingInput,
    *,
    ask: Ask,
    write: Write,
    answer: str | None,
) -> None:
    typed = answer if answer is not None else await ask("approve? [y/N] ")
    approved = (typed or "").strip().lower() in ("y", "yes", "approve")
    reason: str | None = None
    if not approved:
        reason = "no answer (end of input)" if typed is None else "declined at the terminal"
    who = terminal_user() if typed is not None else None  # at the end of input nobody did
    response = await executor.submit_approval(
        root_id, entry.tool_call_id, approved, reason, decided_by=who
    )
    verdict = "approved" if approved else f"denied ({reason})"
    by = f" (decided by {who})" if who else ""
    write(f"{verdict}, submitted at the root {root_id}{by}; the tree resumed: {response.resumed}")


def terminal_user() -> str | None:
    """Who sits at this terminal: the OS user name, if it has one that fits ``decidedBy``."""
    try:
        return checked_decided_by(getpass.getuser())
    except (KeyError, OSError, AgentServerError):
        return None
