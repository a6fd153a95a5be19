"""A three-deep tree for the inspector's tests: lead -> planner -> writer.

The writer streams a first line, then calls ``hold``, which waits until the
test sets :attr:`Tree.release`; then it streams :data:`LINES` numbered lines,
one delta each, and finishes. So a test sees the tree live, mid-run, for as
long as it likes, and then a long enough stream to cut a connection in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import AgentConfig, ToolContext, create_sub_agent_tool, define_agent, define_tool
from helix_agents.models import ScriptedLLM, ScriptStep

LINES = 30
FIRST_LINE = "Writer drafting the first paragraph."


class Task(BaseModel):
    """What a parent asks its child."""

    query: str


class Hold(BaseModel):
    """``hold``'s input."""

    why: str


class Done(BaseModel):
    """Every agent's output."""

    summary: str


def line(k: int) -> str:
    """The writer's ``k``-th numbered line, as it appears in its text."""
    return f"line-{k:02d}"


@dataclass
class Tree:
    """The agents and the gate the test opens."""

    lead: AgentConfig
    release: anyio.Event = field(default_factory=anyio.Event)
    held: anyio.Event = field(default_factory=anyio.Event)


def build_tree(*, pace: float = 0.0, approval: bool = False, client: bool = False) -> Tree:
    """The tree; ``pace`` slows each streamed delta; ``approval`` gates ``hold`` on a person;
    ``client`` makes ``hold`` a client tool (its result comes from whoever answers it)."""
    release = anyio.Event()
    held = anyio.Event()

    async def hold(value: Hold, ctx: ToolContext) -> dict[str, Any]:
        held.set()
        await release.wait()
        return {"held": value.why}

    say, call, finish = ScriptStep, ScriptedLLM.call, ScriptedLLM.finish
    numbered = " ".join(line(k) for k in range(1, LINES + 1))
    writer = define_agent(
        "writer",
        system_prompt="You write.",
        tools=[
            define_tool(
                "hold",
                "Wait for the editor",
                Hold,
                "client" if client else hold,
                requires_approval=approval,
            )
        ],
        output_schema=Done,
        llm=ScriptedLLM(
            [
                say(text=FIRST_LINE, tool_calls=[call("hold", {"why": "review"}, id="call_hold")]),
                finish({"summary": "written"}, text=numbered, id="call_finish_w"),
            ],
            chunk_words=1,
            delta_delay=pace,
        ),
    )
    planner = define_agent(
        "planner",
        system_prompt="You plan.",
        tools=[create_sub_agent_tool(writer, Task)],
        output_schema=Done,
        llm=ScriptedLLM(
            [
                say(
                    text="Planner asks the writer.",
                    tool_calls=[call("subagent__writer", {"query": "draft"}, id="call_writer")],
                ),
                finish({"summary": "planned"}, text="Planner done.", id="call_finish_p"),
            ]
        ),
    )
    lead = define_agent(
        "lead",
        system_prompt="You lead.",
        tools=[create_sub_agent_tool(planner, Task)],
        output_schema=Done,
        llm=ScriptedLLM(
            [
                say(
                    text="Lead delegates to the planner.",
                    tool_calls=[call("subagent__planner", {"query": "plan"}, id="call_planner")],
                ),
                finish({"summary": "led"}, text="Lead done.", id="call_finish_l"),
            ]
        ),
    )
    tree = Tree(lead=lead)
    tree.release, tree.held = release, held
    return tree
