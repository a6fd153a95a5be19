"""``check`` and ``sessions`` read a store they cannot write: opened read-only, nothing written.

The database and its folder are made immutable (``chattr +i``: even root cannot
write them, nor create the ``-wal``/``-shm`` files beside the database).
Before, both failed ("attempt to write a readonly database"): opening the
store set the journal mode and created its schema.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cli_sessions import write_sessions

from helix_agents.server.cli import main as cli

pytestmark = pytest.mark.skipif(shutil.which("chattr") is None, reason="needs chattr")


def _chattr(flag: str, *paths: Path) -> bool:
    done = subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True)
    return done.returncode == 0


@pytest.fixture
def frozen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    folder = tmp_path / "frozen"
    folder.mkdir()
    write_sessions(folder / "s.db")
    assert sorted(p.name for p in folder.iterdir()) == ["s.db", "s.db-hwm"]  # closed cleanly
    if not _chattr("+i", folder / "s.db", folder / "s.db-hwm", folder):
        pytest.skip("chattr +i is not permitted here")
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    try:
        yield f"sqlite:///{folder / 's.db'}"
    finally:
        _chattr("-i", folder, folder / "s.db", folder / "s.db-hwm")


def test_check_reads_a_store_it_cannot_write(
    frozen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["check", "--store", frozen]) == 0, capsys.readouterr()
    out = capsys.readouterr()
    assert "readonly" not in out.err


def test_sessions_lists_a_store_it_cannot_write(
    frozen: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["sessions", "--store", frozen]) == 0, capsys.readouterr()
    rows = capsys.readouterr().out.splitlines()[1:]
    assert len(rows) == 3
