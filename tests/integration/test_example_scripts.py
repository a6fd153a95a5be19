"""The README's "Using it" snippet and the scripts in ``examples/`` run as written.

Each runs as a user would run it (``python FILE``, in a scratch directory)
and its output is checked; the README snippet also runs in this process with
``open_store`` spied on, to see that it closes the store it opened.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from nats_server import NatsServer
from servers import listen_port, serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

import helix_agents.stores

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
EXAMPLES = ROOT / "examples"
TIMEOUT = 60


def run(
    cwd: Path, *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``; it must succeed without a traceback."""
    result = subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    return result


# --- the README ------------------------------------------------------------------


def readme_snippet() -> str:
    """The Python block under "## Using it" in README.md."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using it", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match is not None
    return match.group(1)


def test_the_readme_snippet_runs_as_written(tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(readme_snippet())
    out = run(tmp_path, "snippet.py").stdout.splitlines()
    assert out[-1] == "completed answer='Because a log replays.'"
    agents = {line.split()[1] for line in out[:-1]}
    assert len(agents) == 2  # the lead's session and its child's, nested in one stream
    assert any(line.endswith(" TextDelta") for line in out)
    assert (tmp_path / "helix.db").exists()


def test_the_readme_snippet_closes_its_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    opened: list[Any] = []
    closed: list[Any] = []
    real_open = helix_agents.stores.open_store

    async def spy(url: str) -> Any:
        store = await real_open(url)
        opened.append(store)
        close = store.close

        async def spy_close() -> None:
            closed.append(store)
            await close()

        store.close = spy_close
        return store

    monkeypatch.setattr(helix_agents.stores, "open_store", spy)
    monkeypatch.chdir(tmp_path)
    exec(compile(readme_snippet(), "README.md", "exec"), {"__name__": "__main__"})
    assert len(opened) == 1
    assert closed == opened
    assert "completed answer=" in capsys.readouterr().out


# --- examples ----------------------------------------------------------------------


def test_local_tree_streams_three_levels_and_returns_the_brief(tmp_path: Path) -> None:
    out = run(tmp_path, str(EXAMPLES / "local_tree.py"), "--store", "sqlite:///tree.db").stdout
    assert out.splitlines()[-1] == "brief: Event logs make recovery a replay. (confidence 0.9)"
    assert re.search(r"fact_checker +TextDelta 'Checked against the '", out)  # the grandchild
    listed = run(
        tmp_path, "-m", "helix_agents.server", "sessions", "--store", "sqlite:///tree.db"
    ).stdout
    assert [line.split()[3] for line in listed.splitlines()[1:]] == [
        "fact_checker",
        "researcher",
        "lead",
    ]


def test_remote_child_over_http_in_one_process(tmp_path: Path) -> None:
    out = run(tmp_path, str(EXAMPLES / "remote_child_http.py")).stdout
    assert "answer: Because replay rebuilds state." in out
    assert re.search(
        r"^[1-9]\d* chunks of the remote researcher reached the lead's log$", out, re.M
    )


async def test_remote_child_against_a_served_process(tmp_path: Path) -> None:
    port = listen_port()
    log = tmp_path / "serve.log"
    serve_args = ["serve", "examples.remote_child_http:served", "--port", str(port)]
    with log.open("ab") as output:
        server = await anyio.open_process(
            [sys.executable, "-m", "helix_agents.server", *serve_args, "--store", "memory://"],
            cwd=ROOT,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    try:
        with anyio.fail_after(TIMEOUT):
            while "Uvicorn running on" not in log.read_text():  # the port is bound
                assert server.returncode is None, log.read_text()
                await anyio.sleep(0.05)  # a subprocess's output is the only signal
            script = EXAMPLES / "remote_child_http.py"
            url = f"http://127.0.0.1:{port}"
            done = await anyio.run_process(
                [sys.executable, str(script), "--url", url], cwd=tmp_path
            )
    finally:
        server.terminate()
        with anyio.fail_after(TIMEOUT):
            await server.wait()
    assert "answer: Because replay rebuilds state." in done.stdout.decode()
    assert "POST /start" in log.read_text()


@pytest.mark.nats
def test_nats_fleet_with_a_host_in_the_script(tmp_path: Path) -> None:
    with NatsServer.start(tmp_path / "nats") as nats:
        out = run(tmp_path, str(EXAMPLES / "nats_fleet.py"), "--nats", nats.url).stdout
    assert "answer: Leases: a dead host's session moves." in out
    assert re.search(r"the researcher's session lead-\w+-remote-call_0_0: \d+ events", out)


@pytest.mark.nats
async def test_nats_fleet_against_a_host_process(tmp_path: Path) -> None:
    log = tmp_path / "host.log"
    with NatsServer.start(tmp_path / "nats") as nats:
        command = ["host", "examples.nats_fleet:hosted", "--nats", nats.url]
        with log.open("ab") as output:
            host = await anyio.open_process(
                [sys.executable, "-m", "helix_agents.server", *command],
                cwd=ROOT,
                stdout=output,
                stderr=subprocess.STDOUT,
            )
        try:
            with anyio.fail_after(TIMEOUT):
                while "helix-agents: hosting researcher" not in log.read_text():
                    assert host.returncode is None, log.read_text()
                    await anyio.sleep(0.05)  # a subprocess's output is the only signal
                script = [sys.executable, str(EXAMPLES / "nats_fleet.py"), "--nats", nats.url]
                done = await anyio.run_process([*script, "--no-host"], cwd=tmp_path)
        finally:
            host.terminate()
            with anyio.fail_after(TIMEOUT):
                await host.wait()
    assert "answer: Leases: a dead host's session moves." in done.stdout.decode()


# --- an OpenAI-compatible endpoint, faked on loopback --------------------------------


def _sse(*chunks: dict[str, Any]) -> StreamingResponse:
    async def body() -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b"data: [DONE]\n\n"

    return StreamingResponse(body(), media_type="text/event-stream")


def _tool_call(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    call = {"index": 0, "id": call_id, "type": "function"}
    call["function"] = {"name": name, "arguments": json.dumps(arguments)}
    delta = {"role": "assistant", "tool_calls": [call]}
    return {"id": "c", "model": "fake", "choices": [{"index": 0, "delta": delta}]}


async def test_openai_compatible_against_a_local_fake(tmp_path: Path) -> None:
    requests: list[dict[str, Any]] = []

    async def chat(request: Request) -> StreamingResponse:
        requests.append(await request.json())
        if len(requests) == 1:
            return _sse(_tool_call("call_a", "word_count", {"text": "one two three"}))
        finish = {"summary": "Logs make recovery a replay.", "words": 11}
        return _sse(_tool_call("call_b", "__finish__", finish))

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    with anyio.fail_after(TIMEOUT):
        async with serve(app) as url:
            script = EXAMPLES / "openai_compatible.py"
            done = await anyio.run_process(
                [sys.executable, str(script), "--base-url", f"{url}/v1", "--model", "fake-1"],
                cwd=tmp_path,
                env={k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"},
            )
    out = done.stdout.decode()
    assert "summary: Logs make recovery a replay." in out
    assert "words: 11" in out
    first, second = requests
    assert first["model"] == "fake-1"
    assert {tool["function"]["name"] for tool in first["tools"]} == {"word_count", "__finish__"}
    [result] = [m for m in second["messages"] if m["role"] == "tool"]
    assert (result["tool_call_id"], result["content"]) == ("call_a", "3")  # the tool really ran


# --- human in the loop ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("typed", "outcome"),
    [
        ("approve", "approved; outcome: sent to ops@example.com"),
        ("deny", "denied; outcome: denied by a person: not before the change review"),
    ],
)
def test_human_in_the_loop_asks_at_the_terminal(tmp_path: Path, typed: str, outcome: str) -> None:
    out = run(tmp_path, str(EXAMPLES / "human_in_the_loop.py"), stdin=f"{typed}\n").stdout
    lines = out.splitlines()
    assert lines[0] == "status: paused"
    assert lines[1].startswith("waiting: approval for send_email {'to': 'ops@example.com'")
    assert lines[2] == "  in hitl-example > hitl-example-sub-call_0_0"
    assert lines[3].endswith(outcome)
