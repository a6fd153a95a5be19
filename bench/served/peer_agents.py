"""The agents the ``peer`` and ``load`` benchmarks serve (``helix-agents serve peer_agents:...``).

- ``writer``: the peer workload, one model turn streaming ``CHUNKS`` text
  chunks of ``CHUNK_CHARS`` characters, then completing with that text.
- ``ticker``: the load workload, ``TICKS`` chunks ``TICK_GAP`` seconds apart,
  as a model streaming slowly.
"""

from __future__ import annotations

from helix_agents import define_agent
from helix_agents.models import ScriptedLLM

CHUNKS = 100
CHUNK_CHARS = 100
TICKS = 8
TICK_GAP = 0.45

writer = define_agent(
    "writer",
    llm=ScriptedLLM([" ".join(["x" * (CHUNK_CHARS - 1)] * CHUNKS)], chunk_words=1),
)
ticker = define_agent(
    "ticker",
    llm=ScriptedLLM(
        [" ".join(f"tick{i}" for i in range(TICKS))], chunk_words=1, delta_delay=TICK_GAP
    ),
)

agents = [writer]
load_agents = [ticker]
