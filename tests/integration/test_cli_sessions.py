"""``helix-agents sessions``, ``--version`` and the help: every flag says what it defaults to."""

from __future__ import annotations

import argparse
import json
from importlib.metadata import version
from pathlib import Path

import anyio
import pytest

from helix_agents.events import Completed, RunStarted, SessionCreated
from helix_agents.messages import UserMessage
from helix_agents.server.cli import main as cli
from helix_agents.stores import SqliteEventStore


def write_sessions(path: Path) -> None:
    async def write() -> None:
        async with SqliteEventStore(path) as store:
            for n, (agent, parent) in enumerate(
                [("lead", None), ("researcher", "lead-0"), ("lead", None)]
            ):
                sid = f"lead-{n}" if parent is None else f"{parent}-sub-call_{n}"
                ts = 1_700_000_000.0 + n
                events = [
                    SessionCreated(
                        session_id=sid,
                        seq=1,
                        ts=ts,
                        agent_type=agent,
                        run_id="run-1",
                        messages=[UserMessage(content="hi")],
                        parent_session_id=parent,
                        root_session_id=parent or sid,
                    ),
                    RunStarted(session_id=sid, seq=2, ts=ts, run_id="run-1"),
                ]
                if n == 0:
                    events.append(Completed(session_id=sid, seq=3, ts=ts + 5, output="ok"))
                await store.append(sid, events, expected_seq=0)

    anyio.run(write)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    write_sessions(tmp_path / "s.db")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    return "sqlite:///s.db"


def test_sessions_prints_a_table_newest_first(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["sessions", "--store", store]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["CREATED", "(UTC)", "STATUS", "AGENT", "STEPS", "SESSION"]
    rows = [line.split() for line in lines[1:]]
    assert [row[5] for row in rows] == ["lead-2", "lead-0-sub-call_1", "lead-0"]
    assert rows[2][:4] == ["2023-11-14", "22:13:20", "completed", "lead"]
    assert lines[2].endswith("(child of lead-0)")


def test_sessions_filters_pages_and_prints_json(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["sessions", "--store", store, "--top-level", "--limit", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[5] == "lead-2"
    assert lines[-1].startswith("more: --cursor ")
    cursor = lines[-1].split()[-1]
    assert (
        cli.main(["sessions", "--store", store, "--top-level", "--cursor", cursor, "--json"]) == 0
    )
    page = json.loads(capsys.readouterr().out)
    assert [s["sessionId"] for s in page["sessions"]] == ["lead-0"]
    assert page["nextCursor"] is None
    assert cli.main(["sessions", "--store", store, "--status", "running", "--agent", "lead"]) == 0
    assert "lead-2" in capsys.readouterr().out
    assert cli.main(["sessions", "--store", store, "--agent", "nobody"]) == 0
    assert capsys.readouterr().out == "no sessions\n"


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--status", "done"], 2, "invalid choice: 'done'"),
        (["--limit", "0"], 2, "must be 1 to 500"),
        (["--cursor", "garbage"], 2, "invalid cursor"),
        (["--store", "sqlite:///missing.db"], 1, "does not exist"),
    ],
)
def test_sessions_bad_input_is_one_line(
    store: str, capsys: pytest.CaptureFixture[str], args: list[str], code: int, needle: str
) -> None:
    full = ["sessions", "--store", store, *args] if "--store" not in args else ["sessions", *args]
    assert cli.main(full) == code
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith("helix-agents: error: ")
    assert needle in captured.err
    assert len(captured.err.splitlines()) == 1
    assert not Path("missing.db").exists()


def test_version_prints_the_installed_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"helix-agents {version('helix-agents')}\n"


def _flags(parser: argparse.ArgumentParser, path: str = "") -> list[tuple[str, argparse.Action]]:
    found: list[tuple[str, argparse.Action]] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.extend(_flags(sub, f"{path} {name}".strip()))
        elif action.option_strings:
            found.append((path, action))
    return found


def test_every_flag_has_help_saying_its_default() -> None:
    flags = _flags(cli._build_parser())
    commands = {path for path, _ in flags}
    assert {"serve", "host", "replay", "export", "sessions", "demo"} <= commands
    missing = []
    for path, action in flags:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction):
            continue
        switch = isinstance(action, argparse._StoreTrueAction)
        text = action.help or ""
        if not text or not (switch or action.required or "default" in text):
            missing.append(f"{path} {'/'.join(action.option_strings)}: {text!r}")
    assert missing == []


def test_serve_help_shows_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for shown in (
        "(default: 127.0.0.1)",
        "(default: 4000)",
        "(default: info)",
        "$HELIX_TOKEN",
        "CORS off",
    ):
        assert shown in text


def test_token_and_token_file_are_both_accepted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from helix_agents.server.cli.serve import serve_tokens

    (tmp_path / "tokens").write_text("alpha\n\nbeta\n")
    parser = cli._build_parser()
    both = parser.parse_args(
        ["serve", "m:a", "--token", "gamma", "--token-file", str(tmp_path / "tokens")]
    )
    assert serve_tokens(both) == ["gamma", "alpha", "beta"]
    assert serve_tokens(parser.parse_args(["serve", "m:a"])) is None
    monkeypatch.setenv("HELIX_TOKEN", "from-env")
    assert serve_tokens(cli._build_parser().parse_args(["serve", "m:a"])) == ["from-env"]
    monkeypatch.setenv("HELIX_TOKEN", "")
    assert serve_tokens(cli._build_parser().parse_args(["serve", "m:a"])) is None
