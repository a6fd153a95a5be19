"""``helix-agents sessions --search/--metadata/--created-*/--updated-*`` over a SQLite store."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from helix_agents.events import Completed, RunStarted, SessionCreated
from helix_agents.messages import UserMessage
from helix_agents.server.cli import main as cli
from helix_agents.stores import SqliteEventStore

T0 = 1_700_000_000.0  # 2023-11-14T22:13:20Z


def write_sessions(path: Path) -> None:
    async def write() -> None:
        async with SqliteEventStore(path) as store:
            for n, (said, team) in enumerate(
                [("fix the login bug", "red"), ("write release notes", "blue"), ("login flow", "")]
            ):
                sid = f"s-{n}"
                events = [
                    SessionCreated(
                        session_id=sid,
                        seq=1,
                        ts=T0 + 3600 * n,
                        agent_type="lead",
                        run_id="run-1",
                        messages=[UserMessage(content=said)],
                        metadata={"team": team} if team else {},
                    ),
                    RunStarted(session_id=sid, seq=2, ts=T0 + 3600 * n, run_id="run-1"),
                    Completed(session_id=sid, seq=3, ts=T0 + 3600 * n + 5, output=f"done {n}"),
                ]
                await store.append(sid, events, expected_seq=0)

    anyio.run(write)


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    write_sessions(tmp_path / "s.db")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    return "sqlite:///s.db"


def listed(store: str, capsys: pytest.CaptureFixture[str], *args: str) -> list[str]:
    assert cli.main(["sessions", "--store", store, "--json", *args]) == 0
    return [s["sessionId"] for s in json.loads(capsys.readouterr().out)["sessions"]]


def test_sessions_search_metadata_and_time_flags(
    store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert listed(store, capsys, "--search", "LOGIN") == ["s-2", "s-0"]
    assert listed(store, capsys, "--search", "login bug") == ["s-0"]
    assert listed(store, capsys, "--search", "done 1") == ["s-1"]  # the output
    assert listed(store, capsys, "--metadata", "team=blue") == ["s-1"]
    assert listed(store, capsys, "--metadata", "team=red", "--search", "login") == ["s-0"]
    assert listed(store, capsys, "--created-after", "2023-11-14T23:13:20Z") == ["s-2", "s-1"]
    assert listed(store, capsys, "--created-before", str(T0 + 3600)) == ["s-0"]
    assert listed(store, capsys, "--updated-after", "2023-11-15 00:13:25") == ["s-2"]
    assert listed(store, capsys, "--search", "login", "--limit", "1") == ["s-2"]
    assert cli.main(["sessions", "--store", store, "--search", "nothing-like-it"]) == 0
    assert capsys.readouterr().out == "no sessions\n"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--metadata", "team"], "--metadata takes KEY=VALUE"),
        (["--search", "x" * 300], "at most 256"),
        (["--created-after", "last tuesday"], "--created-after must be seconds since the epoch"),
        (["--updated-after", "1e99"], "--updated-after is out of range"),
    ],
)
def test_sessions_bad_search_is_one_line(
    store: str, capsys: pytest.CaptureFixture[str], args: list[str], needle: str
) -> None:
    assert cli.main(["sessions", "--store", store, *args]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert len(err.strip().splitlines()) == 1
