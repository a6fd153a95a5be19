"""Agents for a served process: ``helix-agents serve tests.integration.remote_app:agents``.

Used by ``test_http_serve.py`` and ``test_http_crash.py``, which run the
server as a subprocess (working directory = the repository root) and reach
it from a parent agent in the test process; the parent imports the schemas
from here, so both sides agree on them.

- ``researcher`` streams its text slowly (one word per delta, ``DELTA_DELAY``
  apart: :data:`RESEARCHER_TEXT_DELTAS` deltas over about 1.5 s), calls the
  ``lookup`` tool, then finishes with a :class:`Report`.
- ``summarizer`` answers at once with a :class:`Summary`.

The scripts are indexed by the conversation (``ScriptedLLM``), so a session
resumed after a crash gets the same answers again.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from helix_agents import ToolContext, define_agent, define_tool
from helix_agents.messages import AssistantMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep

__all__ = [
    "DELTA_DELAY",
    "RESEARCHER_TEXT_DELTAS",
    "Facts",
    "Query",
    "Report",
    "Summary",
    "Text",
    "Topic",
    "agents",
    "expected_report",
    "expected_summary",
    "researcher",
    "summarizer",
]

DELTA_DELAY = 0.05
"""Seconds between the researcher's text deltas."""

_PLAN = " ".join(f"plan-{n}" for n in range(14))
_CONCLUSION = " ".join(f"finding-{n}" for n in range(14))
RESEARCHER_TEXT_DELTAS = len(_PLAN.split()) + len(_CONCLUSION.split())
"""Text deltas in one uninterrupted researcher session (one word each)."""


class Query(BaseModel):
    """The researcher's input."""

    query: str


class Topic(BaseModel):
    """The ``lookup`` tool's input."""

    topic: str


class Facts(BaseModel):
    """The ``lookup`` tool's result."""

    topic: str
    facts: list[str]


class Report(BaseModel):
    """The researcher's output."""

    topic: str
    findings: list[str]


class Text(BaseModel):
    """The summarizer's input."""

    text: str


class Summary(BaseModel):
    """The summarizer's output."""

    summary: str
    words: int


def expected_report(query: str) -> dict[str, Any]:
    """The researcher's output for ``query``."""
    return {"topic": query, "findings": [f"{query}: fact 1", f"{query}: fact 2"]}


def expected_summary(text: str) -> dict[str, Any]:
    """The summarizer's output for ``text``."""
    return {"summary": text.upper(), "words": len(text.split())}


def _lookup(args: Topic, ctx: ToolContext) -> Facts:
    return Facts(topic=args.topic, facts=[f"{args.topic}: fact 1", f"{args.topic}: fact 2"])


def _user_text(request: LLMRequest) -> str:
    return next(message.content for message in request.messages if isinstance(message, UserMessage))


def _research(request: LLMRequest) -> ScriptStep:
    query = _user_text(request)
    turn = sum(1 for message in request.messages if isinstance(message, AssistantMessage))
    if turn == 0:
        return ScriptStep(
            text=_PLAN, tool_calls=[ScriptedLLM.call("lookup", {"topic": query}, id="lookup_1")]
        )
    return ScriptedLLM.finish(expected_report(query), text=_CONCLUSION, id="finish_1")


def _summarize(request: LLMRequest) -> ScriptStep:
    return ScriptedLLM.finish(expected_summary(_user_text(request)), text="summarized")


researcher = define_agent(
    "researcher",
    description="Researches a query, slowly, with a lookup tool.",
    tools=[define_tool("lookup", "Looks a topic up.", Topic, _lookup)],
    output_schema=Report,
    llm=ScriptedLLM(_research, chunk_words=1, delta_delay=DELTA_DELAY),
)

summarizer = define_agent(
    "summarizer",
    description="Summarizes a text.",
    output_schema=Summary,
    llm=ScriptedLLM(_summarize, chunk_words=1),
)

agents = {"researcher": researcher, "summarizer": summarizer}
