"""The README's front page: its snippets run as written, its lists are whole.

The real-model snippet runs against a fake OpenAI-compatible
server on uvicorn (loopback), reached through ``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from servers import serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.routing import Route

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
README = ROOT / "README.md"
QUICKSTART = (
    "python3 -m pip install . && python3 -m helix_agents.server demo\n"
    "python3 -m pip install -e '.[dev]' --config-settings editable_mode=strict "
    "&& python3 -m pytest\n"
)


def block(heading: str) -> str:
    """The first fenced block under ``heading``."""
    section = README.read_text(encoding="utf-8").split(f"\n## {heading}\n", 1)[1]
    match = re.search(r"```(?:python)?\n(.*?)```", section, re.DOTALL)
    assert match is not None, heading
    return match.group(1)


def fake_openai(requests: list[dict[str, Any]]) -> Starlette:
    """First a word_count call, then a text answer quoting the tool's result."""

    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        requests.append(body)
        results = [m["content"] for m in body["messages"] if m["role"] == "tool"]
        if results:
            delta: dict[str, Any] = {"content": f"It has {results[0]} words."}
        else:
            call = {"index": 0, "id": "c1", "type": "function"}
            call["function"] = {
                "name": "word_count",
                "arguments": json.dumps({"text": "logs make recovery a replay"}),
            }
            delta = {"tool_calls": [call]}

        async def events() -> AsyncIterator[bytes]:
            yield b"data: " + json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode()
            yield b"\n\ndata: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


def test_the_quickstart_commands_are_kept_exactly() -> None:
    assert block("Quickstart") == QUICKSTART


async def test_the_real_model_snippet_runs_as_written(tmp_path: Path) -> None:
    snippet = block("A real model in ten lines")
    assert len(snippet.strip().splitlines()) <= 14
    (tmp_path / "real.py").write_text(snippet)
    requests: list[dict[str, Any]] = []
    with anyio.fail_after(60):
        async with serve(fake_openai(requests)) as url:
            env = {**os.environ, "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-test"}
            done = await anyio.run_process(
                [sys.executable, "real.py"], cwd=tmp_path, env=env, check=False
            )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout.decode() == "It has 5 words.\n"
    first = requests[0]
    assert first["model"] == "gpt-4o-mini"
    [spec] = first["tools"]
    assert spec["function"]["name"] == "word_count"
    assert spec["function"]["description"] == "Count the words of a text."
    assert spec["function"]["parameters"]["required"] == ["text"]


async def test_the_real_model_snippet_without_a_key_names_the_variable(tmp_path: Path) -> None:
    (tmp_path / "real.py").write_text(block("A real model in ten lines"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "real.py"], cwd=tmp_path, env=env, check=False
        )
    assert done.returncode == 1
    assert "set OPENAI_API_KEY" in done.stderr.decode().splitlines()[-1]


async def test_the_using_it_snippet_names_the_agents(tmp_path: Path) -> None:
    (tmp_path / "snippet.py").write_text(block("Using it"))
    with anyio.fail_after(60):
        done = await anyio.run_process([sys.executable, "snippet.py"], cwd=tmp_path)
    out = done.stdout.decode().splitlines()
    assert out[-1] == "completed answer='Because a log replays.'"
    assert {line.split()[1] for line in out[:-1]} == {"lead", "researcher"}


def test_every_example_is_listed_and_the_specs_are_linked() -> None:
    text = README.read_text(encoding="utf-8")
    for path in sorted((ROOT / "examples").glob("*.py")):
        assert f"(examples/{path.name})" in text, path.name
    for spec in sorted((ROOT / "specs").glob("*.md")):
        assert f"(specs/{spec.name})" in text, spec.name
    assert "\n## Contributing\n" in text
    assert "helix-agents chat" in text
