"""Errors a person reads in one line: no event-loop frames, no traceback from the CLI.

``run_sync`` and ``await executor.run(...)`` raise the library's own error
(a ``HelixError``, never an exception group) with its cause kept and its
traceback cut to the caller's frames: a script that fails prints a few lines
ending in the cause. ``serve`` prints a ``HelixError`` met while starting as
one ``helix-agents: error:`` line and exits 1.
"""

from __future__ import annotations

import os
import re
import sys
import traceback
from pathlib import Path

import anyio
import pytest
from servers import closed_port, listen_port, serve
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from helix_agents import AgentExecutor, define_agent
from helix_agents.errors import AgentRunError, UsageError
from helix_agents.models import ScriptedLLM
from helix_agents.stores import MemoryEventStore

pytestmark = pytest.mark.slow

SCRIPT = """\
from helix_agents import define_agent, run_sync
from helix_agents.stores import MemoryEventStore

agent = define_agent("counter", model="{model}")
print(run_sync(agent, "How many words?", store=MemoryEventStore()))
"""


def without_openai() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OPENAI_")}


async def run_script(tmp_path: Path, model: str, env: dict[str, str]) -> list[str]:
    """Run the script; the lines of its stderr (it must fail with status 1)."""
    (tmp_path / "script.py").write_text(SCRIPT.format(model=model))
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "script.py"], cwd=tmp_path, env=env, check=False
        )
    assert done.returncode == 1, done.stderr.decode()
    assert done.stdout == b""
    return done.stderr.decode().splitlines()


def assert_short(lines: list[str]) -> str:
    """A traceback of the script's own line and run_sync's, then the error: its last line."""
    shown = "\n".join(lines)
    assert len(lines) <= 10, shown
    frames = [line for line in lines if line.lstrip().startswith('File "')]
    assert len(frames) == 2, shown
    assert "script.py" in frames[0]
    assert frames[1].rstrip().endswith("in run_sync"), shown
    assert "anyio" not in shown
    assert "asyncio" not in shown
    return lines[-1]


async def test_run_sync_without_the_key_is_a_short_usage_error(tmp_path: Path) -> None:
    last = assert_short(await run_script(tmp_path, "openai:gpt-4o-mini", without_openai()))
    assert last.startswith(
        "helix_agents.errors.UsageError: model 'openai:gpt-4o-mini' needs an OpenAI API key: "
        "set OPENAI_API_KEY"
    )


async def test_run_sync_on_a_401_is_a_short_run_error_naming_the_key(tmp_path: Path) -> None:
    async def refuse(request: Request) -> Response:
        body = {"error": {"message": "Incorrect API key provided: sk-wrong."}}
        return JSONResponse(body, status_code=401)

    app = Starlette(routes=[Route("/v1/chat/completions", refuse, methods=["POST"])])
    async with serve(app) as url:
        env = {**without_openai(), "OPENAI_BASE_URL": f"{url}/v1", "OPENAI_API_KEY": "sk-wrong"}
        last = assert_short(await run_script(tmp_path, "openai-compatible:x", env))
    assert re.fullmatch(
        r"helix_agents\.errors\.AgentRunError: session '[\w-]+' ended failed: LLM call failed "
        rf"\(HTTP 401\) for model 'x' at {url}/v1/chat/completions: Incorrect API key "
        r"provided: sk-wrong\.; check the API key in OPENAI_API_KEY",
        last,
    ), last


async def test_run_sync_on_a_server_that_is_down_asks_whether_it_runs(tmp_path: Path) -> None:
    port = closed_port()
    env = {**without_openai(), "OPENAI_BASE_URL": f"http://127.0.0.1:{port}/v1"}
    last = assert_short(await run_script(tmp_path, "openai-compatible:x", env))
    assert last.startswith("helix_agents.errors.AgentRunError: session '")
    assert "cannot connect" in last
    assert last.endswith(
        f"is a server running at http://127.0.0.1:{port}/v1? (from OPENAI_BASE_URL)"
    )


async def test_executor_run_raises_from_the_callers_frames_only() -> None:
    agent = define_agent("a", llm=ScriptedLLM([ScriptedLLM.fail("the model broke")]))
    with pytest.raises(AgentRunError) as caught:
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            await executor.run(agent, "hi")
    frames = traceback.extract_tb(caught.value.__traceback__)
    # This test's line, then executor.run's raise: no handle, no task group, no loop.
    assert [Path(frame.filename).name for frame in frames] == [Path(__file__).name, "executor.py"]
    assert frames[-1].name == "run"
    assert str(caught.value).endswith("ended failed: LLM call failed: the model broke")


async def test_an_error_raised_in_an_executor_block_keeps_its_cause() -> None:
    with pytest.raises(UsageError) as caught:
        async with AgentExecutor(MemoryEventStore(), []):
            raise UsageError("refused") from KeyError("the cause")
    assert isinstance(caught.value.__cause__, KeyError)
    assert not isinstance(caught.value, BaseExceptionGroup)


BAD_TOOLSET = """\
from mcp import StdioServerParameters

from helix_agents import define_agent
from helix_agents.mcp import MCPToolset
from helix_agents.models import ScriptedLLM

server = StdioServerParameters(command="no-such-mcp-server-xyz")
agents = [define_agent("a", llm=ScriptedLLM(["hi"]), toolsets=[MCPToolset(server)])]
"""


async def test_serve_prints_a_toolset_that_will_not_open_in_one_line(tmp_path: Path) -> None:
    pytest.importorskip("mcp")
    (tmp_path / "bad_toolset.py").write_text(BAD_TOOLSET)
    port = listen_port()
    command = [sys.executable, "-m", "helix_agents.server", "serve", "bad_toolset:agents"]
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [*command, "--port", str(port), "--store", "memory://"],
            cwd=tmp_path,
            env={k: v for k, v in os.environ.items() if not k.startswith("HELIX_")},
            check=False,
        )
    stderr = done.stderr.decode()
    assert done.returncode == 1, stderr
    assert "Traceback" not in stderr
    last = stderr.splitlines()[-1]
    assert last.startswith("helix-agents: error: toolset no-such-mcp-server-xyz: could not connect")
