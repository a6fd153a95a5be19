"""The agents the ``temporal`` and ``dbos`` benchmarks' worker subprocesses run.

Run as ``helix-agents worker durable_agents:agents --temporal ADDR`` (or
``--dbos URL``) with ``bench/served/`` on ``PYTHONPATH``, for the
time-to-recovery measurement (``_durable.py``): each agent emits a chunk
every ``TICK`` seconds for about ``SECONDS``, so the first new chunk after a
worker's SIGKILL says when another worker took its session up.

- ``ticker``: one long tool call (``tick``) that emits a chunk per tick: a
  worker killed mid step (the usual case: a model call or a tool).
- ``streamer``: one model step streaming a word per tick: killed mid stream.
- ``looper``: many short steps, each a tool call emitting one chunk: killed
  between steps or inside a short one.
- ``napper``: one silent tool call of ``NAP`` seconds (what heartbeats cost a
  long step, measured while many nap).
"""

from __future__ import annotations

import anyio
from pydantic import BaseModel

from helix_agents import AgentConfig, ToolContext, define_agent, define_tool
from helix_agents.models import ScriptedLLM

TICK = 0.1
SECONDS = 12.0
_TICKS = int(SECONDS / TICK)
NAP = 30.0


class Count(BaseModel):
    n: int


async def _tick(value: Count, ctx: ToolContext) -> int:
    for n in range(value.n):
        await ctx.emit("tick", {"n": n})
        await anyio.sleep(TICK)
    return value.n


async def _step(value: Count, ctx: ToolContext) -> int:
    await ctx.emit("step", {"n": value.n})
    await anyio.sleep(TICK)
    return value.n


async def _nap(value: Count, ctx: ToolContext) -> int:
    await anyio.sleep(value.n)
    return value.n


def _agents() -> list[AgentConfig]:
    tick = define_tool("tick", "Emit a chunk per tick.", Count, _tick)
    step = define_tool("step", "Emit one chunk.", Count, _step)
    ticker = define_agent(
        "ticker",
        tools=[tick],
        llm=ScriptedLLM([[ScriptedLLM.call("tick", {"n": _TICKS}, id="t1")], "ticked"]),
    )
    streamer = define_agent(
        "streamer",
        llm=ScriptedLLM(
            [" ".join(f"w{n}" for n in range(_TICKS))], chunk_words=1, delta_delay=TICK
        ),
    )
    loops = _TICKS // 3  # a step is a tool call, a model call and a tick
    looper = define_agent(
        "looper",
        tools=[step],
        max_steps=loops + 2,
        llm=ScriptedLLM(
            [*([ScriptedLLM.call("step", {"n": n}, id=f"s{n}")] for n in range(loops)), "looped"]
        ),
    )
    napper = define_agent(
        "napper",
        tools=[define_tool("nap", "Sleep.", Count, _nap)],
        llm=ScriptedLLM([[ScriptedLLM.call("nap", {"n": int(NAP)}, id="n1")], "napped"]),
    )
    return [ticker, streamer, looper, napper]


agents = _agents()
