"""``examples/a2a_interop.py`` runs as written and shows both directions of the bridge."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]


def test_the_a2a_example_runs_both_ways(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "a2a_interop.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    # Part 1: a2a-sdk's client read the card, then the task's stream to its end.
    assert lines[0].startswith("card: researcher at http://127.0.0.1:")
    assert lines[0].endswith("/a2a/researcher")
    assert lines[1].startswith("task a2a-")
    assert lines[1].endswith("TASK_STATE_WORKING")
    assert "artifact response: {'text': 'Found it.'}" in lines
    assert any(line.startswith("artifact output: {'data':") for line in lines)
    assert "status: TASK_STATE_COMPLETED" in lines
    # Part 2: the lead's child ran over A2A, its chunks in the lead's log, its output typed.
    assert any(line.endswith("chunks of the A2A agent reached the lead's log") for line in lines)
    assert lines[-1] == "lead: logs replay (3 sources)"
