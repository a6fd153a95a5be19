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

from servers import serve  # noqa: E402

from helix_agents.server import AgentServer, create_http_app  # noqa: E402
from helix_agents.stores import MemoryEventStore  # noqa: E402
from helix_agents.transports import HttpRemoteAgentTransport  # noqa: E402
from tests.integration.rerun_app import chat, lead, remote_lead, researcher  # noqa: E402


async def _record(path: Path) -> None:
    store = SqliteEventStore(path)
    async with AgentExecutor(store, [lead]) as executor:
        handle = await executor.execute(lead, "why logs?", session_id="rec-1")
        result = await handle.result()
        assert result.status == "completed"
    await store.close()


def _rerun(
    db: Path,
    fact: str | None,
    *extra: str,
    session_id: str = "rec-1",
    marker: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("RERUN_FACT", None)
    env.pop("RERUN_MARKER", None)
    if fact is not None:
        env["RERUN_FACT"] = fact
    if marker is not None:
        env["RERUN_MARKER"] = str(marker)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "helix_agents.server",
            "replay",
            "--store",
            f"sqlite:///{db}",
            session_id,
            "--rerun",
            "tests.integration.rerun_app:agents",
            *extra,
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


def test_by_default_a_changed_tool_is_answered_from_the_recording(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record, db)
    marker = tmp_path / "ran.txt"
    done = _rerun(db, "logs forget", marker=marker)
    assert done.returncode == 0, done.stderr
    assert "tools and remote children: every tool from the recording" in done.stdout
    assert "divergences: none" in done.stdout
    assert "same: yes" in done.stdout
    assert not marker.exists()  # the tool never ran


def test_rerun_with_a_changed_live_tool_points_at_the_divergence(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record, db)
    marker = tmp_path / "ran.txt"
    done = _rerun(db, "logs forget", "--live", "lookup", marker=marker)
    assert marker.read_text() == "lookup ran\n"
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


async def _record_follow_up(path: Path) -> None:
    store = SqliteEventStore(path)
    async with AgentExecutor(store, [chat]) as executor:
        first = await executor.execute(chat, "hi", session_id="chat-1")
        assert (await first.result()).output == "first answer"
        again = await executor.send_message("chat-1", "and then?")
        assert (await again.result()).output == "second answer"
    await store.close()


def test_every_run_of_the_session_is_re_run(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record_follow_up, db)
    done = _rerun(db, None, session_id="chat-1")
    assert done.returncode == 0, done.stderr
    assert "runs re-run: 2" in done.stdout
    assert 'recorded: completed  output="second answer"' in done.stdout
    assert 're-run:   completed  output="second answer"' in done.stdout
    assert "same: yes" in done.stdout


async def _record_remote(path: Path) -> None:
    served = AgentServer([researcher], MemoryEventStore())
    store = SqliteEventStore(path)
    async with (
        served,
        serve(create_http_app(served)) as url,
        HttpRemoteAgentTransport(url, max_retries=0, timeout=5) as transport,
    ):
        agent = remote_lead(transport)
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "why logs?", session_id="rem-1")
            assert (await handle.result()).status == "completed"
    await store.close()


def test_a_remote_child_is_answered_from_the_recording(tmp_path: Path) -> None:
    db = tmp_path / "rec.db"
    anyio.run(_record_remote, db)
    # The re-run's remote child is a closed port: only the recording can answer.
    done = _rerun(db, None, session_id="rem-1")
    assert done.returncode == 0, done.stderr
    assert "same: yes" in done.stdout
    assert 'output={"answer":"because logs replay"}' in done.stdout
    live = _rerun(db, None, "--live", "subagent__researcher", session_id="rem-1")
    assert live.returncode == 0, live.stderr
    assert "same: no" in live.stdout  # run live, the unreachable child fails the call


def test_live_without_rerun_is_a_usage_error(tmp_path: Path) -> None:
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
            "--live",
            "lookup",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2
    assert "--live needs --rerun" in done.stderr
