"""Agents for the ``eval`` and ``diff`` tests: a support agent whose model has two versions.

``EVAL_MODEL`` picks the model's version (``v1``, the default: the one the
sessions were recorded with; ``v2``: today's). The versions answer alike,
except that v2 looks a question about a refund up under another query and
answers it otherwise: a recorded "refund" session diverges on purpose.
``EVAL_MARKER``: a file the ``lookup`` tool appends to whenever it really runs.
"""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel

from helix_agents import ToolContext, define_agent, define_tool
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.models.base import LLMRequest


class Query(BaseModel):
    query: str


class Reply(BaseModel):
    answer: str


def lookup(value: Query, ctx: ToolContext) -> dict[str, str]:
    marker = os.environ.get("EVAL_MARKER")
    if marker:
        with open(marker, "a", encoding="utf-8") as file:
            file.write(f"lookup {value.query}\n")
    return {"fact": f"about {value.query}: it is {os.environ.get('EVAL_FACT', 'fine')}"}


def _model(request: LLMRequest) -> Any:
    question = next(m.content for m in request.messages if isinstance(m, UserMessage))
    turns = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
    v2 = os.environ.get("EVAL_MODEL", "v1") == "v2"
    topic = question.split()[-1].strip("?")
    if turns == 0:
        query = f"{topic} policy" if v2 and "refund" in question else topic
        return [ScriptedLLM.call("lookup", {"query": query})]
    fact = next(
        (m.content for m in reversed(request.messages) if isinstance(m, ToolResultMessage)), ""
    )
    prefix = "Per policy: " if v2 and "refund" in question else ""
    return ScriptedLLM.finish({"answer": f"{prefix}{fact}"})


support = define_agent(
    "support",
    output_schema=Reply,
    tools=[define_tool("lookup", "Look a topic up", Query, lookup)],
    llm=ScriptedLLM(_model),
)
agents = [support]


def short_answer(run: Any) -> bool:
    """A user scorer: the branch's answer is at most 60 characters."""
    output = run.branch.output or {}
    return len(str(output.get("answer", ""))) <= 60


terse = ScriptedLLM(
    lambda request: (
        ScriptedLLM.finish({"answer": "no idea"})
        if any(isinstance(m, ToolResultMessage) for m in request.messages)
        else [ScriptedLLM.call("lookup", {"query": "refund"})]
    )
)
"""Another model (``eval --model tests.integration.eval_app:terse``): it always looks up refunds."""
