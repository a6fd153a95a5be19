"""``examples/dbos_agents.py`` does what its docstring says, as a script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helix_agents.events import ApprovalGiven, ChildChunkForwarded
from helix_agents.log import project_state
from helix_agents.stores import SqliteEventStore

EXAMPLE = Path(__file__).parents[2] / "examples" / "dbos_agents.py"

pytestmark = [pytest.mark.slow]


async def test_dbos_example_runs_a_session_with_a_child_workflow_and_an_approval(
    tmp_path: Path,
) -> None:
    db = tmp_path / "events.db"
    system = tmp_path / "dbos.sqlite"
    out = subprocess.run(  # noqa: ASYNC221 - a script run to its end is the subject
        [
            sys.executable,
            str(EXAMPLE),
            "--dbos",
            f"sqlite:///{system}",
            "--store",
            f"sqlite:///{db}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert "[lead] sub-agent judge (a child workflow)" in lines
    assert "approving book (its paused workflow waits for it)" in lines
    assert "[lead] tool book -> visit to Lyon booked" in lines
    assert lines[-1] == "output: Lyon has 516092 people: big enough, and the visit is booked."
    # The judge's finishing call shows as its caller's tool result, never by its tool name.
    assert not [line for line in lines if "__finish__" in line]
    store = SqliteEventStore(db)
    try:
        [session] = [s for s in await store.list_sessions() if "-sub-" not in s]
        log = await store.read(session)
    finally:
        await store.close()
    assert project_state(log).status == "completed"
    assert any(isinstance(event, ChildChunkForwarded) for event in log)
    assert any(isinstance(event, ApprovalGiven) for event in log)
