"""Agents the Temporal tests run, in a test process or a worker subprocess.

``helix-agents worker tests.integration.temporal_app:agents --temporal ADDR``
runs them on a worker; ``serve ... --temporal ADDR`` fronts them.

- ``boss``: a turn calling ``add``, one calling ``subagent__helper``, then a
  text answer (its output); ``fan``: both calls in one turn, at once.
- ``helper``: calls ``double``, then finishes with an :class:`Answer`.
- ``marker_boss``: calls ``mark`` (which notes each execution in
  ``$HELIX_TEMPORAL_MARKS/<call id>.<n>``, emits a ``marked`` custom chunk
  and then waits ``MARK_SECONDS``, so a test can kill its worker mid tool),
  then answers.
- ``tree``: ``subagent__middle`` -> ``subagent__leaf`` -> ``nap`` (long): an
  interrupt has a grandchild to reach.
- ``hitl_boss``: ``subagent__clerk``, whose ``pay`` needs an approval.
- ``asker``: a client tool ``pick`` (answered by the test).
- ``echo``: answers every turn with its last message (follow-ups).
- ``remote_boss``: a remote ``researcher`` (``remote_app``) at ``$HELIX_TEMPORAL_REMOTE_URL``.
- ``streamer``: 40 words, one delta every 0.1 s (a worker killed mid stream).
- ``long_streamer``: 150 words, one every 0.1 s (still streaming once a
  second worker has started: the time-to-recovery tests).

Scripts are indexed by the conversation (``ScriptedLLM``), so a retried or
resumed step gets the same answer.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import (
    ToolContext,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration.remote_app import Query, Report

__all__ = ["MARK_SECONDS", "Answer", "agents"]

MARK_SECONDS = float(os.environ.get("HELIX_TEMPORAL_MARK_SECONDS", "2.0"))
NAP_SECONDS = 60.0


class Pair(BaseModel):
    """Two numbers."""

    a: int
    b: int


class Number(BaseModel):
    """One number."""

    x: int


class Answer(BaseModel):
    """A sub-agent's output."""

    value: int


class Amount(BaseModel):
    """What ``pay`` pays."""

    amount: int


def _add(value: Pair, ctx: ToolContext) -> int:
    return value.a + value.b


def _double(value: Number, ctx: ToolContext) -> int:
    return value.x * 2


def _note(call_id: str) -> None:
    where = Path(os.environ.get("HELIX_TEMPORAL_MARKS", "."))
    runs = len(list(where.glob(f"{call_id}.*")))
    (where / f"{call_id}.{runs + 1}").write_text(str(os.getpid()))


async def _mark(value: Number, ctx: ToolContext) -> int:
    await anyio.to_thread.run_sync(_note, ctx.tool_call_id)
    await ctx.emit("marked", {"pid": os.getpid()})  # the test waits for this, then kills
    await anyio.sleep(MARK_SECONDS)
    return value.x + 100


async def _nap(value: Number, ctx: ToolContext) -> int:
    await anyio.sleep(NAP_SECONDS)
    return value.x


def _pay(value: Amount, ctx: ToolContext) -> dict[str, Any]:
    return {"paid": value.amount}


add = define_tool("add", "Add two numbers.", Pair, _add)
double = define_tool("double", "Double a number.", Number, _double)
mark = define_tool("mark", "Note a run, then wait.", Number, _mark)
nap = define_tool("nap", "Sleep a long time.", Number, _nap)
pay = define_tool("pay", "Pay an amount.", Amount, _pay, requires_approval=True)

helper = define_agent(
    "helper",
    description="Doubles a number.",
    tools=[double],
    output_schema=Answer,
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("double", {"x": 3}, id="d1")],
            ScriptedLLM.finish({"value": 6}, text="the double is six"),
        ]
    ),
)

boss = define_agent(
    "boss",
    description="Adds and delegates.",
    tools=[add, create_sub_agent_tool(helper, Number)],
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("add", {"a": 1, "b": 2}, id="a1")],
            [ScriptedLLM.call("subagent__helper", {"x": 3}, id="h1")],
            ScriptedLLM.reply("one plus two is three and the helper said six"),
        ]
    ),
)

fan = define_agent(
    "fan",
    description="Adds and delegates at once.",
    tools=[add, create_sub_agent_tool(helper, Number)],
    llm=ScriptedLLM(
        [
            [
                ScriptedLLM.call("add", {"a": 1, "b": 2}, id="a1"),
                ScriptedLLM.call("subagent__helper", {"x": 3}, id="h1"),
            ],
            ScriptedLLM.reply("both done"),
        ]
    ),
)

marker_boss = define_agent(
    "marker_boss",
    description="Marks, then answers.",
    tools=[mark],
    llm=ScriptedLLM(
        [[ScriptedLLM.call("mark", {"x": 1}, id="m1")], ScriptedLLM.reply("marked and done")]
    ),
)

leaf = define_agent(
    "leaf",
    description="Naps.",
    tools=[nap],
    output_schema=Answer,
    llm=ScriptedLLM(
        [[ScriptedLLM.call("nap", {"x": 1}, id="n1")], ScriptedLLM.finish({"value": 1})]
    ),
)
middle = define_agent(
    "middle",
    description="Asks the leaf.",
    tools=[create_sub_agent_tool(leaf, Number)],
    output_schema=Answer,
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("subagent__leaf", {"x": 1}, id="l1")],
            ScriptedLLM.finish({"value": 2}),
        ]
    ),
)
tree = define_agent(
    "tree",
    description="Asks the middle.",
    tools=[create_sub_agent_tool(middle, Number)],
    llm=ScriptedLLM(
        [[ScriptedLLM.call("subagent__middle", {"x": 1}, id="m1")], ScriptedLLM.reply("tree done")]
    ),
)

clerk = define_agent(
    "clerk",
    description="Pays, with approval.",
    tools=[pay],
    output_schema=Answer,
    llm=ScriptedLLM(
        [[ScriptedLLM.call("pay", {"amount": 5}, id="p1")], ScriptedLLM.finish({"value": 5})]
    ),
)
hitl_boss = define_agent(
    "hitl_boss",
    description="Delegates a payment.",
    tools=[create_sub_agent_tool(clerk, Amount)],
    llm=ScriptedLLM(
        [
            [ScriptedLLM.call("subagent__clerk", {"amount": 5}, id="c1")],
            ScriptedLLM.reply("payment done"),
        ]
    ),
)


asker = define_agent(
    "asker",
    description="Asks the user to pick a colour (a client tool).",
    tools=[define_tool("pick", "The user picks a colour.", Amount, "client")],
    llm=ScriptedLLM(
        [[ScriptedLLM.call("pick", {"amount": 3}, id="k1")], ScriptedLLM.reply("picked")]
    ),
)

streamer = define_agent(
    "streamer",
    description="Streams a long answer slowly.",
    llm=ScriptedLLM([" ".join(f"word{n}" for n in range(40))], chunk_words=1, delta_delay=0.1),
)

long_streamer = define_agent(
    "long_streamer",
    description="Streams a longer answer slowly.",
    llm=ScriptedLLM([" ".join(f"word{n}" for n in range(150))], chunk_words=1, delta_delay=0.1),
)


# A remote researcher served by ``helix-agents serve tests.integration.remote_app:agents``
# at $HELIX_TEMPORAL_REMOTE_URL (a test sets it for its workers).
remote_boss = define_agent(
    "remote_boss",
    description="Asks a remote researcher.",
    tools=[
        create_remote_sub_agent_tool(
            "researcher",
            description="Research (remote).",
            input_schema=Query,
            output_schema=Report,
            transport=HttpRemoteAgentTransport(
                os.environ.get("HELIX_TEMPORAL_REMOTE_URL", "http://127.0.0.1:9")
            ),
            remote_agent_type="researcher",
        )
    ],
    llm=ScriptedLLM(
        [[ScriptedLLM.call("subagent__researcher", {"query": "tea"}, id="r1")], "researched"]
    ),
)


def _echo(request: LLMRequest) -> str:
    said = [m.content for m in request.messages if isinstance(m, UserMessage)]
    return f"echo: {said[-1]}"


echo = define_agent("echo", description="Echoes each turn.", llm=ScriptedLLM(_echo))

agents = {
    agent.name: agent
    for agent in (
        boss,
        fan,
        marker_boss,
        tree,
        hitl_boss,
        asker,
        echo,
        streamer,
        long_streamer,
        remote_boss,
    )
}
"""The agents served (their sub-agents come with them)."""
