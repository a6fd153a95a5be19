"""``replay --rerun`` imports a module whose model cannot be reached: it never calls it.

The module's agent names ``model="openai:gpt-4o-mini"``; the re-run runs in
an environment with no ``OPENAI_API_KEY`` and no ``OPENAI_BASE_URL``. The
name is checked when the agent is defined, its variables only when it calls
the model, which a re-run never does (the answers come from the recording).
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

import anyio
import pytest

from helix_agents import AgentExecutor
from helix_agents.models import ScriptedLLM
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

MODULE = """\
from helix_agents import define_agent, tool


@tool
def word_count(text: str) -> int:
    \"\"\"Count the words of a text.\"\"\"
    return len(text.split())


agents = [define_agent("counter", tools=[word_count], model="openai:gpt-4o-mini")]
"""


async def test_rerun_of_an_agent_naming_openai_needs_no_key(tmp_path: Path) -> None:
    (tmp_path / "counter_app.py").write_text(MODULE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "HELIX_"))}
    [agent] = runpy.run_path(str(tmp_path / "counter_app.py"))["agents"]
    db = tmp_path / "rec.db"
    store = SqliteEventStore(db)
    script = ScriptedLLM([[ScriptedLLM.call("word_count", {"text": "a b c"})], "3 words"])
    with anyio.fail_after(30):
        async with AgentExecutor(store, [agent], llm_override=script) as executor:
            assert await executor.run(agent, "count 'a b c'", session_id="rec-1") == "3 words"
        await store.close()
        done = await anyio.run_process(
            [
                sys.executable,
                "-m",
                "helix_agents.server",
                "replay",
                "--store",
                f"sqlite:///{db}",
                "rec-1",
                "--rerun",
                "counter_app:agents",
            ],
            cwd=tmp_path,
            env=env,
            check=False,
        )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert '  re-run:   completed  output="3 words"' in out
    assert "divergences: none" in out
    assert out.rstrip().endswith("same: yes")
