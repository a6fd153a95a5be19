"""Inspections read a store they cannot write: opened read-only, nothing written, nothing made.

First the database and its folder are made immutable (``chattr +i``: even root
cannot write them, nor create the ``-wal``/``-shm`` files beside the database).
Before, ``check`` and ``sessions`` failed ("attempt to write a readonly
database"): opening the store set the journal mode and created its schema.
Then the files, or the files and their folder, are chmod'ed read-only, which
root ignores: ``check``, ``sessions``, ``replay`` and ``export`` leave the
folder byte for byte as they found it. Before, each made ``-wal`` and ``-shm``
files beside the database (SQLite's ``mode=ro`` on a WAL database).
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


# --- read-only by permissions (chmod), as root or not: nothing written, nothing created -----

COMMANDS = [
    ["check"],
    ["sessions"],
    ["replay", "lead-0"],
    ["export", "lead-0"],
]


def _listing(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Each file of ``folder``: its mode and its bytes."""
    return {
        path.name: (path.stat().st_mode, path.read_bytes()) for path in sorted(folder.iterdir())
    }


@pytest.fixture(params=["files", "folder"])
def read_only(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[str, Path]]:
    """A store whose files (and, for ``folder``, their folder) are chmod'ed read-only."""
    folder = tmp_path / "ro"
    folder.mkdir()
    write_sessions(folder / "s.db")
    files = sorted(folder.iterdir())
    assert [path.name for path in files] == ["s.db", "s.db-hwm"]  # closed cleanly
    for path in files:
        path.chmod(0o444)
    if request.param == "folder":
        folder.chmod(0o555)
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    try:
        yield f"sqlite:///{folder / 's.db'}", folder
    finally:
        folder.chmod(0o755)
        for path in files:
            path.chmod(0o644)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda command: command[0])
def test_an_inspection_of_a_read_only_store_leaves_its_folder_as_it_found_it(
    read_only: tuple[str, Path], command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    url, folder = read_only
    before = _listing(folder)
    assert cli.main([*command, "--store", url]) == 0, capsys.readouterr()
    out = capsys.readouterr()
    assert "readonly" not in out.err
    if command[0] == "sessions":
        assert len(out.out.splitlines()[1:]) == 3
    elif command[0] == "export":
        assert len(out.out.splitlines()) == 3  # lead-0's three events
    elif command[0] == "replay":
        assert "lead-0" in out.out
    # No -wal, -shm or -hwm made, nothing written: byte for byte what was there.
    assert _listing(folder) == before
