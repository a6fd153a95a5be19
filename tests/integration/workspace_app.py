"""Agents with workspaces and expiring inputs, for the durable runtimes' tests.

Run in the test process, or in a worker subprocess (``durable_worker.py``).

- ``scribe``: writes ``plan.md`` in its ``local`` workspace ``notes``, calls
  ``hold``, reads ``plan.md`` back, answers ``done``: each call one durable step.
- ``lead``: writes ``shared.md``, then calls ``subagent__reader``, which
  inherits the lead's workspace and reads it (a child workflow of its own).
- ``keeper``: the same with a blocking companion ``reader`` (``r``) that inherits.
- ``late``: a client tool ``pick`` that expires after ``EXPIRES_IN`` s, then
  answers ``gave up``; ``wary``: an approval gate that expires the same way;
  ``vault``: that gate in its sub-agent ``clerk``, answered at the root.

``hold`` notes each execution in ``$HELIX_WS_MARKS/<call id>.<n>`` (when the
variable is set), emits a ``holding`` custom chunk and, on its first
execution only, waits ``$HELIX_WS_HOLD`` seconds (0 by default), so a test
can kill its worker mid tool and see the retry go straight on.

Scripts are indexed by the conversation (``ScriptedLLM``), so a retried or
resumed step, in any process, gets the same answer.
"""

from __future__ import annotations

import os
from pathlib import Path

import anyio
from pydantic import BaseModel

from helix_agents import (
    PersistentAgent,
    ToolContext,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.models import ScriptedLLM
from helix_agents.workspaces import Workspace

__all__ = ["EXPIRES_IN", "agents"]

EXPIRES_IN = 1.0


class Nothing(BaseModel):
    """No arguments."""


class Choice(BaseModel):
    """What ``pick`` picks."""

    label: str


class Ask(BaseModel):
    """What the lead asks its reader."""

    message: str


class Text(BaseModel):
    """A sub-agent's output."""

    text: str


def _attempt(call_id: str) -> int:
    marks = os.environ.get("HELIX_WS_MARKS")
    if not marks:
        return 1
    folder = Path(marks)
    attempt = 1 + sum(1 for path in folder.iterdir() if path.name.startswith(f"{call_id}."))
    (folder / f"{call_id}.{attempt}").write_text(str(os.getpid()))
    return attempt


async def _hold(value: Nothing, ctx: ToolContext) -> str:
    attempt = await anyio.to_thread.run_sync(_attempt, ctx.tool_call_id)
    await ctx.emit("holding", {"attempt": attempt})
    if attempt == 1:
        await anyio.sleep(float(os.environ.get("HELIX_WS_HOLD", "0")))
    return "held"


def _noop(value: Nothing, ctx: ToolContext) -> str:
    return "done"


hold = define_tool("hold", "Hold on a while.", Nothing, _hold)
pick = define_tool("pick", "Ask the user to pick.", Choice, "client", expires_in=EXPIRES_IN)
wipe = define_tool(
    "wipe", "Wipe everything.", Nothing, _noop, requires_approval=True, expires_in=EXPIRES_IN
)
notes = Workspace("notes", "local", description="Working notes")

scribe = define_agent(
    "scribe",
    workspaces=[notes],
    tools=[hold],
    llm=ScriptedLLM(
        [
            [
                ScriptedLLM.call(
                    "workspace_write", {"path": "plan.md", "content": "step one"}, id="w1"
                )
            ],
            [ScriptedLLM.call("hold", {}, id="h1")],
            [ScriptedLLM.call("workspace_read", {"path": "plan.md"}, id="r1")],
            "done",
        ]
    ),
)

reader = define_agent(
    "reader",
    output_schema=Text,
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("workspace_read", {"path": "shared.md"}, id="rr1")],
            ScriptedLLM.finish({"text": "read it"}, id="rf1"),
        ]
    ),
)

lead = define_agent(
    "lead",
    workspaces=[notes],
    tools=[create_sub_agent_tool(reader, Ask, "Read the lead's notes.", inherit_workspace=True)],
    llm=ScriptedLLM(
        [
            [
                ScriptedLLM.call(
                    "workspace_write", {"path": "shared.md", "content": "for you"}, id="lw1"
                )
            ],
            [ScriptedLLM.call("subagent__reader", {"message": "read shared.md"}, id="ls1")],
            "the reader read it",
        ]
    ),
)

keeper = define_agent(
    "keeper",
    workspaces=[notes],
    persistent_agents=[PersistentAgent(reader, mode="blocking", inherit_workspace=True)],
    llm=ScriptedLLM(
        [
            [
                ScriptedLLM.call(
                    "workspace_write", {"path": "shared.md", "content": "for you"}, id="kw1"
                )
            ],
            [
                ScriptedLLM.call(
                    "companion__spawnAgent",
                    {"agent": "reader", "name": "r", "initialMessage": "read shared.md"},
                    id="ks1",
                )
            ],
            "the companion read it",
        ]
    ),
)

late = define_agent(
    "late",
    tools=[pick],
    llm=ScriptedLLM([[ScriptedLLM.call("pick", {"label": "a or b?"}, id="p1")], "gave up"]),
)

wary = define_agent(
    "wary",
    tools=[wipe],
    llm=ScriptedLLM([[ScriptedLLM.call("wipe", {}, id="x1")], "kept it all"]),
)

clerk = define_agent(
    "clerk",
    tools=[wipe],
    output_schema=Text,
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("wipe", {}, id="cx1")],
            ScriptedLLM.finish({"text": "nothing wiped"}, id="cf1"),
        ]
    ),
)

vault = define_agent(
    "vault",
    tools=[create_sub_agent_tool(clerk, Ask, "Let the clerk decide.")],
    llm=ScriptedLLM(
        [[ScriptedLLM.call("subagent__clerk", {"message": "wipe?"}, id="v1")], "the clerk kept it"]
    ),
)

agents = {agent.name: agent for agent in (scribe, lead, reader, keeper, late, wary, clerk, vault)}
