"""The runnable examples in ``examples/`` do what their docstrings say."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import anyio
import pytest

from helix_agents.events import CompletionDelivered, RunStarted, SessionCreated, WorkspaceWritten
from helix_agents.log import project_state
from helix_agents.stores import SqliteEventStore

EXAMPLES = Path(__file__).parents[2] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_workspace_notes_the_reader_inherits_and_reads_the_scribes_notes(
    tmp_path: Path,
) -> None:
    example = load("workspace_notes")
    with anyio.fail_after(10):
        result, lines = await example.run(tmp_path)
    assert result.status == "completed"
    assert result.output == "The reader says: 2 notes: Lyon, Nice"
    notes = tmp_path / "workspaces" / example.SESSION / "notes"
    for path, text in example.NOTES.items():
        assert (notes / path).read_text() == text
    assert sum(" workspace_written " in line for line in lines) == 2
    store = SqliteEventStore(tmp_path / "events.db")
    try:
        parent = await store.read(example.SESSION)
        [child_id] = project_state(parent).sub_sessions
        child = await store.read(child_id)
    finally:
        await store.close()
    created = child[0]
    assert isinstance(created, SessionCreated)
    assert created.workspace_session_id == example.SESSION
    assert [e.path for e in parent if isinstance(e, WorkspaceWritten)] == sorted(example.NOTES)
    assert not any(isinstance(e, WorkspaceWritten) for e in child)  # it only read


@pytest.mark.slow
def test_workspace_notes_runs_as_a_script(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "workspace_notes.py"), "--root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "status: completed" in out
    assert "answer: The reader says: 2 notes: Lyon, Nice" in out
    assert "notes-demo/notes/notes/lyon.md: Lyon: Roman Lugdunum" in out


@pytest.mark.slow
def test_workspace_notes_reruns_without_divergence_in_a_sandbox(tmp_path: Path) -> None:
    """``replay --rerun`` gives every workspace kind a scratch memory provider."""
    example = load("workspace_notes")
    anyio.run(example.run, tmp_path)
    notes = tmp_path / "workspaces" / example.SESSION / "notes" / "notes"
    (notes / "lyon.md").write_text("changed on disk after the recording")
    store = f"sqlite:///{tmp_path / 'events.db'}"
    command = [sys.executable, "-m", "helix_agents.server", "replay", "--store", store]
    result = subprocess.run(
        [*command, example.SESSION, "--rerun", "examples.workspace_notes:AGENTS"],
        cwd=EXAMPLES.parent,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "divergences: none" in result.stdout
    assert "re-run:   completed" in result.stdout
    # The re-run wrote nowhere real: the file changed on disk stays changed.
    assert (notes / "lyon.md").read_text() == "changed on disk after the recording"


async def test_critic_loop_re_consults_one_critic_until_it_passes(tmp_path: Path) -> None:
    example = load("critic_loop")
    with anyio.fail_after(20):
        result, rollup = await example.run(tmp_path / "events.db")
    assert result.status == "completed"
    assert result.output == (
        f"final: {example.DRAFTS[2]} (pass: round 3: 17 syllables; last time it had 20)"
    )
    critic_id = f"{example.SESSION}-agent-reviewer"
    assert rollup.sessions == [example.SESSION, critic_id]
    store = SqliteEventStore(tmp_path / "events.db")
    try:
        maker = await store.read(example.SESSION)
        critic = await store.read(critic_id)
    finally:
        await store.close()
    # One critic session, three rounds on it; each verdict delivered once, inline.
    assert sum(isinstance(e, SessionCreated) for e in critic) == 1
    assert [e.mode for e in critic if isinstance(e, RunStarted)] == [
        "start",
        "continue",
        "continue",
    ]
    assert [e.via for e in maker if isinstance(e, CompletionDelivered)] == ["pull"] * 3
    critic_state, maker_state = project_state(critic), project_state(maker)
    assert rollup.llm_calls == critic_state.usage.llm_calls + maker_state.usage.llm_calls
    assert critic_state.usage.llm_calls == 6  # load, then verdict, per round


async def test_critic_loop_stops_at_the_round_cap(tmp_path: Path) -> None:
    example = load("critic_loop")
    with anyio.fail_after(20):
        result, _ = await example.run(tmp_path / "events.db", rounds=2)
    assert (
        result.output
        == f"final: {example.DRAFTS[1]} (revise: round 2: 20 syllables; last time it had 10)"
    )


@pytest.mark.slow
def test_critic_loop_runs_as_a_script(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(EXAMPLES / "critic_loop.py"), "--store", str(tmp_path / "e.db")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "status: completed" in out
    assert "sessions: critic-loop, critic-loop-agent-reviewer" in out
