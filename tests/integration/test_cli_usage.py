"""The command line's front door: a bare command, a mistyped one, the token form of the address."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers import listen_port

from helix_agents.server.cli.main import main

ROOT = Path(__file__).parents[2]
SERVE = [sys.executable, "-m", "helix_agents.server", "serve", "tests.integration.chat_app:agents"]


def test_a_bare_command_prints_the_usage_and_the_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 2
    out = capsys.readouterr().out
    assert out.startswith("usage: helix-agents")
    for command in ("demo", "serve", "chat", "replay", "sessions"):
        assert f"    {command}" in out


@pytest.mark.parametrize(
    ("typed", "hint"),
    [("serv", "did you mean 'serve'?"), ("chta", "did you mean 'chat'?"), ("replya", "'replay'?")],
)
def test_a_mistyped_command_suggests_the_nearest(
    capsys: pytest.CaptureFixture[str], typed: str, hint: str
) -> None:
    assert main([typed, "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"helix-agents: error: unknown command {typed!r}; did you mean")
    assert hint in err
    assert err.count("\n") == 1


def test_an_unknown_command_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["zzz"]) == 2
    err = capsys.readouterr().err
    assert "unknown command 'zzz' (commands: replay, export" in err
    assert "did you mean" not in err


@pytest.mark.slow
def test_serve_at_a_terminal_prints_the_token_form_of_the_inspector(tmp_path: Path) -> None:
    port = listen_port()
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*SERVE, "--port", str(port), "--store", "memory://", "--token", "s3cret/+"],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"inspector at" not in seen or not seen.endswith(b"\n"):
            left = deadline - time.monotonic()
            assert left > 0, seen.decode(errors="replace")
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                seen += os.read(master, 4096)
        text = seen.decode()
        assert f"inspector at http://127.0.0.1:{port}/ui#token=s3cret%2F%2B" in text
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=30)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            os.close(master)
