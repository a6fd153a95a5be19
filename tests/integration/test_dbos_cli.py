"""``worker``/``serve`` with ``--dbos``: what they refuse, in one line, before anything runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.test_cli_serve_errors import GOOD_MODULE, one_error_line, run

pytestmark = pytest.mark.slow

REFUSED = {
    # id: (arguments after the target, a piece of the one error line)
    "no-engine": ((), "worker takes --temporal ADDRESS or --dbos URL"),
    "both-engines": (("--dbos", "sqlite:///d.sqlite", "--temporal", "h:1"), "one of them"),
    "bad-url": (("--dbos", "mysql://x/y"), "--dbos takes sqlite:///FILE or postgresql://"),
    "namespace": (("--dbos", "sqlite:///d.sqlite", "--namespace", "n"), "--namespace"),
    "beat-on-sqlite": (
        ("--dbos", "sqlite:///d.sqlite", "--heartbeat-timeout", "3"),
        "--heartbeat-timeout with --dbos is for Postgres",
    ),
    "beat-zero": (("--dbos", "postgresql://x/y", "--heartbeat-timeout", "0"), "above 0"),
}


@pytest.mark.parametrize(("args", "needle"), REFUSED.values(), ids=REFUSED.keys())
def test_worker_refuses_what_dbos_does_not_take(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "good.py").write_text(GOOD_MODULE)
    error = one_error_line(run(tmp_path, "worker", "good:agents", *args), 2)
    assert needle in error
    assert not (tmp_path / "d.sqlite").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--dbos", "sqlite:///d.sqlite", "--temporal", "h:1"), "one of --dbos, --temporal"),
        (
            ("--dbos", "sqlite:///d.sqlite", "--heartbeat-timeout", "3"),
            "--heartbeat-timeout with --dbos is for Postgres",
        ),
        (("--heartbeat-timeout", "3"), "--heartbeat-timeout is for --temporal or --dbos"),
        (("--temporal", "h:1", "--heartbeat-timeout", "-1"), "above 0"),
    ],
)
def test_serve_refuses_what_dbos_does_not_take(
    tmp_path: Path, args: tuple[str, ...], needle: str
) -> None:
    (tmp_path / "good.py").write_text(GOOD_MODULE)
    error = one_error_line(run(tmp_path, "serve", "good:agents", *args), 2)
    assert needle in error
    assert not (tmp_path / "d.sqlite").exists()
