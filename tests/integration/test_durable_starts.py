"""A repeated start while the first start's launch is on its way joins that run (issue 23).

On a durable gateway the start answers once the session's events are saved;
the engine's start call (Temporal's signal-with-start, DBOS's enqueue) goes
on after. A repeated start must join that run on every interleaving: here
the engine is asked whether the run is open while the launch is held (no),
and the launch completes before the service goes on, the window in which a
service that asks the engine first took the session over as a dead one's and
launched a second run (found by ``test_temporal_serve.py`` under load).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from helix_agents import define_agent
from helix_agents.events import RunStarted
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime

pytestmark = pytest.mark.slow

LIMIT = 30


@pytest.mark.parametrize("engine", ["temporal", "dbos"])
async def test_a_repeated_start_joins_a_run_whose_launch_is_on_its_way(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    dev = request.getfixturevalue("temporal_dev") if engine == "temporal" else None
    template = request.getfixturevalue("dbos_system_template") if engine == "dbos" else None
    runtime = Runtime(engine, tmp_path, dev, template)
    writer = define_agent("writer", llm=ScriptedLLM(["done"]))
    store = MemoryEventStore()
    start = RemoteStartRequest(session_id="dup-1", agent_type="writer", message="go")
    with anyio.fail_after(LIMIT):
        async with runtime.server([writer], store) as server:
            runs = server.executor.runs
            service: Any = server.executor.service
            launch, engine_says = runs.launcher, service.run_open
            assert launch is not None
            held, launching = anyio.Event(), anyio.Event()

            async def held_launch(agent: Any, log_: Any, run_id: str) -> None:
                launching.set()
                await held.wait()
                await launch(agent, log_, run_id)

            async def open_then_launched(session_id: str) -> bool:
                answer: bool = await engine_says(session_id)  # not yet: the launch is held
                held.set()
                await runs.wait_idle(session_id)  # the launch is done before the service goes on
                return answer

            runs.launcher = held_launch
            service.run_open = open_then_launched
            first = await server.start_agent(start)
            await launching.wait()
            again = await server.start_agent(start)
            held.set()
            await runtime.settled(server, "dup-1")
            log = await store.read("dup-1")
    assert again.run_id == first.run_id
    assert [e.run_id for e in log if isinstance(e, RunStarted)] == [first.run_id]
