"""``helix-agents demo hitl``: a grandchild's approval gate, answered at the terminal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from helix_agents.events import ApprovalGiven
from helix_agents.server.cli.demos import hitl as demo_hitl
from helix_agents.server.cli.demos.hitl import terminal_user
from helix_agents.stores import open_store

pytestmark = pytest.mark.anyio


def _demo(tmp_path: Path, stdin: str) -> subprocess.CompletedProcess[str]:
    store = f"sqlite:///{tmp_path / 'demo.db'}"
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", "demo", "hitl", "--store", store],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


async def _deciders(path: Path) -> set[str | None]:
    """Who decided, by every ``approval_given`` in the demo's store (root, ancestors, owner)."""
    store = await open_store(f"sqlite:///{path}")
    try:
        return {
            event.decided_by
            for session_id in await store.list_sessions()
            for event in await store.read(session_id)
            if isinstance(event, ApprovalGiven)
        }
    finally:
        await store.close()


def test_typing_y_approves_and_the_whole_tree_completes(tmp_path: Path) -> None:
    done = _demo(tmp_path, "y\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # The call's name and its arguments, a space between them.
    assert 'waiting: approval for publish {"title":"Why a log",' in out
    # Piped, the prompt is a line of its own with the answer read after it.
    assert "\napprove? [y/N] y\napproved, submitted at the root" in out
    # The path from the root to the owner, as session ids, root first.
    assert re.search(r"in (hitl-[0-9a-f]{8}) > \1-sub-\S+ > \1-sub-\S+-sub-\S+\n", out)
    assert "approved, submitted at the root" in out
    # The decider is who sits at the terminal (the OS user), recorded with the decision.
    who = terminal_user()
    if who is not None:
        assert f"(decided by {who})" in out
        assert anyio.run(_deciders, tmp_path / "demo.db") == {who}
    assert "the tree resumed: True" in out
    assert "the session ended completed" in out
    # The grandchild's tool ran after the approval: its result is on the root's stream.
    assert out.index("approved, submitted") < out.rindex("publish")


def test_end_of_input_denies_and_the_llm_sees_the_reason(tmp_path: Path) -> None:
    done = _demo(tmp_path, "")
    assert done.returncode == 0, done.stderr
    assert "\ndenied (no answer (end of input))" in done.stdout
    assert "approve? [y/N]" not in done.stdout  # no prompt left open: nothing was read
    assert "denied by a person: no answer (end of input)" in done.stdout
    assert "the session ended completed" in done.stdout


async def test_the_gated_tool_runs_only_when_approved() -> None:
    lines: list[str] = []

    async def never(prompt: str) -> str | None:
        raise AssertionError("an answer was given: no prompt expected")

    demo_hitl.published.clear()
    await demo_hitl.run_hitl_demo("memory://", ask=never, write=lines.append, answer="deny")
    assert demo_hitl.published == []
    await demo_hitl.run_hitl_demo("memory://", ask=never, write=lines.append, answer="approve")
    assert demo_hitl.published == ["Why a log"]
