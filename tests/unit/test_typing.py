"""mypy sees an agent's output type: ``tests/typing/typed_results.py`` is checked here.

Each ``reveal_type(...)  # T`` line there must reveal ``T`` (module prefixes
dropped), and the file must have no other error.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

CHECKED = Path(__file__).parents[1] / "typing" / "typed_results.py"
EXPECTED = re.compile(r"reveal_type\(.*\)  # (?P<type>.+)$")
REVEALED = re.compile(r":(?P<line>\d+): note: Revealed type is \"(?P<type>.+)\"$")


def _short(type_text: str) -> str:
    """``helix_agents.agents.define.AgentConfig[x.Findings]`` -> ``AgentConfig[Findings]``."""
    return re.sub(r"\b(?:[a-z_]+\.)+(?=[A-Za-z_]+)", "", type_text)


def test_mypy_reveals_the_output_type_of_typed_agents(tmp_path: Path) -> None:
    expected = {
        number: match["type"]
        for number, line in enumerate(CHECKED.read_text().splitlines(), start=1)
        if (match := EXPECTED.search(line))
    }
    assert len(expected) == 7
    stdout, stderr, status = api.run(
        [
            "--strict",
            "--warn-unused-ignores",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path),
            str(CHECKED),
        ]
    )
    revealed = {
        int(match["line"]): _short(match["type"])
        for line in stdout.splitlines()
        if (match := REVEALED.search(line))
    }
    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert errors == [], stdout + stderr
    assert revealed == expected, stdout
    assert status == 0, stdout + stderr
