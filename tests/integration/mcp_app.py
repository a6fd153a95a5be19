"""Agents served over MCP: ``helix-agents serve tests.integration.mcp_app:agents --mcp``.

- ``researcher``: typed (``Findings``); looks its topic up with a local tool,
  then finishes. Its MCP input is ``Question`` (``input_models``) in the
  in-process tests, the default ``{"message": ...}`` when served by the CLI.
- ``chatter``: untyped; answers with text.
- ``failer``: its model fails.
- ``sleeper``: calls ``wait``, which waits until the run is stopped.
- ``gated``: calls ``publish``, which needs a person's approval, then finishes.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import ToolContext, define_agent, define_tool
from helix_agents.messages import ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem

__all__ = ["Findings", "Question", "agents"]


class Question(BaseModel):
    """The researcher's MCP input in the in-process tests."""

    query: str
    depth: int | None = None


class Findings(BaseModel):
    topic: str
    facts: list[str]


class Lookup(BaseModel):
    topic: str


class Post(BaseModel):
    text: str


def _lookup(value: Lookup, ctx: ToolContext) -> dict[str, Any]:
    return {"facts": [f"{value.topic} is real", f"{value.topic} is documented"]}


def _researcher(request: LLMRequest) -> ScriptItem:
    asked = next(m.content for m in request.messages if isinstance(m, UserMessage))
    found = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if not found:
        return ScriptedLLM.call("lookup", {"topic": asked}, id="c-lookup")
    return ScriptedLLM.finish(
        {"topic": asked, "facts": [f"{asked} is real", f"{asked} is documented"]},
        text="Looked it up.",
    )


async def _wait(value: Post, ctx: ToolContext) -> str:
    await anyio.sleep_forever()
    return "unreachable"


def _publish(value: Post, ctx: ToolContext) -> str:
    return f"published {value.text!r}"


lookup = define_tool("lookup", "Look a topic up.", Lookup, _lookup)

agents = [
    define_agent(
        "researcher",
        description="Finds facts about a topic.",
        tools=[lookup],
        output_schema=Findings,
        llm=ScriptedLLM(_researcher),
    ),
    define_agent("chatter", llm=ScriptedLLM(["hello there"])),
    define_agent("failer", llm=ScriptedLLM([ScriptedLLM.fail("the model is down")])),
    define_agent(
        "sleeper",
        tools=[define_tool("wait", "Wait.", Post, _wait)],
        llm=ScriptedLLM([ScriptedLLM.call("wait", {"text": "zzz"}, id="c-wait"), "woke"]),
    ),
    define_agent(
        "gated",
        tools=[define_tool("publish", "Publish.", Post, _publish, requires_approval=True)],
        llm=ScriptedLLM([ScriptedLLM.call("publish", {"text": "hi"}, id="c-publish"), "posted"]),
    ),
]
