"""The agent of the memory tests (``test_memory_runs.py``), importable by ``serve``.

The model's script is a function of the conversation: ``write X`` calls
``remember`` (a put of ``{"lang": X}``), ``read`` calls ``recall`` (a get),
``forget`` calls ``drop`` (a delete, from a synchronous tool), ``find Q``
calls ``find`` (a search); after a tool result it answers with that result's text.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_agents import ToolContext, define_agent, define_tool
from helix_agents.messages import ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem

PREFS = ("user-7", "prefs")


class Lang(BaseModel):
    lang: str = ""


class Query(BaseModel):
    query: str = ""


async def _remember(args: Lang, ctx: ToolContext) -> Any:
    item = await ctx.memory.put(PREFS, "language", {"lang": args.lang})
    return {"version": item.version, "namespace": list(item.namespace)}


async def _recall(args: Lang, ctx: ToolContext) -> Any:
    item = await ctx.memory.get(PREFS, "language")
    return {"found": None} if item is None else {"found": item.value, "version": item.version}


def _drop(args: Lang, ctx: ToolContext) -> Any:  # a synchronous tool: blocking calls
    return {"deleted": ctx.memory.delete(PREFS, "language")}  # type: ignore[misc]


async def _find(args: Query, ctx: ToolContext) -> Any:
    items = await ctx.memory.search(("user-7",), args.query)
    return {"keys": [[*item.namespace, item.key] for item in items]}


remember = define_tool("remember", "remember a language", Lang, _remember)
recall = define_tool("recall", "recall the language", Lang, _recall)
drop = define_tool("drop", "forget the language", Lang, _drop)
find = define_tool("find", "search memory", Query, _find)


def script(request: LLMRequest) -> ScriptItem:
    last = request.messages[-1]
    if isinstance(last, ToolResultMessage):
        return ScriptedLLM.reply(last.content)
    assert isinstance(last, UserMessage)
    text = str(last.content)
    if text.startswith("write "):
        return ScriptedLLM.call("remember", {"lang": text.removeprefix("write ")})
    if text.startswith("find "):
        return ScriptedLLM.call("find", {"query": text.removeprefix("find ")})
    if text == "forget":
        return ScriptedLLM.call("drop", {})
    return ScriptedLLM.call("recall", {})


def keeper() -> Any:
    """A new keeper agent."""
    return define_agent(
        "keeper", llm=ScriptedLLM(script), tools=[remember, recall, drop, find], max_steps=4
    )


agents = [keeper()]
