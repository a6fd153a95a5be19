"""``check`` finds a session whose last events were deleted from a SQLite file.

The chain covers every event from the first, so a cut in the middle is found;
a cut at the end left a shorter log whose chain still held, and ``check``
exited 0. Each session's row in ``helix_sessions`` now keeps the last seq
committed to it: a log ending before it lost its tail.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from test_cli_sessions import write_sessions

from helix_agents.server.cli import main as cli


def test_check_names_a_session_whose_last_events_were_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    write_sessions(db)
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    url = f"sqlite:///{db}"
    assert cli.main(["check", "--store", url]) == 0, capsys.readouterr()
    capsys.readouterr()
    with sqlite3.connect(db) as conn:  # lead-0 holds seqs 1-3: its last one goes
        assert conn.execute("DELETE FROM helix_events WHERE session_id = 'lead-0' AND seq = 3")
    assert cli.main(["check", "--store", url]) == 3
    out = capsys.readouterr()
    text = out.out + out.err
    assert "lead-0" in text
    assert "ends at seq 2 but seq 3 was committed" in text


def test_check_names_a_session_whose_every_event_was_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "s.db"
    write_sessions(db)
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM helix_events WHERE session_id = 'lead-2'")
    assert cli.main(["check", "--store", f"sqlite:///{db}"]) == 3
    out = capsys.readouterr()
    assert "ends at seq 0 but seq 2 was committed" in out.out + out.err
