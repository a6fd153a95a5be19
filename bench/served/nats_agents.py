"""The agents the ``nats`` benchmark's ``helix-agents host`` subprocesses serve.

Run as ``helix-agents host nats_agents:agents --nats URL`` with ``bench/served/`` on
``PYTHONPATH``. ``researcher`` finishes with ``CHUNKS`` one-word text chunks
(the child of the benchmark's remote call, as in ``bench_http``); ``napper``
(in ``napping_agents``) waits in a tool, for the time-to-takeover measurement.
"""

from __future__ import annotations

from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import AgentConfig, define_agent, define_tool
from helix_agents.models import ScriptedLLM, ScriptStep

CHUNKS = 10


class Query(BaseModel):
    query: str


class Found(BaseModel):
    findings: str


def researcher(chunks: int = CHUNKS) -> AgentConfig:
    """A child agent: one LLM step, ``chunks`` one-word text chunks, then its output."""
    words = " ".join(f"w{i}" for i in range(chunks))
    return define_agent(
        "researcher",
        output_schema=Found,
        llm=ScriptedLLM([ScriptedLLM.finish({"findings": "f"}, text=words)], chunk_words=1),
    )


agents = [researcher()]


class Nap(BaseModel):
    seconds: float


async def _nap(args: Nap, ctx: Any) -> dict[str, str]:
    await anyio.sleep(args.seconds)
    return {"woke": "yes"}


def napper() -> AgentConfig:
    """An agent that waits in its ``nap`` tool for an hour (the takeover measurement)."""
    return define_agent(
        "napper",
        tools=[define_tool("nap", "Waits.", Nap, _nap)],
        llm=ScriptedLLM(
            [
                ScriptStep(text="napping", tool_calls=[ScriptedLLM.call("nap", {"seconds": 3600})]),
                ScriptStep(text="done"),
            ]
        ),
    )


napping_agents = [napper()]
"""Served by the takeover measurement's hosts (default lease TTL)."""
