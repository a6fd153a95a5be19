"""Record the Temporal history of one helix run, for ``test_temporal_replay.py``.

``temporal_history_before_35.json`` was recorded with the code before issue 35
(commit b10bcb6: four steps per agent step), in a worktree and venv of its own::

    git worktree add /tmp/old b10bcb6 && python -m venv --system-site-packages /tmp/v
    /tmp/v/bin/pip install --no-deps -e /tmp/old
    /tmp/v/bin/python tests/golden/record_temporal_history.py tests/golden/<name>.json

The agent: ``stepper`` calls ``inc`` once, then twice in one turn, then answers.
"""

from __future__ import annotations

import sys

import anyio
from pydantic import BaseModel

from helix_agents import AgentConfig, define_agent, define_tool
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.stores import MemoryEventStore


class Number(BaseModel):
    x: int


def _inc(value: Number, ctx: object) -> int:
    return value.x + 1


def agents() -> list[AgentConfig]:
    """The recorded agent."""
    inc = define_tool("inc", "Add one.", Number, _inc)
    once = [ScriptedLLM.call("inc", {"x": 0})]
    twice = [ScriptedLLM.call("inc", {"x": 1}), ScriptedLLM.call("inc", {"x": 2})]
    return [define_agent("stepper", tools=[inc], llm=ScriptedLLM([once, twice, "done"]))]


async def main(out: str) -> None:
    from temporalio.client import Client

    from helix_agents.temporal import DevServer, TemporalOptions, TemporalWorker, temporal_server

    store = MemoryEventStore()
    async with DevServer() as dev:
        options = TemporalOptions(address=dev.address, task_queue="rec")
        async with (
            TemporalWorker(agents(), store, options),
            temporal_server(agents(), store, options) as server,
        ):
            request = RemoteStartRequest(session_id="h1", agent_type="stepper", message="go")
            await server.start(request)
            async for event in server.stream("h1"):
                if isinstance(event, EndEvent):
                    break
            handle = (await Client.connect(dev.address)).get_workflow_handle("h1")
            await handle.result()
            history = await handle.fetch_history()
    await anyio.Path(out).write_text(history.to_json())


if __name__ == "__main__":
    anyio.run(main, sys.argv[1])
