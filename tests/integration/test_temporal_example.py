"""``examples/temporal_worker.py`` does what its docstring says, as a script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from temporal_server import TemporalDev

from helix_agents.events import ChildChunkForwarded
from helix_agents.log import project_state
from helix_agents.stores import SqliteEventStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "temporal_worker.py"

pytestmark = [pytest.mark.slow]


async def test_temporal_worker_example_runs_a_session_with_a_child_workflow(
    tmp_path: Path, temporal_dev: TemporalDev
) -> None:
    db = tmp_path / "events.db"
    out = subprocess.run(  # noqa: ASYNC221 - a script run to its end is the subject
        [
            sys.executable,
            str(EXAMPLE),
            "--temporal",
            temporal_dev.address,
            "--store",
            f"sqlite:///{db}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "[lead] sub-agent judge (a child workflow)" in lines
    assert "[lead] tool subagent__judge -> {'verdict': 'big enough'}" in lines
    assert lines[-1] == "output: Lyon has 516092 people: big enough."
    # The judge's finishing call shows as its caller's tool result, never by its tool name.
    assert not [line for line in lines if "__finish__" in line]
    store = SqliteEventStore(db)
    try:
        log = await store.read("temporal-demo")
    finally:
        await store.close()
    assert project_state(log).status == "completed"
    assert any(isinstance(event, ChildChunkForwarded) for event in log)
