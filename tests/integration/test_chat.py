"""``helix-agents chat MODULE:ATTR AGENT``: one session, turn after turn, streamed live.

Run as a real subprocess (stdin piped) against a scripted agent whose answer
shows every message it remembers, and in-process against an agent on
``OpenAIChatLLM`` talking to a fake OpenAI-compatible server on uvicorn.
"""

from __future__ import annotations

import json
import os
import re
import select
import subprocess
import sys
import time
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

from helix_agents import define_agent
from helix_agents.events import RunStarted
from helix_agents.log import project_state
from helix_agents.models import OpenAIChatLLM
from helix_agents.server.cli.chat import ChatError, run_chat
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
APP = "tests.integration.chat_app:agents"
CHAT = [sys.executable, "-m", "helix_agents.server", "chat"]
ERROR_LINE = re.compile(r"helix-agents: error: \S.*")


def chat(*args: str, stdin: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", "chat", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
    )


async def runs_of(db: Path, session_id: str) -> list[str]:
    async with SqliteEventStore(db) as store:
        return [e.mode for e in await store.read(session_id) if isinstance(e, RunStarted)]


def test_each_line_is_a_turn_of_one_session_with_its_memory(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    store = f"--store=sqlite:///{db}"
    done = chat(APP, "chatter", store, "--session", "talk-1", stdin="hello\n\nand then?\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    # One line per reply: the streamed text, not also an output line or an "= ..." echo.
    replies = [line for line in out.splitlines() if "hello" in line]
    assert replies == ["you> chatter> hello", "you> you> chatter> hello | and then?"]
    assert anyio.run(runs_of, db, "talk-1") == ["start", "continue"]
    # Later, the same session goes on where it stopped.
    again = chat(APP, "chatter", store, "--session", "talk-1", stdin="third\n/exit\n")
    assert again.returncode == 0, again.stderr
    assert "chatter> hello | and then? | third\n" in again.stdout
    assert anyio.run(runs_of, db, "talk-1") == ["start", "continue", "continue"]


def test_a_failed_turn_is_reported_and_the_chat_goes_on(tmp_path: Path) -> None:
    store = f"--store=sqlite:///{tmp_path / 'chat.db'}"
    done = chat(APP, "failing", store, "--session", "fails-1", stdin="hi\nmore\n")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    failures = [line for line in done.stdout.splitlines() if "(the turn failed:" in line]
    assert len(failures) == 2, done.stdout  # both turns were taken, each in one line
    assert "model down" in failures[0]
    assert "(the conversation goes on in a new session: chat-" in done.stdout
    assert anyio.run(runs_of, tmp_path / "chat.db", "fails-1") == ["start"]


def test_one_agent_needs_no_agent_name_several_do(tmp_path: Path) -> None:
    store = f"--store=sqlite:///{tmp_path / 'chat.db'}"
    done = chat("tests.integration.chat_app:chatter", store, stdin="solo\n")
    assert done.returncode == 0, done.stderr
    assert "chatter> solo\n" in done.stdout
    several = chat(APP, store, stdin="hi\n")
    assert several.returncode == 1
    assert ERROR_LINE.fullmatch(several.stderr.strip()), several.stderr
    assert "name one: chatter, failing" in several.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        ((APP, "nobody"), 1, "no agent 'nobody'"),
        ((), 2, "chat needs MODULE:ATTR, or --model NAME"),
        (("--model", "gpt-4o"), 2, "expected PROVIDER:MODEL"),
        ((APP, "chatter", "--session", "bad id"), 2, "invalid session id"),
        (("tests.integration.chat_app:missing", "chatter"), 2, "has no attribute"),
    ],
)
def test_bad_chat_arguments_are_one_error_line(
    tmp_path: Path, args: tuple[str, ...], code: int, needle: str
) -> None:
    store = f"--store=sqlite:///{tmp_path / 'chat.db'}"
    done = chat(*args, store, stdin="hi\n")
    assert done.returncode == code, done.stderr
    assert ERROR_LINE.fullmatch(done.stderr.strip()), done.stderr
    assert needle in done.stderr


def fake_openai(seen: list[list[dict[str, Any]]]) -> Starlette:
    """Streams "you said N things: ..." from the user messages of each request."""

    async def completions(request: Request) -> StreamingResponse:
        body = await request.json()
        seen.append(body["messages"])
        said = [m["content"] for m in body["messages"] if m["role"] == "user"]
        text = f"you said {len(said)} things: {', '.join(said)}"

        async def events() -> AsyncIterator[bytes]:
            for word in text.split(" "):
                delta = {"choices": [{"index": 0, "delta": {"content": word + " "}}]}
                yield b"data: " + json.dumps(delta).encode() + b"\n\n"
            yield b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


async def test_chat_with_an_openai_compatible_model(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []
    lines = iter(["first\n", "second\n", None])
    written: list[str] = []

    async def ask(prompt: str) -> str | None:
        written.append(prompt)
        return next(lines)

    db = tmp_path / "chat.db"
    with anyio.fail_after(30):
        async with serve(fake_openai(seen)) as url:
            agent = define_agent(
                "assistant", llm=OpenAIChatLLM("fake-model", base_url=f"{url}/v1", api_key="k")
            )
            session_id = await run_chat(
                [agent],
                "assistant",
                store_url=f"sqlite:///{db}",
                session_id="oa-1",
                ask=ask,
                write=written.append,
            )
    text = "".join(written)
    assert text.count("assistant> you said 1 things: first \n") == 1
    assert text.count("assistant> you said 2 things: first, second \n") == 1
    # The second request carried the whole conversation: user, assistant, user.
    assert [m["role"] for m in seen[1] if m["role"] != "system"] == ["user", "assistant", "user"]
    async with SqliteEventStore(db) as store:
        state = project_state(await store.read(session_id))
    assert state.status == "completed"
    assert state.output == "you said 2 things: first, second "


async def test_an_unknown_agent_is_a_chat_error(tmp_path: Path) -> None:
    async def ask(prompt: str) -> str | None:
        raise AssertionError("nothing is asked")

    with pytest.raises(ChatError, match="no agent 'ghost'"):
        await run_chat(
            [], "ghost", store_url="memory://", session_id=None, ask=ask, write=lambda _: None
        )


async def test_chat_model_alone_talks_to_a_real_model_server(tmp_path: Path) -> None:
    seen: list[list[dict[str, Any]]] = []
    with anyio.fail_after(60):
        async with serve(fake_openai(seen)) as url:
            done = await anyio.run_process(
                [
                    *CHAT,
                    "--model",
                    "openai-compatible:fake-model",
                    f"--store=sqlite:///{tmp_path}/c.db",
                ],
                input=b"hello\nagain\n",
                cwd=ROOT,
                check=False,
                env={**os.environ, "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": ""},
            )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    assert "assistant> you said 1 things: hello \n" in out
    assert "assistant> you said 2 things: hello, again \n" in out
    assert seen[0][0]["role"] == "system"


def test_chat_model_without_a_key_is_one_line_naming_the_variable() -> None:
    env = {key: value for key, value in os.environ.items() if key != "OPENAI_API_KEY"}
    done = subprocess.run(
        [sys.executable, "-m", "helix_agents.server", "chat", "--model", "openai:gpt-4o-mini"],
        input="hi\n",
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
        env=env,
    )
    assert done.returncode == 2
    assert ERROR_LINE.fullmatch(done.stderr.strip()), done.stderr
    assert "set OPENAI_API_KEY" in done.stderr


def test_up_arrow_brings_back_the_last_line_at_a_terminal(tmp_path: Path) -> None:
    master, slave = os.openpty()
    process = subprocess.Popen(
        [*CHAT, APP, "chatter", f"--store=sqlite:///{tmp_path}/c.db"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "TERM": "dumb"},
    )
    os.close(slave)
    seen = b""

    def until(needle: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 30
        while needle not in seen:
            left = deadline - time.monotonic()
            assert left > 0, seen.decode(errors="replace")
            ready, _, _ = select.select([master], [], [], left)
            if ready:
                seen += os.read(master, 4096)

    try:
        until(b"you> ")
        os.write(master, b"first\r")
        until(b"chatter> first\r\n")
        os.write(master, b"\x1b[A\r")  # up-arrow, then enter: "first" again
        until(b"chatter> first | first")
        os.write(master, b"/exit\r")
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)
