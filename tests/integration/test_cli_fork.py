"""``helix-agents fork``: a branch in a store (written, not run), or through ``POST /fork``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from hitl_checks import until
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.events import ReplaceToolResult, SessionForked, ToolStart, UseAgent
from helix_agents.log import encode_event, project_state
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.server.cli import main as cli
from helix_agents.stores import SqliteEventStore


class Q(BaseModel):
    q: str


looked: list[str] = []


def _lookup(value: Q, ctx: Any) -> dict[str, str]:
    looked.append(value.q)
    return {"found": value.q}


def _agent() -> Any:
    llm = ScriptedLLM([[ScriptedLLM.call("lookup", {"q": "x"}, id="c1")], "done"])
    return define_agent("a", tools=[define_tool("lookup", "L.", Q, _lookup)], llm=llm)


@pytest.fixture
def recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, Any]:
    looked.clear()
    agent = _agent()

    async def record() -> None:
        async with (
            SqliteEventStore(tmp_path / "s.db") as store,
            AgentExecutor(store, [agent]) as executor,
        ):
            await executor.run(agent, "hi", session_id="s1")

    anyio.run(record)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(cli.STORE_URL_ENV, raising=False)
    return "sqlite:///s.db", agent


def _read(path: Path, session_id: str) -> list[Any]:
    async def read() -> list[Any]:
        async with SqliteEventStore(path) as store:
            return await store.read(session_id)

    return anyio.run(read)


def test_fork_in_a_store_writes_the_branch_with_its_edits(
    recorded: tuple[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url, _agent = recorded
    origin = [encode_event(e) for e in _read(tmp_path / "s.db", "s1")]
    at = next(e.seq for e in _read(tmp_path / "s.db", "s1") if isinstance(e, ToolStart))
    argv = ["fork", "--store", url, "s1", "--at", str(at), "--new-id", "b1", "--json"]
    argv += ["--tool-result", 'c1={"found": "edited"}', "--agent", "a"]
    assert cli.main(argv) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["sessionId"] == "b1"
    assert (answer["status"], answer["runId"], answer["copiedEvents"]) == ("running", None, at)
    branch = _read(tmp_path / "s.db", "b1")
    marker = branch[at]
    assert isinstance(marker, SessionForked)
    assert marker.edits == [
        ReplaceToolResult(tool_call_id="c1", result={"found": "edited"}),
        UseAgent(agent_type="a"),
    ]
    results = [m for m in project_state(branch).messages if isinstance(m, ToolResultMessage)]
    assert [m.content for m in results] == ['{"found":"edited"}']
    assert [encode_event(e) for e in _read(tmp_path / "s.db", "s1")] == origin
    assert cli.main(["check", "--store", url]) == 0


def test_fork_refusals_are_one_line(
    recorded: tuple[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _agent = recorded
    cases = [
        (["fork", "--store", url, "nobody"], 1, "not found"),
        (["fork", "--store", url, "s1", "--at", "999"], 1, "at_seq 999"),
        (["fork", "--store", url, "s1", "--state", "[1]"], 2, "--state takes a JSON object"),
        (["fork", "--store", url, "s1", "--tool-result", "c1"], 2, "KEY=VALUE"),
        (["fork", "--store", url, "s1", "--approve", "c1"], 1, "decided live"),
    ]
    for argv, code, said in cases:
        assert cli.main(argv) == code, argv
        err = capsys.readouterr().err
        assert said in err, err
        assert len(err.strip().splitlines()) == 1
    assert cli.main(["sessions", "--store", url, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["sessions"]
    assert [s["sessionId"] for s in listed] == ["s1"]  # nothing was written


@pytest.mark.anyio
async def test_fork_through_a_server_runs_the_branch(tmp_path: Path) -> None:
    looked.clear()
    agent = _agent()
    async with (
        SqliteEventStore(tmp_path / "s.db") as store,
        serve(create_http_app(AgentServer([agent], store))) as url,
    ):
        async with AgentExecutor(store, [agent]) as executor:
            await executor.run(agent, "hi", session_id="s1")
        at = next(e.seq for e in await store.read("s1") if isinstance(e, ToolStart))
        argv = ["fork", "--server", url, "s1", "--at", str(at), "--new-id", "b2"]
        assert await anyio.to_thread.run_sync(cli.main, argv) == 0
        await until(store, "b2", lambda s: s.is_terminal)
        state = project_state(await store.read("b2"))
    assert (state.status, state.output) == ("completed", "done")
    assert looked == ["x", "x"]  # the call after the point ran live, once
