"""``helix-agents diff A B``: two stored sessions from their common prefix.

Real sessions in a SQLite store: a session and a fork of it with an edited
tool result (they part where the edit is), the same session twice (nothing
parts them), two runs whose model used other tool call ids (normalized:
the same), and exported files.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import anyio
import msgspec
import pytest

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.events import MessageAppended, ReplaceToolResult
from helix_agents.log.codec import encode_jsonl
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.stores import SqliteEventStore

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT))

from tests.integration.eval_app import Query, lookup, support  # noqa: E402

pytestmark = pytest.mark.slow


def _agent_with_ids(call_id: str) -> object:
    return define_agent(
        "support",
        tools=[define_tool("lookup", "Look a topic up", Query, lookup)],
        llm=ScriptedLLM(
            [[ScriptedLLM.call("lookup", {"query": "ids"}, id=call_id)], "looked it up"]
        ),
    )


async def _record(path: Path) -> int:
    """d-1 and its fork d-1-edited (the lookup's result replaced); two runs with other ids."""
    store = SqliteEventStore(path)
    os.environ.pop("EVAL_MODEL", None)
    async with AgentExecutor(store, [support]) as executor:
        handle = await executor.execute(support, "what about billing?", session_id="d-1")
        assert (await handle.result()).status == "completed"
        log = await store.read("d-1")
        result = next(
            e
            for e in log
            if isinstance(e, MessageAppended) and isinstance(e.message, ToolResultMessage)
        )
        assert isinstance(result.message, ToolResultMessage)
        await executor.fork(
            "d-1",
            result.seq,
            edits=[ReplaceToolResult(tool_call_id=result.message.tool_call_id, result="closed")],
            new_session_id="d-1-edited",
        )
        await executor.wait_idle("d-1-edited")
    for session_id, call_id in (("ids-1", "call_x"), ("ids-2", "call_y")):
        agent = _agent_with_ids(call_id)
        async with AgentExecutor(store, [agent]) as executor:  # type: ignore[list-item]
            handle = await executor.execute(agent, "ids?", session_id=session_id)  # type: ignore[arg-type]
            assert (await handle.result()).status == "completed"
    await store.close()
    return result.seq


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    db = tmp_path_factory.mktemp("diff") / "rec.db"
    return db, anyio.run(_record, db)


def _diff(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", "diff", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_fork_with_an_edited_tool_result_parts_where_the_edit_is(
    recorded: tuple[Path, int],
) -> None:
    db, result_seq = recorded
    done = _diff("--store", f"sqlite:///{db}", "d-1", "d-1-edited", "--json")
    assert done.returncode == 0, done.stderr
    diff = msgspec.json.decode(done.stdout)
    assert diff["parted"] is True
    assert diff["common"] == result_seq - 1  # everything before the replaced result
    assert diff["a"]["partedSeq"] == diff["b"]["partedSeq"] == result_seq
    assert diff["a"]["partedType"] == diff["b"]["partedType"] == "message_appended"
    assert "closed" in diff["b"]["partedExcerpt"]
    assert diff["a"]["output"] == {"answer": '{"fact":"about billing: it is fine"}'}
    assert diff["b"]["output"] == {"answer": "closed"}
    assert [c["name"] for c in diff["b"]["toolCalls"]] == ["lookup", "__finish__"]
    assert diff["b"]["toolCalls"][0]["result"] == "closed"
    assert diff["a"]["usage"]["llmCalls"] == diff["b"]["usage"]["llmCalls"] == 2
    assert "costUsd" in diff["a"]
    text = _diff("--store", f"sqlite:///{db}", "d-1", "d-1-edited")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0] == "diff d-1 d-1-edited"
    assert lines[1] == f"  common prefix: {result_seq - 1} events (A to seq {result_seq - 1}, " + (
        f"B to seq {result_seq - 1})"
    )
    assert lines[3].split()[:4] == ["A", "seq", str(result_seq), "message_appended"]
    assert "'closed'" in text.stdout
    assert "B (d-1-edited) after the prefix:" in text.stdout


def test_a_session_against_itself_and_other_call_ids_are_the_same(
    recorded: tuple[Path, int],
) -> None:
    db, _ = recorded
    for a, b in (("d-1", "d-1"), ("ids-1", "ids-2")):
        done = _diff("--store", f"sqlite:///{db}", a, b, "--json")
        assert done.returncode == 0, done.stderr
        diff = msgspec.json.decode(done.stdout)
        assert (diff["same"], diff["parted"]) == (True, False)
        assert diff["a"]["partedSeq"] is None
        assert diff["common"] == diff["a"]["events"]
    text = _diff("--store", f"sqlite:///{db}", "ids-1", "ids-2")
    assert "the same:" in text.stdout.splitlines()[1]


async def _export(db: Path, ids: list[str]) -> list[bytes]:
    store = SqliteEventStore(db)
    try:
        return [encode_jsonl(await store.read(sid)) for sid in ids]
    finally:
        await store.close()


def test_exported_files_diff_as_the_store_does(recorded: tuple[Path, int], tmp_path: Path) -> None:
    db, _ = recorded
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    data_a, data_b = anyio.run(_export, db, ["d-1", "d-1-edited"])
    a.write_bytes(data_a)
    b.write_bytes(data_b)
    from_files = _diff(str(a), str(b), "--json")
    from_store = _diff("--store", f"sqlite:///{db}", "d-1", "d-1-edited", "--json")
    assert from_files.returncode == 0, from_files.stderr
    assert from_files.stdout == from_store.stdout
    mixed = _diff("--store", f"sqlite:///{db}", "d-1", str(b), "--json")
    assert mixed.returncode == 0, mixed.stderr
    assert mixed.stdout == from_store.stdout


@pytest.mark.parametrize(
    ("args", "code", "start"),
    [
        (["d-1", "nope"], 1, "session 'nope' not found"),
        (["d-1", "bad id!"], 2, "invalid session id"),
        (["d-1"], 2, "the following arguments are required: B"),
        (["./missing.jsonl", "d-1"], 1, "cannot read ./missing.jsonl"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    recorded: tuple[Path, int], args: list[str], code: int, start: str
) -> None:
    db, _ = recorded
    store = [] if args[0].endswith(".jsonl") else ["--store", f"sqlite:///{db}"]
    done = _diff(*store, *args)
    assert done.returncode == code, done.stderr
    assert done.stderr.startswith(f"helix-agents: error: {start}"), done.stderr
    assert done.stderr.count("\n") == 1
    assert done.stdout == ""


def test_a_missing_store_is_an_error_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    done = _diff("--store", f"sqlite:///{missing}", "a", "b")
    assert done.returncode == 1
    assert done.stderr.startswith("helix-agents: error: no event store at")
    assert not missing.exists()
