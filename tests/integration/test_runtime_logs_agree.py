"""The log a session leaves is the same whatever runtime ran it: ``export``, ``check``, ``replay``.

Issue 23 (and 27): a client cannot tell which runtime ran a session, and the
CLI's readers of a store (``export``, ``check``, ``replay --json``, each the
real command in a subprocess) work unchanged on what a durable engine wrote.
Each param runs one conversation on its runtime (``runtime``), compared with
the same conversation on the built-in runtime (run once for the module), each
on a SQLite file of its own: a tool, a failing tool, a
local child (one call a turn: concurrent calls interleave their events in no
set order, on any runtime), a client tool answered at the root, then a
follow-up turn. The two exports are equal but for what differs between any two runs
(times, run ids, host ids); ``check`` finds nothing; the replayed states agree.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentConfig, ToolContext, create_sub_agent_tool, define_agent, define_tool
from helix_agents.models import ScriptedLLM, ScriptStep
from helix_agents.protocol import RemoteMessageRequest, RemoteStartRequest
from helix_agents.stores import SqliteEventStore
from tests.integration._durable_kit import Runtime
from tests.integration._serve_process import ROOT

pytestmark = pytest.mark.slow

LIMIT = 60
SID = "agree-1"


class Topic(BaseModel):
    topic: str


class Question(BaseModel):
    question: str


class Note(BaseModel):
    note: str


async def _lookup(value: Topic, ctx: ToolContext) -> dict[str, str]:
    return {"note": f"notes on {value.topic}"}


async def _broken(value: Topic, ctx: ToolContext) -> dict[str, str]:
    raise RuntimeError(f"the {value.topic} archive is offline")


def _agents() -> list[AgentConfig]:
    call = ScriptedLLM.call
    lookup = define_tool("lookup", "Look a topic up.", Topic, _lookup)
    broken = define_tool("broken", "An archive that is offline.", Topic, _broken)
    helper = define_agent(
        "helper",
        tools=[lookup],
        output_schema=Note,
        llm=ScriptedLLM(
            [
                ScriptStep(text="Looking.", tool_calls=[call("lookup", {"topic": "tea"}, id="h1")]),
                ScriptedLLM.finish({"note": "a leaf"}, text="Tea is a leaf.", id="h2"),
            ],
            chunk_words=1,
        ),
    )
    lead = define_agent(
        "lead",
        tools=[
            lookup,
            broken,
            create_sub_agent_tool(helper, Topic),
            define_tool("confirm", "Asks the user to confirm.", Question, "client"),
        ],
        llm=ScriptedLLM(
            [
                ScriptStep(
                    text="Let me see.", tool_calls=[call("lookup", {"topic": "plan"}, id="c1")]
                ),
                call("broken", {"topic": "old"}, id="c2"),
                call("subagent__helper", {"topic": "tea"}, id="c3"),
                call("confirm", {"question": "file it?"}, id="c4"),
                "Filed.",
                "And again.",
            ],
            chunk_words=1,
        ),
    )
    return [lead, helper]


async def _converse(runtime: Runtime, db: Path) -> None:
    """The conversation, on ``runtime``, into the SQLite file ``db``."""
    store = SqliteEventStore(db)
    try:
        async with runtime.server(_agents(), store) as server:
            await server.start_agent(
                RemoteStartRequest(session_id=SID, agent_type="lead", message="go")
            )
            await runtime.settled(server, SID)
            assert (await server.get_status(SID)).status == "paused"
            assert (await server.submit_tool_result(SID, "c4", "yes")).resumed
            await runtime.settled(server, SID)
            assert (await server.get_status(SID)).status == "completed"
            await server.send_message(RemoteMessageRequest(session_id=SID, message="once more"))
            await runtime.settled(server, SID)
            assert (await server.get_status(SID)).status == "completed"
    finally:
        await store.close()


_VOLATILE = {"ts", "runId", "durationMs", "hostId", "createdTs", "updatedTs", "startedAt"}
_VOLATILE |= {"completedAt"}


def comparable(value: Any) -> Any:
    """``value`` without what differs between any two runs: times, run ids, host ids."""
    if isinstance(value, dict):
        return {key: comparable(item) for key, item in value.items() if key not in _VOLATILE}
    if isinstance(value, list):
        return [comparable(item) for item in value]
    return value


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``helix-agents ARGS`` to its end (a reader of the store: quick)."""
    return subprocess.run(
        [sys.executable, "-m", "helix_agents.server", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=LIMIT,
        check=False,
    )


def _read(db: Path) -> dict[str, Any]:
    """What the CLI's readers make of ``db``: the exports, check's answer, the replayed states."""
    store = f"sqlite:///{db}"
    checked = _cli("check", "--store", store)
    exports = {}
    for session_id in (SID, f"{SID}-sub-c3"):
        exported = _cli("export", "--store", store, session_id)
        assert exported.returncode == 0, exported.stderr
        lines = exported.stdout.splitlines()
        exports[session_id] = comparable([json.loads(line) for line in lines])
    replayed = _cli("replay", "--store", store, SID, "--json")  # the child's state: in its export
    assert replayed.returncode == 0, replayed.stderr
    states = {SID: comparable(json.loads(replayed.stdout))}
    return {
        "check": (checked.returncode, checked.stdout.replace(store, "STORE").splitlines()),
        "exports": exports,
        "states": states,
    }


@pytest.fixture(scope="module")
async def expected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What the readers make of the built-in runtime's log (once for the module)."""
    directory = tmp_path_factory.mktemp("builtin")
    with anyio.fail_after(LIMIT):
        await _converse(Runtime("builtin", directory), directory / "events.db")
        return await anyio.to_thread.run_sync(_read, directory / "events.db")


async def test_export_check_and_replay_read_the_same_log_from_every_runtime(
    runtime: Runtime, tmp_path: Path, expected: dict[str, Any]
) -> None:
    with anyio.fail_after(LIMIT):
        await _converse(runtime, tmp_path / "events.db")
        got = await anyio.to_thread.run_sync(_read, tmp_path / "events.db")
    assert expected["check"][0] == 0, expected["check"]
    assert got["check"] == expected["check"]
    for session_id, log in expected["exports"].items():
        assert _first_difference(got["exports"][session_id], log) is None, session_id
    for session_id, state in expected["states"].items():
        theirs = got["states"][session_id]
        differing = {k: (theirs.get(k), v) for k, v in state.items() if theirs.get(k) != v}
        assert not differing, (session_id, differing)


def _first_difference(got: list[Any], expected: list[Any]) -> tuple[Any, Any] | None:
    """The first pair of items that differ (None if the lists are equal), for the message."""
    for ours, theirs in zip(got, expected, strict=False):
        if ours != theirs:
            return ours, theirs
    if len(got) != len(expected):
        return got[len(expected) :], expected[len(got) :]
    return None
