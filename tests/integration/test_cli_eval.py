"""``helix-agents eval``: recorded sessions re-run as forks against today's agents, and scored.

Twenty sessions are recorded with the support agent's model at v1; the eval
runs them with v2, which answers two of them (the "refund" questions)
otherwise: those two fail, name the first event where their branch parts,
and the exit status, the table, the JSON and the JUnit XML all agree.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import anyio
import msgspec
import pytest

from helix_agents import AgentExecutor
from helix_agents.events import SessionForked
from helix_agents.log.codec import encode_jsonl
from helix_agents.stores import SqliteEventStore

ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT))

from servers import serve  # noqa: E402

from helix_agents.server import AgentServer, create_http_app  # noqa: E402
from helix_agents.stores import MemoryEventStore  # noqa: E402
from helix_agents.transports import HttpRemoteAgentTransport  # noqa: E402
from tests.integration.eval_app import support  # noqa: E402
from tests.integration.rerun_app import chat, remote_lead, researcher  # noqa: E402

pytestmark = pytest.mark.slow

DIVERGENT = {"case-04", "case-13"}
EVAL_FAILED = 4


async def _record(path: Path) -> dict[str, bytes]:
    """Twenty sessions (two about a refund); each log's bytes, to check they never change."""
    store = SqliteEventStore(path)
    async with AgentExecutor(store, [support]) as executor:
        for i in range(20):
            topic = "refund" if f"case-{i:02d}" in DIVERGENT else f"topic{i}"
            handle = await executor.execute(
                support,
                f"what about {topic}?",
                session_id=f"case-{i:02d}",
                metadata={"env": "prod" if i < 18 else "staging"},
            )
            assert (await handle.result()).status == "completed"
    logs = {f"case-{i:02d}": encode_jsonl(await store.read(f"case-{i:02d}")) for i in range(20)}
    await store.close()
    return logs


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, bytes]]:
    db = tmp_path_factory.mktemp("eval") / "rec.db"
    os.environ.pop("EVAL_MODEL", None)
    return db, anyio.run(_record, db)


def _cli(
    *args: str, model: str = "v2", marker: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env["EVAL_MODEL"] = model
    env.pop("EVAL_MARKER", None)
    if marker is not None:
        env["EVAL_MARKER"] = str(marker)
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


async def _logs(db: Path, ids: list[str]) -> dict[str, list[object]]:
    store = SqliteEventStore(db)
    try:
        return {sid: list(await store.read(sid)) for sid in ids}
    finally:
        await store.close()


def _rows(stdout: str) -> dict[str, list[str]]:
    """The table's rows by case (the lines before the summary)."""
    table = stdout.split(" cases: ")[0].splitlines()[1:-1]
    return {line.split()[0]: line.split() for line in table}


def test_eval_of_twenty_sessions_two_diverging_table_json_and_junit_agree(
    recorded: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    db, before = recorded
    junit = tmp_path / "eval.xml"
    marker = tmp_path / "ran.txt"
    done = _cli(
        "eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{db}",
        "--junit", str(junit), "--label", "t1", marker=marker,
    )  # fmt: skip
    assert done.returncode == EVAL_FAILED, done.stderr
    assert not marker.exists()  # every tool call was answered from the recording
    rows = _rows(done.stdout)
    assert len(rows) == 20
    failed_in_table = {case for case, row in rows.items() if row[1] == "failed"}
    assert failed_in_table == DIVERGENT
    assert all(rows[case][1] == "passed" for case in rows if case not in DIVERGENT)
    assert "20 cases: 18 passed, 2 failed, 0 errors" in done.stdout
    for case in DIVERGENT:
        # the table names the first recorded event after the common prefix
        assert rows[case][-2:] == ["4", "message_appended"]
        assert f"{case} failed: branch {case}.eval-t1" in done.stdout
    assert "parts after 3 shared events: recorded seq 4 (message_appended)" in done.stdout
    assert 'same_tool_calls: call 1: recorded lookup({"query":"refund"}), branch lookup(' in (
        done.stdout
    )
    # JUnit says the same
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("20", "2", "0")
    failing = {
        case.get("name"): case.find("failure")
        for case in suite.iter("testcase")
        if case.find("failure") is not None
    }
    assert set(failing) == DIVERGENT
    for failure in failing.values():
        assert failure is not None
        message = failure.get("message", "")
        assert "output_equal" in message
        assert "same_tool_calls" in message
        assert "recorded seq 4 (message_appended)" in message
    # each branch stays in the store: a fork of its recording, the recording untouched
    branches = [f"case-{i:02d}.eval-t1" for i in range(20)]
    logs = anyio.run(_logs, db, [*branches, *before])
    for branch in branches:
        markers = [e for e in logs[branch] if isinstance(e, SessionForked)]
        assert [(m.origin_session_id, m.origin_seq) for m in markers] == [(branch[:7], 2)]
    for case, data in before.items():
        assert encode_jsonl(logs[case]) == data  # type: ignore[arg-type]
    checked = _cli("check", "--store", f"sqlite:///{db}")
    assert checked.returncode == 0, checked.stdout  # every branch's log is sound
    assert checked.stdout.rstrip().endswith(": 0 damaged")


def test_eval_json_agrees_and_a_search_chooses_the_cases(
    recorded: tuple[Path, dict[str, bytes]],
) -> None:
    db, _ = recorded
    done = _cli(
        "eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{db}",
        "--metadata", "env=staging", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr  # the staging sessions are not about refunds
    report = msgspec.json.decode(done.stdout)
    assert sorted(case["case"] for case in report["cases"]) == ["case-18", "case-19"]
    assert (report["passed"], report["failed"], report["errors"], report["ok"]) == (2, 0, 0, True)
    scores = {score["name"] for score in report["cases"][0]["scores"]}
    assert scores == {
        "output_equal",
        "output_valid",
        "same_tool_calls",
        "token_delta",
        "cost_delta",
    }
    # searched with words: only the refund sessions, which fail
    words = _cli(
        "eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{db}",
        "--search", "refund", "--json",
    )  # fmt: skip
    assert words.returncode == EVAL_FAILED, words.stderr
    report = msgspec.json.decode(words.stdout)
    assert {case["case"] for case in report["cases"]} == DIVERGENT
    assert all(case["parting"]["recordedSeq"] == 4 for case in report["cases"])


def test_with_the_recorded_model_every_case_passes_and_live_runs_the_tool(
    recorded: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    db, _ = recorded
    marker = tmp_path / "ran.txt"
    done = _cli(
        "eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{db}",
        "--session", "case-04", "--session", "case-05", "--live", "lookup",
        model="v1", marker=marker,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 cases: 2 passed, 0 failed, 0 errors" in done.stdout
    assert marker.read_text().splitlines() == ["lookup refund", "lookup topic5"]


def test_a_user_scorer_and_cases_from_exported_files(
    recorded: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    _, before = recorded
    files = []
    for case in ("case-04", "case-07"):
        path = tmp_path / f"{case}.jsonl"
        path.write_bytes(before[case])
        files += ["--file", str(path)]
    branches = tmp_path / "branches.db"
    done = _cli(
        "eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{branches}",
        *files, "--scorer", "tests.integration.eval_app:short_answer", "--json",
    )  # fmt: skip
    assert done.returncode == EVAL_FAILED, done.stderr
    report = msgspec.json.decode(done.stdout)
    by_case = {case["case"]: case for case in report["cases"]}
    assert by_case["case-07"]["verdict"] == "passed"
    assert by_case["case-04"]["verdict"] == "failed"
    mine = [s for s in by_case["case-04"]["scores"] if s["name"] == "short_answer"]
    assert mine == [
        {"name": "short_answer", "passed": False, "value": None, "detail": ""}
    ]  # v2's refund answer is longer than 60 characters


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


def test_a_remote_child_over_http_is_answered_from_the_recording(tmp_path: Path) -> None:
    db = tmp_path / "rem.db"
    anyio.run(_record_remote, db)
    # today's remote child is a closed port: only the recording can answer it
    done = _cli(
        "eval", "tests.integration.rerun_app:agents", "--store", f"sqlite:///{db}",
        "--session", "rem-1", "--label", "t1",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 cases: 1 passed" in done.stdout
    answered = _cli("diff", "--store", f"sqlite:///{db}", "rem-1", "--json", "rem-1.eval-t1")
    live = _cli(
        "eval", "tests.integration.rerun_app:agents", "--store", f"sqlite:///{db}",
        "--session", "rem-1", "--live", "subagent__researcher", "--label", "t2",
    )  # fmt: skip
    assert live.returncode == 0, live.stderr  # the model answers alike whatever the child says
    called = _cli("diff", "--store", f"sqlite:///{db}", "rem-1", "--json", "rem-1.eval-t2")
    # answered from the recording, the child gave its findings; live, the call really went
    # out to the closed port and failed
    [recorded] = [
        c
        for c in msgspec.json.decode(answered.stdout)["b"]["toolCalls"]
        if c["name"] != "__finish__"
    ]
    assert (recorded["result"], recorded["isError"]) == ('{"findings":"logs replay"}', False)
    [failed] = [
        c for c in msgspec.json.decode(called.stdout)["b"]["toolCalls"] if c["name"] != "__finish__"
    ]
    assert failed["isError"] is True
    assert "127.0.0.1:9" in failed["result"]


@pytest.mark.parametrize(
    ("args", "code", "start"),
    [
        (["no_such_module:agents"], 2, "cannot import 'no_such_module'"),
        (["tests.integration.eval_app:agents", "--status", "nope"], 2, "argument --status"),
        (["tests.integration.eval_app:agents", "--search", "zebra"], 1, "no recorded sessions"),
        (["tests.integration.eval_app:agents", "--session", "nope"], 2, "session 'nope' not"),
        (["tests.integration.eval_app:agents", "--session", "x", "--file", "a"], 2, "give --"),
        (["tests.integration.eval_app:agents", "--file", "missing.jsonl"], 2, "cannot read"),
        (["tests.integration.eval_app:agents", "--model", "nosuch:thing"], 2, "cannot import"),
    ],
)
def test_bad_input_is_one_line_and_non_zero(
    recorded: tuple[Path, dict[str, bytes]], args: list[str], code: int, start: str
) -> None:
    db, before = recorded
    done = _cli("eval", "--store", f"sqlite:///{db}", *args)
    assert done.returncode == code, done.stdout + done.stderr
    assert done.stderr.startswith(f"helix-agents: error: {start}"), done.stderr
    assert done.stderr.count("\n") == 1
    logs = anyio.run(_logs, db, list(before))
    assert all(encode_jsonl(logs[c]) == data for c, data in before.items())  # type: ignore[arg-type]


def test_eval_of_a_missing_store_is_an_error(tmp_path: Path) -> None:
    missing = tmp_path / "none.db"
    done = _cli("eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{missing}")
    assert done.returncode == 1
    assert done.stderr.startswith("helix-agents: error: no event store at")
    assert not missing.exists()


def test_another_model_answers_every_call(recorded: tuple[Path, dict[str, bytes]]) -> None:
    db, _ = recorded
    done = _cli(
        "eval", "tests.integration.eval_app:agents", "--store", f"sqlite:///{db}",
        "--session", "case-04", "--session", "case-05", "--json",
        "--model", "tests.integration.eval_app:terse", model="v1",
    )  # fmt: skip
    assert done.returncode == EVAL_FAILED, done.stderr
    report = msgspec.json.decode(done.stdout)
    assert report["model"] == "tests.integration.eval_app:terse"
    by_case = {case["case"]: case for case in report["cases"]}
    # case-04 asked about a refund: the recorded lookup answers it; case-05 did not
    assert by_case["case-04"]["misses"] == []
    assert by_case["case-05"]["misses"] == ['support: lookup({"query":"refund"})']
    for case in by_case.values():
        assert case["branchOutput"] == {"answer": "no idea"}
        assert case["verdict"] == "failed"


async def _record_follow_up(path: Path) -> None:
    store = SqliteEventStore(path)
    async with AgentExecutor(store, [chat]) as executor:
        first = await executor.execute(chat, "hi", session_id="chat-1")
        assert (await first.result()).output == "first answer"
        again = await executor.send_message("chat-1", "and then?")
        assert (await again.result()).output == "second answer"
    await store.close()


def test_every_later_run_of_a_case_is_sent_to_its_branch(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    anyio.run(_record_follow_up, db)
    done = _cli(
        "eval", "tests.integration.rerun_app:agents", "--store", f"sqlite:///{db}",
        "--session", "chat-1", "--label", "t1", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    [case] = msgspec.json.decode(done.stdout)["cases"]
    assert (case["verdict"], case["branchOutput"], case["parting"]) == (
        "passed",
        "second answer",
        None,
    )


def test_a_case_that_cannot_run_is_an_error_in_the_table_and_the_junit(
    recorded: tuple[Path, dict[str, bytes]], tmp_path: Path
) -> None:
    db, _ = recorded
    junit = tmp_path / "eval.xml"
    done = _cli(
        "eval", "tests.integration.rerun_app:agents", "--store", f"sqlite:///{db}",
        "--session", "case-04", "--junit", str(junit),
    )  # fmt: skip
    assert done.returncode == EVAL_FAILED, done.stderr
    assert _rows(done.stdout)["case-04"][1] == "error"
    assert "1 cases: 0 passed, 0 failed, 1 errors" in done.stdout
    assert "error: no agent 'support' among chat, lead, remote_lead, researcher" in done.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("1", "0", "1")
    error = suite.find("testcase/error")
    assert error is not None
    assert error.get("message") == "no agent 'support' among chat, lead, remote_lead, researcher"
