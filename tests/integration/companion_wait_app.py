"""A parent waiting for a non-blocking companion (``serve ...companion_wait_app:agents``).

``waiter`` spawns the non-blocking ``napper`` (named ``n``), whose tool naps
``HELIX_WAIT_NAP`` seconds (default 1), then calls ``companion__waitForResult``
on it with a timeout of ``HELIX_WAIT_MS`` milliseconds (default 30000, call
id ``w1``), then answers with the tool results. ``quick``, a blocking entry
never spawned, is there so ``waitForResult`` is offered (seed 004: only when
a child type is blocking).
"""

from __future__ import annotations

import os
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import PersistentAgent, ToolContext, define_agent, define_tool
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM

__all__ = ["agents", "napper", "quick", "waiter"]


class Nothing(BaseModel):
    """No arguments."""


async def _nap(value: Nothing, ctx: ToolContext) -> str:
    await anyio.sleep(float(os.environ.get("HELIX_WAIT_NAP", "1")))
    return "napped"


nap = define_tool("nap", "Nap a while.", Nothing, _nap)
napper = define_agent(
    "napper", tools=[nap], llm=ScriptedLLM([[ScriptedLLM.call("nap", {})], "rested well"])
)
quick = define_agent("quick", llm=ScriptedLLM(lambda request: "quick answer"))


def _waiter(request: LLMRequest) -> Any:
    turn = sum(isinstance(m, AssistantMessage) for m in request.messages)
    if turn == 0:
        args = {"agent": "napper", "name": "n", "initialMessage": "nap"}
        return [ScriptedLLM.call("companion__spawnAgent", args, id="s1")]
    if turn == 1:
        timeout = float(os.environ.get("HELIX_WAIT_MS", "30000"))
        args = {"name": "n", "timeout": timeout}
        return [ScriptedLLM.call("companion__waitForResult", args, id="w1")]
    return " | ".join(m.content for m in request.messages if isinstance(m, ToolResultMessage))


waiter = define_agent(
    "waiter",
    llm=ScriptedLLM(_waiter),
    persistent_agents=[PersistentAgent(napper, mode="non-blocking"), PersistentAgent(quick)],
)
agents = {"waiter": waiter, "napper": napper, "quick": quick}
