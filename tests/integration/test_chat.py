"""``helix-agents chat MODULE:ATTR AGENT``: one session, turn after turn, streamed live.

Run as a real subprocess (stdin piped) against a scripted agent whose answer
shows every message it remembers, and in-process against an agent on
``OpenAIChatLLM`` talking to a fake OpenAI-compatible server on uvicorn.
"""

from __future__ import annotations

import json
import re
import subprocess
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

from helix_agents import define_agent
from helix_agents.events import RunStarted
from helix_agents.log import project_state
from helix_agents.models import OpenAIChatLLM
from helix_agents.server.cli.chat import ChatError, run_chat
from helix_agents.stores import SqliteEventStore

pytestmark = pytest.mark.slow

ROOT = Path(__file__).parents[2]
APP = "tests.integration.chat_app:agents"
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
    assert "chatter> hello\n" in out
    assert "= hello\n" in out
    assert "chatter> hello | and then?\n" in out
    assert out.index("= hello\n") < out.index("chatter> hello | and then?")
    assert anyio.run(runs_of, db, "talk-1") == ["start", "continue"]
    # Later, the same session goes on where it stopped.
    again = chat(APP, "chatter", store, "--session", "talk-1", stdin="third\n/exit\n")
    assert again.returncode == 0, again.stderr
    assert "= hello | and then? | third\n" in again.stdout
    assert anyio.run(runs_of, db, "talk-1") == ["start", "continue", "continue"]


def test_a_failed_turn_ends_the_chat_with_one_error_line(tmp_path: Path) -> None:
    store = f"--store=sqlite:///{tmp_path / 'chat.db'}"
    done = chat(APP, "failing", store, stdin="hi\nmore\n")
    assert done.returncode == 1
    assert ERROR_LINE.fullmatch(done.stderr.strip()), done.stderr
    assert "model down" in done.stderr


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        ((APP, "nobody"), 1, "no agent 'nobody'"),
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
    assert "= you said 1 things: first \n" in text
    assert "= you said 2 things: first, second \n" in text
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
