"""``host``/``serve`` flags of the fleet: ``--replicas`` and ``--token-file``; bad values refused.

Each refusal is one line on stderr and exit status 2, before anything is
started. ``--replicas 2`` on a single node: JetStream cannot place two copies,
so the host stops with one line (exit 1) instead of running unreplicated.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nats_server import NatsServer

from helix_agents.server.cli import main as cli

pytestmark = [pytest.mark.nats]

TARGET = "tests.integration.remote_app:agents"


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 2) -> str:
    assert cli.main(argv) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize("value", ["0", "6", "three", "-1"])
def test_replicas_out_of_range_are_refused(capsys: pytest.CaptureFixture[str], value: str) -> None:
    for argv in (
        ["host", TARGET, "--nats", "nats://127.0.0.1:1", "--replicas", value],
        ["serve", "--nats", "nats://127.0.0.1:1", "--replicas", value],
    ):
        err = _refused(capsys, argv)
        assert "--replicas: must be a whole number from 1 to 5" in err


def test_replicas_without_nats_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = _refused(capsys, ["serve", TARGET, "--replicas", "3"])
    assert "--replicas is for --nats" in err


def test_a_missing_or_empty_token_file_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    err = _refused(capsys, ["serve", TARGET, "--token-file", str(tmp_path / "none")])
    assert "cannot read the token file" in err
    (tmp_path / "blank").write_text("\n  \n")
    err = _refused(
        capsys, ["serve", "--nats", "nats://x:1", "--token-file", str(tmp_path / "blank")]
    )
    assert "holds no token" in err


@pytest.mark.slow
def test_a_host_asking_for_more_replicas_than_the_servers_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with NatsServer.start(tmp_path / "nats") as single:  # no stream on it yet
        err = _refused(capsys, ["host", TARGET, "--nats", single.url, "--replicas", "2"], code=1)
    assert "replicas" in err.lower()
