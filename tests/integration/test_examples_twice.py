"""Every script in ``examples/`` runs twice in a row, with stdin closed and no API key.

As a newcomer would run them: ``python examples/X.py`` in one scratch
directory, twice (a store given on the command line is reused, so fixed
session ids would collide), with no terminal and no ``OPENAI_API_KEY``. Each
succeeds, or says in one line what it needs and exits 0; none prints a
traceback. A new example must be added here (a test checks the list).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from nats_server import NatsServer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT = 60

RUNS: dict[str, tuple[list[str], str]] = {
    "critic_loop.py": (["--store", "critic.db"], "status: completed"),
    "human_in_the_loop.py": ([], "denied; outcome: denied by a person: no answer (end of input)"),
    "local_tree.py": (
        ["--store", "sqlite:///tree.db"],
        "brief: Event logs make recovery a replay.",
    ),
    "openai_compatible.py": ([], ""),  # says what it needs, on stderr
    "remote_child_http.py": ([], "answer: Because replay rebuilds state."),
    "workspace_notes.py": (["--root", "notes"], "answer: The reader says: 2 notes: Lyon, Nice"),
    "nats_fleet.py": ([], ""),  # with a server: test_nats_fleet_runs_twice
    "a2a_interop.py": ([], "lead: logs replay (3 sources)"),
    "temporal_worker.py": ([], "output: Lyon has 516092 people: big enough."),
    "mcp_tools.py": ([], "structured content: {'answer': 42}"),
    "dbos_agents.py": (
        ["--dbos", "sqlite:///dbos.sqlite", "--store", "sqlite:///dbos-events.db"],
        "output: Lyon has 516092 people: big enough, and the visit is booked.",
    ),
}
"""Each example's arguments and a line its output must hold."""


def run_closed(cwd: Path, script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python examples/SCRIPT ARGS`` in ``cwd``, stdin closed, no OpenAI variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    return subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={**env, "PYTHONPATH": str(ROOT)},
    )


def test_every_example_is_listed() -> None:
    assert sorted(path.name for path in EXAMPLES.glob("*.py")) == sorted(RUNS)


@pytest.mark.parametrize("script", sorted(RUNS))
def test_an_example_runs_twice_without_a_terminal_or_a_key(tmp_path: Path, script: str) -> None:
    args, expected = RUNS[script]
    for attempt in (1, 2):
        done = run_closed(tmp_path, script, *args)
        assert "Traceback" not in done.stderr, f"run {attempt}: {done.stderr}"
        if expected:
            assert done.returncode == 0, f"run {attempt}: {done.stdout}{done.stderr}"
            assert expected in done.stdout, f"run {attempt}: {done.stdout}"
        else:  # it needs what the test does not give: one line saying what
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1, f"run {attempt}: {done.stderr}"
            assert "needs" in lines[0] or "set OPENAI_API_KEY" in lines[0], lines[0]


def test_openai_compatible_without_a_key_exits_0_naming_the_variable(tmp_path: Path) -> None:
    done = run_closed(tmp_path, "openai_compatible.py")
    assert done.returncode == 0
    assert "OPENAI_API_KEY" in done.stderr


def test_a_second_local_tree_run_is_a_new_session_on_the_same_store(tmp_path: Path) -> None:
    ids = []
    for _ in (1, 2):
        done = run_closed(tmp_path, "local_tree.py", "--store", "sqlite:///tree.db")
        assert done.returncode == 0, done.stderr
        ids.append(done.stdout.splitlines()[0])
    assert ids == [
        "session tree-demo in sqlite:///tree.db",
        "session tree-demo-2 in sqlite:///tree.db",
    ]


@pytest.mark.nats
def test_nats_fleet_runs_twice(tmp_path: Path) -> None:
    with NatsServer.start(tmp_path / "nats") as nats:
        for attempt in (1, 2):
            done = run_closed(tmp_path, "nats_fleet.py", "--nats", nats.url)
            assert done.returncode == 0, f"run {attempt}: {done.stderr}"
            assert "answer: Leases: a dead host's session moves." in done.stdout
