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
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from helix_agents import define_agent
from helix_agents.events import RunStarted, SessionCreated
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
    # Piped input reads as a transcript: each prompt on its own line with the line read
    # after it, never running into the reply; one line per reply (the streamed text, not
    # also an output line or an "= ..." echo); nothing left open at the end of input.
    assert out.splitlines()[2:] == [
        "you> hello",
        "chatter> hello",
        "you> ",
        "you> and then?",
        "chatter> hello | and then?",
    ]
    assert out.endswith("chatter> hello | and then?\n")
    assert anyio.run(runs_of, db, "talk-1") == ["start", "continue"]
    # Later, the same session goes on where it stopped.
    again = chat(APP, "chatter", store, "--session", "talk-1", stdin="third\n/exit\n")
    assert again.returncode == 0, again.stderr
    assert "chatter> hello | and then? | third\n" in again.stdout
    assert anyio.run(runs_of, db, "talk-1") == ["start", "continue", "continue"]


def test_a_chat_whose_every_turn_failed_exits_1(tmp_path: Path) -> None:
    store = f"--store=sqlite:///{tmp_path / 'chat.db'}"
    done = chat(APP, "failing", store, "--session", "fails-1", stdin="hi\nmore\n")
    assert done.returncode == 1, done.stderr
    assert ERROR_LINE.fullmatch(done.stderr.strip()), done.stderr
    assert "no turn of the chat succeeded (2 tried; the last: LLM call failed: model down)" in (
        done.stderr
    )
    failures = [line for line in done.stdout.splitlines() if "(the turn failed:" in line]
    assert len(failures) == 2, done.stdout  # both turns were taken, each in one line
    assert "model down" in failures[0]
    assert "(session fails-1 failed and takes no more turns; the chat goes on in session chat-" in (
        done.stdout
    )
    assert anyio.run(runs_of, tmp_path / "chat.db", "fails-1") == ["start"]


def test_a_chat_with_one_turn_that_succeeded_exits_0_and_no_turn_at_all_too(
    tmp_path: Path,
) -> None:
    store = f"--store=sqlite:///{tmp_path / 'chat.db'}"
    some = chat(APP, "moody", store, stdin="hello\nbreak\n")
    assert some.returncode == 0, some.stderr
    assert some.stderr == ""
    assert "(the turn failed: LLM call failed: model down)" in some.stdout
    nothing = chat(APP, "failing", store, stdin="\n/exit\n")
    assert nothing.returncode == 0, nothing.stderr
    assert nothing.stderr == ""


async def session_log(db: Path, session_id: str) -> list[Any]:
    async with SqliteEventStore(db) as store:
        return list(await store.read(session_id))


def test_a_failed_turn_keeps_the_conversation(tmp_path: Path) -> None:
    """The failed session takes no more turns: the next goes on in one that carries it over."""
    db = tmp_path / "chat.db"
    store = f"--store=sqlite:///{db}"
    done = chat(APP, "moody", store, "--session", "talk-2", stdin="hello\nbreak\nstill there?\n")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    moved = next(line for line in lines if line.startswith("(session talk-2 failed"))
    follow_up = re.fullmatch(
        r"\(session talk-2 failed and takes no more turns; the chat goes on in session "
        r"(chat-[0-9a-f]{8}), which starts with the conversation so far\)",
        moved,
    )
    assert follow_up is not None, moved
    after = follow_up.group(1)
    # The reply after the failure remembers the conversation, both sides and the failed turn.
    reply = done.stdout[done.stdout.index("you> still there?\n") :]
    assert reply == (
        "you> still there?\n"
        "moody> (The conversation so far, carried over from session talk-2:)\n"
        "user: hello\n"
        "moody: hello\n"
        "user: break | still there?\n"
    )
    assert anyio.run(runs_of, db, "talk-2") == ["start", "continue"]
    log = anyio.run(session_log, db, after)
    created = log[0]
    assert isinstance(created, SessionCreated)
    assert created.metadata == {"continues": "talk-2"}
    assert [m.content for m in created.messages][1:] == ["still there?"]
    assert project_state(log).status == "completed"


def test_a_session_that_failed_before_the_chat_is_carried_over(tmp_path: Path) -> None:
    db = tmp_path / "chat.db"
    store = f"--store=sqlite:///{db}"
    first = chat(APP, "moody", store, "--session", "talk-3", stdin="hello\nbreak\n")
    assert first.returncode == 0, first.stderr
    again = chat(APP, "moody", store, "--session", "talk-3", stdin="back\n")
    assert again.returncode == 0, again.stderr
    assert "(session talk-3 failed before and takes no more turns; the chat goes on" in (
        again.stdout
    )
    assert "moody> (The conversation so far, carried over from session talk-3:)\n" in (again.stdout)
    assert "user: break | back\n" in again.stdout


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


def fake_openai(seen: list[list[dict[str, Any]]], refuse: str | None = None) -> Starlette:
    """Streams "you said N things: ..." from the user messages of each request.

    ``refuse``: a request whose last user message is this gets a ``400``.
    """

    async def completions(request: Request) -> Response:
        body = await request.json()
        seen.append(body["messages"])
        said = [m["content"] for m in body["messages"] if m["role"] == "user"]
        if said[-1] == refuse:
            return JSONResponse({"error": {"message": "bad request on purpose"}}, 400)
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
            summary = await run_chat(
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
    assert (summary.turns, summary.succeeded) == (2, 2)
    async with SqliteEventStore(db) as store:
        state = project_state(await store.read(summary.session_id))
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


async def test_a_turn_a_model_server_refused_keeps_the_chat_and_its_memory(
    tmp_path: Path,
) -> None:
    """Piped into ``chat --model``: a 400 fails one turn; the next remembers the one before."""
    seen: list[list[dict[str, Any]]] = []
    with anyio.fail_after(60):
        async with serve(fake_openai(seen, refuse="break")) as url:
            done = await anyio.run_process(
                [*CHAT, "--model", "openai-compatible:m", f"--store=sqlite:///{tmp_path}/c.db"],
                input=b"hello\nbreak\nagain\n",
                cwd=ROOT,
                check=False,
                env={**os.environ, "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": ""},
            )
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    lines = out.splitlines()
    assert lines[2:4] == ["you> hello", "assistant> you said 1 things: hello "]
    assert lines[4] == "you> break"
    assert any(line.startswith("(the turn failed: ") and "400" in line for line in lines), out
    # The model's next request carried the conversation over: the first exchange, the
    # failed message, then the new one, as user messages of a new session.
    carried, latest = [m["content"] for m in seen[-1] if m["role"] == "user"]
    assert latest == "again"
    assert carried.splitlines()[1:] == [
        "user: hello",
        "assistant: you said 1 things: hello",
        "user: break",
    ]
    assert out.endswith("\n")


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
