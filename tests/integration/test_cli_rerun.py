"""``helix-agents replay --rerun``: re-run a recorded session offline and compare."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio

from helix_agents import AgentExecutor
from helix_agents.stores import SqliteEventStore

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.rerun_app import lead  # noqa: E402


async def _record(path: Path) -> None:
    store = SqliteEventStore(path)
    async with AgentExecutor(store, [lead]) as executor:
        handle = await executor.execute(lead, "why logs?", session_id="rec-1")
        result = await handle.result()
        assert result.status == "completed"
    await store.close()


def _rerun(db: Path, fact: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("RERUN_FACT", None)
    if fact is not None:
        env["RERUN_FACT"] = fact
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "helix_agents.server",
            "replay",
            "--store",
            f"sqlite:///{db}",
            "rec-1",
            "--rerun",
            "tests.integration.rerun_app:agents",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_rerun_with_the_same_tools_is_the_same_and_leaves_the_recording_alone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record, db)
    before = db.read_bytes()
    done = _rerun(db, None)
    assert done.returncode == 0, done.stderr
    assert "divergences: none" in done.stdout
    assert "same: yes" in done.stdout
    assert 'output={"answer":"because logs replay"}' in done.stdout
    assert db.read_bytes() == before  # the recording is never written to


def test_rerun_with_a_changed_tool_points_at_the_divergence(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record, db)
    done = _rerun(db, "logs forget")
    assert done.returncode == 0, done.stderr
    assert "same: no" in done.stdout
    assert "divergences: 1" in done.stdout
    # The change is in the child's conversation: its tool result differs.
    assert "rec-1-sub-call_0_0 turn 2" in done.stdout
    assert "logs replay" in done.stdout
    assert "logs forget" in done.stdout


def test_rerun_of_an_unknown_module_is_one_line_and_exit_2(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record, db)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "helix_agents.server",
            "replay",
            "--store",
            f"sqlite:///{db}",
            "rec-1",
            "--rerun",
            "no_such_module:agents",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("helix-agents: error: cannot import 'no_such_module'")
    assert done.stderr.count("\n") == 1
