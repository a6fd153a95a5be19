"""Workspaces and expiring inputs on the durable runtimes, against the built-in runtime.

Each scenario runs once per durable runtime (the ``runtime`` fixture): Temporal on the
run's dev server, DBOS on SQLite and, where the system database matters, on Postgres. A
workspace's file is written by one step (Temporal: activity) and read by another; an
inheriting child (its own workflow) reads its parent's workspace; an entry with
``expires_in`` is answered when the paused workflow's durable wait ends (Temporal: its
timer; DBOS: its ``recv`` timeout). The processes killed mid-way are each engine's own:
``test_temporal_workspaces.py`` (another worker takes over) and ``test_dbos_workspaces.py``
(a restart recovers, or another process takes over on Postgres).
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from helix_agents import define_agent
from helix_agents.errors import UsageError
from helix_agents.events import MessageAppended, Suspended
from helix_agents.log import project_state
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from helix_agents.workspaces import LocalWorkspaceProvider, MemoryWorkspaceProvider, Workspace
from tests.integration._durable_kit import Runtime, builtin_store, same_log
from tests.integration._temporal_kit import results_of, seqs_contiguous, stream_to_end, wait_for
from tests.integration.workspace_app import agents

pytestmark = [pytest.mark.slow]

LIMIT = 60
DURABLE = pytest.mark.parametrize("runtime", ["temporal", "dbos"], indirect=True)
EVERY_DATABASE = pytest.mark.parametrize(
    "runtime", ["temporal", "dbos", "dbos-postgres"], indirect=True
)

EXPIRY_STEP = {"temporal": "timer", "dbos": "helix_expire"}
"""What a run that answered an entry as expired shows in its engine's record."""


@EVERY_DATABASE
async def test_a_file_written_in_one_step_is_read_in_another(
    runtime: Runtime, tmp_path: Path
) -> None:
    """``workspace_write`` and ``workspace_read`` run as two durable steps; the read finds
    the file, and the log is the built-in runtime's, event for event."""
    store = MemoryEventStore()
    providers = {"local": LocalWorkspaceProvider(tmp_path / "ws")}
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store, workspace_providers=providers) as server:
            await server.start(
                RemoteStartRequest(session_id="w1", agent_type="scribe", message="go")
            )
            assert await stream_to_end(server, "w1") == "done"
            steps = await runtime.steps("w1")
        builtin = await builtin_store("scribe", "w1", tmp_path / "builtin")
    log = await store.read("w1")
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    assert same_log(log, await builtin.read("w1"))
    # Write, hold, read: each its own round, one step each (Temporal: a local activity;
    # DBOS: in the step of the turn that asked for it, then the answer's).
    if runtime.name == "dbos":
        assert steps == ["helix_turn"] * 4
    else:
        assert len([name for name in steps if name.endswith("helix_tool_round")]) == 3
    assert (tmp_path / "ws" / "w1" / "notes" / "plan.md").read_text() == "step one"


@DURABLE
@pytest.mark.parametrize(
    ("agent_type", "child", "said"),
    [
        ("lead", "i-lead-sub-ls1", "the reader read it"),
        ("keeper", "i-keeper-agent-r", "the companion read it"),
    ],
)
async def test_an_inheriting_child_reads_its_parents_workspace(
    runtime: Runtime, tmp_path: Path, agent_type: str, child: str, said: str
) -> None:
    """The reader (``inherit_workspace=True``: a sub-agent's child workflow, or a blocking
    companion's workflow of its own) reads the file its parent's step wrote; both logs are
    the built-in runtime's."""
    store = MemoryEventStore()
    providers = {"local": LocalWorkspaceProvider(tmp_path / "ws")}
    session = f"i-{agent_type}"
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store, workspace_providers=providers) as server:
            await server.start(
                RemoteStartRequest(session_id=session, agent_type=agent_type, message="go")
            )
            assert await stream_to_end(server, session) == said
        builtin = await builtin_store(agent_type, session, tmp_path / "builtin")
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


@EVERY_DATABASE
@pytest.mark.parametrize(("agent_type", "call_id", "owner", "said"), _EXPIRING)
async def test_an_expiring_entry_is_answered_when_the_wait_ends(
    runtime: Runtime, tmp_path: Path, agent_type: str, call_id: str, owner: str, said: str
) -> None:
    """A client tool / an approval (the root's, or its child's) with ``expires_in=1`` and
    nobody answering: the paused root workflow's durable wait ends at the instant (Temporal:
    its timer fires; DBOS: its ``recv`` times out), the ``helix_expire`` step answers it as
    expired, and the run goes on to its end: the log is the built-in runtime's (its expiry
    instants aside)."""
    store = MemoryEventStore()
    providers = {"local": LocalWorkspaceProvider(tmp_path / "ws")}
    session_id = f"e-{agent_type}"
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store, workspace_providers=providers) as server:
            await server.start(
                RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
            )
            await wait_for(store, session_id, lambda e: isinstance(e, Suspended))
            output = await stream_to_end(server, session_id)
            status = await server.get_status(session_id)
            steps = await runtime.steps(session_id)
        builtin = await builtin_store(agent_type, session_id, tmp_path / "builtin")
    assert output == said
    assert status.status == "completed"
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
    assert EXPIRY_STEP[runtime.name] in steps


@DURABLE
def test_a_provider_that_keeps_files_in_one_process_is_refused(runtime: Runtime) -> None:
    """A memory workspace cannot be reached from another worker: refused at construction,
    naming the agent, the workspace and the provider; with no provider a Temporal worker
    takes the soft wiring, as built in."""
    agent = define_agent("ws", llm=ScriptedLLM(["hi"]), workspaces=[Workspace("files", "memory")])
    with pytest.raises(UsageError, match=r"'ws' declares workspace 'files'.*MemoryWorkspace"):
        runtime.worker_in_process(
            [agent], MemoryEventStore(), workspace_providers={"memory": MemoryWorkspaceProvider()}
        )
    if runtime.name == "temporal":  # a DBOS worker is made on a running event loop
        runtime.worker_in_process([agent], MemoryEventStore())  # no provider: the soft wiring
