"""The agents the ``nats`` benchmark's ``helix-agents host`` subprocesses serve.

Run as ``helix-agents host nats_agents:agents --nats URL`` with ``bench/`` on
``PYTHONPATH``. ``researcher`` finishes with ``CHUNKS`` one-word text chunks
(the child of the benchmark's remote call, as in ``bench_http``).
"""

from __future__ import annotations

from pydantic import BaseModel

from helix_agents import AgentConfig, define_agent
from helix_agents.models import ScriptedLLM

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
