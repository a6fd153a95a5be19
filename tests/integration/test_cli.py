"""The ``helix-agents`` command line, run as a real subprocess and through ``main``.

Logs are written with ``SqliteEventStore`` in the test, then read back by the
CLI: ``replay`` (timeline, ``--at``, ``--json``), ``export`` and the file replay,
``demo``, and every bad input (one ``helix-agents: error:`` line, no traceback).
"""

from __future__ import annotations

import os
import re
import shlex
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from helix_agents import SessionState
from helix_agents.errors import StoreError
from helix_agents.events import (
    ChildChunkForwarded,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Completed,
    Event,
    MessageAppended,
    OutputChunk,
    RunStarted,
    SessionCreated,
    StateUpdated,
    StepStarted,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionStarted,
    Suspended,
    TextDelta,
    ToolEnd,
    ToolStart,
    UsageRecorded,
)
from helix_agents.log import encode_jsonl, project_state
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage
from helix_agents.server.cli import main as cli
from helix_agents.server.cli.demos import tree as demo
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

T0 = 1_700_000_000.0  # 2023-11-14 22:13:20 UTC
SID = "s1"
CHILD = f"{SID}-sub-call_1"
ERROR_LINE = re.compile(r"helix-agents: error: \S.*")


def sample_log(session_id: str = SID) -> list[Event]:
    """A parent that delegates to a child, pauses on a client tool, resumes and completes."""
    child = f"{session_id}-sub-call_1"
    me = {"agent_id": session_id, "agent_type": "planner"}
    sub = {"sub_agent_id": child, "sub_agent_type": "helper", "tool_call_id": "call_1"}
    sub |= {"parent_session_id": session_id}
    inner = TextDelta(
        session_id=child, seq=4, ts=T0, agent_id=child, agent_type="helper", delta="child says hi"
    )
    call = ToolCall(id="call_1", name="subagent__helper", arguments={"q": 1})
    steps: list[tuple[Any, dict[str, Any]]] = [
        (SessionCreated, {"agent_type": "planner", "run_id": "run-1",
                          "messages": [UserMessage(content="hi")]}),
        (RunStarted, {"run_id": "run-1"}),
        (StepStarted, {"step": 1}),
        (TextDelta, {**me, "delta": "Thinking about it"}),
        (MessageAppended, {"message": AssistantMessage(tool_calls=[call])}),
        (ToolStart, {**me, "tool_call_id": "call_1", "tool_name": call.name}),
        (SubSessionStarted, {"sub_session_id": child, "agent_type": "helper",
                             "tool_call_id": "call_1"}),
        (SubAgentStart, {**me, **sub}),
        (ChildChunkForwarded, {"child_session_id": child, "child_seq": 4, "chunk": inner}),
        (SubAgentEnd, {**me, **sub, "success": True, "result": "done"}),
        (ToolEnd, {**me, "tool_call_id": "call_1", "tool_name": call.name, "result": "done"}),
        (SubSessionFinished, {"sub_session_id": child, "status": "completed", "output": "done"}),
        (MessageAppended, {"message": ToolResultMessage(
            tool_call_id="call_1", tool_name=call.name, content="done")}),
        (StateUpdated, {"state": {"k": "v"}}),
        (ClientToolPending, {"tool_call_id": "call_2", "tool_name": "confirm"}),
        (ClientToolOwnershipRecorded, {"tool_call_id": "call_2", "owner_session_id": session_id}),
        (Suspended, {"reason": "client_tool", "tool_call_ids": ["call_2"]}),
        (ClientToolResultSubmitted, {"tool_call_id": "call_2", "result": True}),
        (RunStarted, {"run_id": "run-1", "mode": "resume"}),
        (MessageAppended, {"message": ToolResultMessage(
            tool_call_id="call_2", tool_name="confirm", content="true")}),
        (UsageRecorded, {"kind": "tokens", "input_tokens": 10, "output_tokens": 5}),
        (OutputChunk, {**me, "output": {"answer": 42}}),
        (Completed, {"output": {"answer": 42}}),
    ]  # fmt: skip
    return [
        make(session_id=session_id, seq=seq, ts=T0 + seq / 10, **fields)
        for seq, (make, fields) in enumerate(steps, start=1)
    ]


PAUSED_AT = 17  # the seq of ``suspended`` in sample_log


def write_store(path: Path, logs: dict[str, list[Event]]) -> None:
    """Append each log to a SQLite store at ``path`` through the EventStore API."""

    async def write() -> None:
        async with SqliteEventStore(path) as store:
            for session_id, events in logs.items():
                await store.append(session_id, events, expected_seq=0)

    anyio.run(write)


def run(
    cwd: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m helix_agents.server ARGS`` in ``cwd``; never reads the caller's store."""
    environ = {k: v for k, v in os.environ.items() if k != cli.STORE_URL_ENV}
    environ |= {"TMPDIR": str(cwd), "PYTHONIOENCODING": "utf-8"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", *args],
        cwd=cwd,
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def ok(result: subprocess.CompletedProcess[str]) -> str:
    """The stdout of a run that must have succeeded quietly."""
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return result.stdout


def timeline_of(output: str) -> list[str]:
    """The timeline lines of a replay's output (everything before the blank line)."""
    return output.split("\n\n", 1)[0].splitlines()


@pytest.fixture
def store_dir(tmp_path: Path) -> Path:
    """``tmp_path`` holding ``events.db`` with ``sample_log`` as session ``s1``."""
    write_store(tmp_path / "events.db", {SID: sample_log()})
    return tmp_path


STORE = "sqlite:///events.db"


# --- replay ----------------------------------------------------------------------


def test_replay_prints_one_line_per_event_then_the_state(store_dir: Path) -> None:
    out = ok(run(store_dir, "replay", "--store", STORE, SID))
    events = sample_log()
    lines = timeline_of(out)
    assert len(lines) == len(events)
    for line, event in zip(lines, events, strict=True):
        seq, time, tag = line.split()[:3]
        assert int(seq) == event.seq
        assert tag == type(event).__struct_config__.tag
        assert re.fullmatch(r"22:13:2\d\.\d{3}", time)
    assert lines[0].split()[1] == "22:13:20.100"
    assert "subagent__helper (call_1)" in lines[5]
    # A forwarded chunk names the child's agent id and the inner chunk type.
    assert re.search(rf"child_chunk_forwarded\s+{CHILD} text_delta 'child says hi'", lines[8])
    assert f"{CHILD} completed" in lines[11]
    state = out.split("\n\n", 1)[1]
    assert "state at seq 23" in state
    assert re.search(r"status\s+completed", state)
    assert re.search(r"steps\s+1 ", state)
    assert re.search(r'output\s+\{"answer":42\}', state)
    assert re.search(r'custom state\s+\{"k":"v"\}', state)
    assert re.search(r"messages\s+4 ", state)
    assert re.search(rf"{CHILD}\s+helper \(ephemeral\)\s+completed\s+last child seq 4", state)
    assert re.search(r"pending client tools\s+none", state)  # its tool result settled it
    assert f"call_2 -> {SID}" in state
    assert "tokens in 10 / out 5" in state


def test_store_url_defaults_to_the_environment(store_dir: Path) -> None:
    from_env = ok(run(store_dir, "replay", SID, env={"HELIX_STORE_URL": STORE}))
    assert from_env == ok(run(store_dir, "replay", "--store", STORE, SID))
    # Without --store or the variable, it is sqlite:///helix.db in the working directory.
    (store_dir / "events.db").rename(store_dir / "helix.db")
    assert ok(run(store_dir, "replay", SID)) == from_env


def test_at_shows_the_state_as_it_was(store_dir: Path) -> None:
    out = ok(run(store_dir, "replay", "--store", STORE, SID, "--at", str(PAUSED_AT)))
    assert len(timeline_of(out)) == PAUSED_AT
    assert f"state at seq {PAUSED_AT} of 23" in out
    assert re.search(r"status\s+paused \(client_tool\)", out)
    assert re.search(r"call_2\s+confirm\s+waiting", out)
    submitted = ok(run(store_dir, "replay", "--store", STORE, SID, "--at", str(PAUSED_AT + 1)))
    assert re.search(r"call_2\s+confirm\s+result submitted", submitted)
    early = ok(run(store_dir, "replay", "--store", STORE, SID, "--at", "3"))
    assert re.search(r"status\s+running", early)


@pytest.mark.parametrize("at", [None, PAUSED_AT, 1])
def test_json_is_the_projected_state(store_dir: Path, at: int | None) -> None:
    extra = [] if at is None else ["--at", str(at)]
    out = ok(run(store_dir, "replay", "--store", STORE, SID, "--json", *extra))
    events = sample_log()[: at or None]
    assert msgspec.json.decode(out, type=SessionState) == project_state(events)


def test_replay_reads_standard_input(store_dir: Path) -> None:
    data = encode_jsonl(sample_log()).decode()
    result = subprocess.run(
        [sys.executable, "-m", "helix_agents.server", "replay", "-"],
        input=data,
        cwd=store_dir,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert ok(result) == ok(run(store_dir, "replay", "--store", STORE, SID))


# --- export ----------------------------------------------------------------------


def test_export_then_replay_file_gives_the_same_timeline(store_dir: Path) -> None:
    assert (
        ok(run(store_dir, "export", "--store", STORE, SID)) == encode_jsonl(sample_log()).decode()
    )
    ok(run(store_dir, "export", "--store", STORE, SID, "-o", "s1.jsonl"))
    assert (store_dir / "s1.jsonl").read_bytes() == encode_jsonl(sample_log())
    from_file = ok(run(store_dir, "replay", "s1.jsonl"))
    assert from_file == ok(run(store_dir, "replay", "--store", STORE, SID))
    at = ok(run(store_dir, "replay", "./s1.jsonl", "--at", "5"))
    assert len(timeline_of(at)) == 5


# --- demo ------------------------------------------------------------------------


def test_demo_runs_a_nested_session_and_replays_it(tmp_path: Path) -> None:
    out = ok(run(tmp_path, "demo"))
    assert "SCRIPTED" in out
    url = re.search(r"store:\s+(sqlite:///\S+)", out)
    session = re.search(r"session:\s+(demo-[0-9a-f]+)", out)
    assert url is not None
    assert session is not None
    assert url.group(1).startswith(f"sqlite:///{tmp_path}")  # a fresh file in a temp dir
    parent, child = session.group(1), f"{session.group(1)}-sub-call_research_1"
    live, rest = out.split(f"timeline of {parent}, replayed from the store:\n", 1)
    # Live: the parent's own chunks at depth 0, the child's forwarded ones indented below.
    assert re.search(r"^  #\d+\s+orchestrator\s+subagent_start\s+researcher", live, re.M)
    assert re.search(r"^      #\d+\s+researcher\s+text_delta\s+'", live, re.M)
    assert re.search(r"^      #\d+\s+researcher\s+tool_start\s+search_notes", live, re.M)
    # The agents' __finish__ calls stay in the log; every view shows their output instead.
    assert "__finish__" not in out
    assert re.search(r"^      #\d+\s+researcher\s+output\s+\{\"findings\"", live, re.M)
    assert re.search(r"tool_start\s+output \(call_finish_\w+\) \{\"answer\"", rest)
    assert re.search(r"tool_end\s+output \(call_finish_\w+\) accepted", rest)
    # Timeline: a child chunk attributed to the child's agent id, with its child seq.
    assert re.search(rf"child_chunk_forwarded\s+{child} text_delta '.*' \[child seq \d+\]", rest)
    order = re.findall(r"^\s+\d+\s+\S+\s+(\w+)", rest, re.M)
    nesting = {"tool_start", "subagent_start", "subagent_end", "tool_end", "child_chunk_forwarded"}
    chunks = [tag for tag in order if tag in nesting]
    # The sub-agent call's segment: its tool_start up to the tool_end after subagent_end.
    segment = chunks[: chunks.index("subagent_end") + 2]
    assert segment[:2] == ["tool_start", "subagent_start"]
    assert segment[-2:] == ["subagent_end", "tool_end"]
    assert set(segment[2:-2]) == {"child_chunk_forwarded"}
    assert re.search(r"status\s+completed", rest)
    assert re.search(rf"{child}\s+researcher \(ephemeral\)\s+completed", rest)
    # The store it printed holds both logs, and replays to the same timeline.
    replayed = ok(run(tmp_path, "replay", "--store", url.group(1), parent))
    assert timeline_of(replayed) == timeline_of(rest)
    child_out = ok(run(tmp_path, "replay", "--store", url.group(1), child))
    assert re.search(rf"parent / root\s+{parent} / {parent}", child_out)
    assert re.search(r"status\s+completed", child_out)


def test_demo_is_deterministic_apart_from_ids_and_times(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def normalized() -> str:
        assert cli.main(["demo", "--store", "memory://"]) == 0
        out, err = capsys.readouterr()
        assert err == ""
        out = re.sub(r"demo-[0-9a-f]{8}", "demo-ID", out)
        out = re.sub(r"run-[0-9a-f]{32}", "run-ID", out)
        return re.sub(r"\d\d:\d\d:\d\d\.\d{3}", "TIME", out)

    first = normalized()
    assert "memory:// keeps nothing" in first
    assert re.search(r"status\s+completed", first)
    assert normalized() == first


# --- errors ----------------------------------------------------------------------


def _corrupt_stores(directory: Path) -> None:
    """``bad.db``: a log that does not start with session_created, and an undecodable row."""
    delta = TextDelta(
        session_id="headless", seq=1, ts=T0, agent_id="x", agent_type="x", delta="no start"
    )
    headless: list[Event] = [delta]
    write_store(directory / "bad.db", {"headless": headless})
    with sqlite3.connect(directory / "bad.db") as conn:
        conn.execute(
            "INSERT INTO helix_events (session_id, seq, type, ts, data) "
            "VALUES ('garbled', 1, 'session_created', 0, ?)",
            (b'{"type": "session_created", "seq": "one"}',),
        )
    conn.close()


ERROR_CASES: dict[str, tuple[str, int, str]] = {
    # id: (arguments, exit status, a piece of the error message)
    "unknown-option": (f"replay --bogus {SID}", 2, "unrecognized arguments"),
    "unknown-session": (f"replay --store {STORE} nobody", 1, "'nobody' not found"),
    "invalid-id": (f"replay --store {STORE} 'a/b c'", 2, "invalid session id"),
    "invalid-id-export": (f"export --store {STORE} 'x*y'", 2, "invalid session id"),
    "bad-url": (f"replay --store postgres://x/y {SID}", 2, "unknown store URL"),
    "bad-url-demo": ("demo --store bogus://", 2, "unknown store URL"),
    "bad-sqlite-url": (f"replay --store sqlite://host/x.db {SID}", 2, "bad sqlite URL"),
    "no-store-file": (f"replay --store sqlite:///none.db {SID}", 1, "none.db does not exist"),
    "missing-file": ("replay missing.jsonl", 1, "cannot read missing.jsonl"),
    "unreadable-file": ("replay ./", 1, "cannot read ./"),
    "malformed-line": ("replay malformed.jsonl", 1, "malformed.jsonl: line 3:"),
    "empty-file": ("replay empty.jsonl", 1, "holds no events"),
    "corrupt-file": ("replay headless.jsonl", 1, "corrupt log in headless.jsonl"),
    "at-beyond": (f"replay --store {STORE} {SID} --at 24", 1, "beyond the end"),
    "at-zero": (f"replay --store {STORE} {SID} --at 0", 2, "start at 1"),
    "at-not-a-number": (f"replay --store {STORE} {SID} --at x", 2, "--at"),
    "corrupt-store-log": ("replay --store sqlite:///bad.db headless", 1, "corrupt log"),
    "undecodable-row": ("export --store sqlite:///bad.db garbled", 1, "undecodable event"),
    "not-a-database": (f"replay --store sqlite:///notadb.db {SID}", 1, "not a database"),
    "unwritable-output": (f"export --store {STORE} {SID} -o no/such/dir.jsonl", 1, "cannot write"),
}


@pytest.mark.parametrize(("args", "code", "needle"), ERROR_CASES.values(), ids=ERROR_CASES.keys())
def test_bad_input_is_one_error_line(store_dir: Path, args: str, code: int, needle: str) -> None:
    lines = encode_jsonl(sample_log()).decode().splitlines()
    (store_dir / "malformed.jsonl").write_text("\n".join([*lines[:2], "{not json", *lines[3:]]))
    (store_dir / "empty.jsonl").write_text("\n")
    (store_dir / "headless.jsonl").write_text("\n".join(lines[1:]))
    (store_dir / "notadb.db").write_text("this is not sqlite\n" * 100)
    _corrupt_stores(store_dir)
    result = run(store_dir, *shlex.split(args))
    assert result.returncode == code
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert ERROR_LINE.fullmatch(result.stderr.strip())
    assert needle in result.stderr
    assert result.stdout == ""


def test_reading_commands_never_create_a_store(tmp_path: Path) -> None:
    result = run(tmp_path, "replay", SID)
    assert result.returncode == 1
    assert "sqlite:///helix.db" in result.stderr
    assert not (tmp_path / "helix.db").exists()


class _ClosingSpy:
    """Wraps ``open_store`` and records whether each store it opened was closed."""

    def __init__(self) -> None:
        self.closed: list[bool] = []

    async def __call__(self, url: str, *, read_only: bool = False) -> Any:
        from helix_agents.stores import open_store

        store = await open_store(url, read_only=read_only)
        index = len(self.closed)
        self.closed.append(False)
        close = store.close

        async def spy_close() -> None:
            self.closed[index] = True
            await close()

        store.close = spy_close  # type: ignore[method-assign]
        return store


@pytest.mark.parametrize(
    ("session_id", "code"), [(SID, 0), ("nobody", 1), ("headless", 1), ("garbled", 1)]
)
def test_the_store_is_closed_on_every_path(
    store_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    session_id: str,
    code: int,
) -> None:
    _corrupt_stores(store_dir)
    spy = _ClosingSpy()
    monkeypatch.setattr(cli, "open_store", spy)
    monkeypatch.chdir(store_dir)
    url = STORE if session_id in (SID, "nobody") else "sqlite:///bad.db"
    assert cli.main(["replay", "--store", url, session_id]) == code
    assert spy.closed == [True]
    if code:
        assert capsys.readouterr().err.startswith("helix-agents: error:")


def test_help_exits_zero(tmp_path: Path) -> None:
    out = ok(run(tmp_path, "--help"))
    assert all(command in out for command in ("replay", "export", "demo"))
    assert "HELIX_STORE_URL" in ok(run(tmp_path, "replay", "--help"))


def test_a_failing_demo_closes_its_store_and_reports_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def broken_run(*args: object, **kwargs: object) -> None:
        raise StoreError("disk on fire")

    spy = _ClosingSpy()
    monkeypatch.setattr(demo, "open_store", spy)
    monkeypatch.setattr(demo, "record_demo", broken_run)
    assert cli.main(["demo", "--store", "memory://"]) == 1
    assert spy.closed == [True]
    assert capsys.readouterr().err == "helix-agents: error: disk on fire\n"
