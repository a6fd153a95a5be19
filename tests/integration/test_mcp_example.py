"""``examples/mcp_tools.py`` runs as written: MCP tools in, then the agent called over MCP."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]


def test_the_mcp_example_uses_an_mcp_servers_tools_then_answers_over_mcp(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "mcp_tools.py")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    lines = result.stdout.splitlines()
    assert lines[:5] == [
        "tools from the MCP server: ['calc_add', 'calc_wipe']",
        "paused: calc_wipe waits for approval; approving",
        "calc_add -> {'total': 42}",
        "calc_wipe -> {'result': 'memory cleared'}",
        "answer: 42",
    ]
    assert lines[5] == "MCP tools of the gateway: ['calculator']"
    assert lines[6].startswith("progress 0: session mcp-")
    # The agent's finishing call is its output: the example never shows its tool name.
    assert any(line.endswith(": calculator gives its output") for line in lines)
    assert not [line for line in lines if "__finish__" in line]
    assert any(
        line.endswith("calculator waits for people: approval calc_wipe (wipe-1)") for line in lines
    )
    assert lines[-1] == "structured content: {'answer': 42}"
