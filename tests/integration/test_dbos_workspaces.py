"""Workspaces and expiring inputs on DBOS (SQLite and Postgres), against the built-in runtime.

A workspace's file is written by one step and read by another, also after
the process that wrote it was SIGKILLed (SQLite: the restarted process
recovers the workflow; Postgres: another process takes it over); an
inheriting child (its own workflow) reads its parent's workspace; an entry
with ``expires_in`` is answered when the paused workflow's durable ``recv``
timeout ends, even when the process died while it waited.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from dbos import DBOS
from postgres_cluster import PostgresCluster

from helix_agents import define_agent
from helix_agents.dbos import DbosOptions, DbosWorker, dbos_server
from helix_agents.errors import UsageError
from helix_agents.events import Event, MessageAppended, Suspended
from helix_agents.log import project_state
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.workspaces import LocalWorkspaceProvider, MemoryWorkspaceProvider, Workspace
from tests.integration._durable_kit import WorkerScript, builtin_store, held, same_log
from tests.integration._temporal_kit import results_of, seqs_contiguous, stream_to_end, wait_for
from tests.integration.workspace_app import agents

pytestmark = [pytest.mark.slow]

_databases = itertools.count(1)


def _sqlite(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'dbos.sqlite'}"


def _postgres(postgres: PostgresCluster) -> str:
    return postgres.url.rsplit("/", 1)[0] + f"/dbos_ws_{next(_databases)}"


async def _run(
    system_database: str, root: Path, session_id: str, agent_type: str
) -> tuple[Any, MemoryEventStore, list[str]]:
    """Run ``session_id`` in this process on DBOS to its end; its output and its store."""
    store = MemoryEventStore()
    providers = {"local": LocalWorkspaceProvider(root)}
    options = DbosOptions(system_database=system_database)
    async with dbos_server(agents, store, options, workspace_providers=providers) as server:
        await server.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        output = await stream_to_end(server, session_id)
        steps = await DBOS.list_workflow_steps_async(f"{session_id}#2")
    return output, store, [step["function_name"] for step in steps]


@pytest.fixture(params=["sqlite", "postgres"])
def system_database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """DBOS's system database: a SQLite file, or a database of the private Postgres cluster."""
    if request.param == "sqlite":
        return _sqlite(tmp_path)
    return _postgres(request.getfixturevalue("postgres"))


async def test_a_file_written_in_one_step_is_read_in_another(
    system_database: str, tmp_path: Path
) -> None:
    """``workspace_write`` and ``workspace_read`` are two DBOS steps; the read finds the
    file, and the log is the built-in runtime's, event for event."""
    with anyio.fail_after(60):
        output, store, steps = await _run(system_database, tmp_path / "ws", "w1", "scribe")
        builtin = await builtin_store("scribe", "w1", tmp_path / "builtin")
    assert output == "done"
    log = await store.read("w1")
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    assert same_log(log, await builtin.read("w1"))
    assert steps.count("helix_tool_call") == 3  # write, hold, read: each its own step
    assert (tmp_path / "ws" / "w1" / "notes" / "plan.md").read_text() == "step one"


@pytest.mark.parametrize(
    ("agent_type", "child", "said"),
    [
        ("lead", "i-lead-sub-ls1", "the reader read it"),
        ("keeper", "i-keeper-agent-r", "the companion read it"),
    ],
)
async def test_an_inheriting_child_reads_its_parents_workspace(
    tmp_path: Path, agent_type: str, child: str, said: str
) -> None:
    """The reader (``inherit_workspace=True``: a sub-agent's child workflow, or a blocking
    companion's workflow of its own) reads the file its parent's step wrote; both logs are
    the built-in runtime's."""
    session = f"i-{agent_type}"
    with anyio.fail_after(60):
        output, store, _ = await _run(_sqlite(tmp_path), tmp_path / "ws", session, agent_type)
        builtin = await builtin_store(agent_type, session, tmp_path / "builtin")
    assert output == said
    [read] = results_of(await store.read(child), "rr1")
    assert '"content":"for you"' in read.message.content
    assert project_state(await store.read(child)).workspace_session_id == session
    for session_id in (session, child):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert same_log(log, await builtin.read(session_id))


_EXPIRING = [
    ("late", "p1", "", "gave up"),
    ("wary", "x1", "", "kept it all"),
    ("vault", "cx1", "-sub-v1", "the clerk kept it"),  # a child's entry, expired at the root
]


@pytest.mark.parametrize(("agent_type", "call_id", "owner", "said"), _EXPIRING)
async def test_an_expiring_entry_is_answered_when_the_wait_ends(
    system_database: str, tmp_path: Path, agent_type: str, call_id: str, owner: str, said: str
) -> None:
    """A client tool / an approval (the root's, or its child's) with ``expires_in=1``, nobody
    answering: the paused root
    workflow's ``recv`` times out at the instant, the ``helix_expire`` step answers it as
    expired, and the run goes on: the log is the built-in runtime's (expiry instants aside)."""
    session_id = f"e-{agent_type}"
    with anyio.fail_after(60):
        output, store, steps = await _run(system_database, tmp_path / "ws", session_id, agent_type)
        builtin = await builtin_store(agent_type, session_id, tmp_path / "builtin")
    assert output == said
    for session in (session_id, session_id + owner) if owner else (session_id,):
        log = await store.read(session)
        assert seqs_contiguous(log)
        assert project_state(log).status == "completed"
        assert same_log(log, await builtin.read(session))
    # A child's waiting call ids carry a suffix of its session's (specs/hitl.md).
    [result] = [
        event
        for event in await store.read(session_id + owner)
        if isinstance(event, MessageAppended)
        and isinstance(event.message, ToolResultMessage)
        and event.message.tool_call_id.startswith(call_id)
    ]
    assert "no answer within 1 s" in result.message.content
    assert "helix_expire" in steps


async def _killed_then_taken_over(
    tmp_path: Path, system_database: str, session_id: str, agent_type: str, *, mid_hold: bool
) -> tuple[list[Event], Any]:
    """Process A starts the session and is SIGKILLed (mid ``hold``, or once paused); process B
    (the same command) recovers or takes over the workflow and follows it to the end."""
    db, root, marks = tmp_path / "store.db", tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    args = ("dbos", system_database, str(db), str(root), session_id, agent_type)
    env = {"HELIX_WS_MARKS": str(marks), "HELIX_WS_HOLD": "60"}
    first = WorkerScript(tmp_path / "a.log", *args, env=env)
    second = WorkerScript(tmp_path / "b.log", *args, env=env)
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        with anyio.fail_after(120):
            await first.start()
            if mid_hold:
                await held(store, session_id)
            else:
                await wait_for(store, session_id, lambda e: isinstance(e, Suspended))
            await first.kill()
            assert project_state(await store.read(session_id)).status in ("running", "paused")
            await second.start()
            assert await second.wait() == 0
        log = list(await store.read(session_id))
    except BaseException:
        print(first.output(), second.output())
        raise
    finally:
        await first.stop()
        await second.stop()
        await store.close()
    said = [line for line in second.output().splitlines() if line.startswith("output: ")]
    return log, json.loads(said[-1].removeprefix("output: "))


@pytest.mark.parametrize("engine_db", ["sqlite", "postgres"])
async def test_process_killed_between_write_and_read_the_next_reads_the_file(
    engine_db: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Process A runs the write and is SIGKILLed in the middle of ``hold``; process B (a
    restart on SQLite; another executor taking A's workflows over on Postgres) runs ``hold``
    again and reads the file A wrote."""
    url = (
        _sqlite(tmp_path)
        if engine_db == "sqlite"
        else _postgres(request.getfixturevalue("postgres"))
    )
    log, output = await _killed_then_taken_over(tmp_path, url, "k1", "scribe", mid_hold=True)
    assert output == "done"
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    marks = tmp_path / "marks"
    assert sorted(path.name for path in marks.iterdir()) == ["h1.1", "h1.2"]
    assert len({(marks / name).read_text() for name in ("h1.1", "h1.2")}) == 2


async def test_the_expiry_wait_outlives_the_process(tmp_path: Path) -> None:
    """The session pauses; its process is SIGKILLed before the entry expires; the restarted
    process recovers the workflow, whose recorded ``recv`` deadline has passed: it answers
    the entry as expired and the run ends as on the built-in runtime."""
    log, output = await _killed_then_taken_over(
        tmp_path, _sqlite(tmp_path), "kt", "late", mid_hold=False
    )
    assert output == "gave up"
    assert seqs_contiguous(log)
    [result] = results_of(log, "p1")
    assert "no answer within 1 s" in result.message.content
    assert project_state(log).status == "completed"


def test_a_provider_that_keeps_files_in_one_process_is_refused(tmp_path: Path) -> None:
    """A memory workspace cannot be reached from another process: refused at construction."""
    agent = define_agent("ws", llm=ScriptedLLM(["hi"]), workspaces=[Workspace("files", "memory")])
    with pytest.raises(UsageError, match=r"'ws' declares workspace 'files'.*MemoryWorkspace"):
        DbosWorker(
            [agent],
            MemoryEventStore(),
            DbosOptions(system_database=_sqlite(tmp_path)),
            workspace_providers={"memory": MemoryWorkspaceProvider()},
        )
