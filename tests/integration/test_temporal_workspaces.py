"""Workspaces and expiring inputs on Temporal (a real dev server), against the built-in runtime.

A workspace's file is written by one activity and read by another, also
after the worker that wrote it was SIGKILLed and another took over; an
inheriting child (its own workflow) reads its parent's workspace; an entry
with ``expires_in`` is answered by the workflow's durable timer, even when
the only worker died while the timer ran.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from temporal_server import TemporalDev
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from helix_agents import define_agent
from helix_agents.errors import UsageError
from helix_agents.events import ClientToolPending, Completed, MessageAppended, Suspended
from helix_agents.log import project_state
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.temporal import TemporalOptions, TemporalWorker, temporal_server
from helix_agents.workspaces import LocalWorkspaceProvider, MemoryWorkspaceProvider, Workspace
from tests.integration._durable_kit import WorkerScript, builtin_store, held, same_log
from tests.integration._temporal_kit import (
    gateway_and_worker,
    options_for,
    results_of,
    seqs_contiguous,
    stream_to_end,
    wait_for,
)
from tests.integration.temporal_app import agents as app_agents
from tests.integration.workspace_app import agents

pytestmark = [pytest.mark.slow]


@asynccontextmanager
async def _deployed(
    store: MemoryEventStore, options: TemporalOptions, root: Path
) -> AsyncIterator[AgentServer]:
    providers = {"local": LocalWorkspaceProvider(root)}
    async with TemporalWorker(agents, store, options, workspace_providers=providers):
        server = temporal_server(agents, store, options)
        async with server:
            yield server


async def _activities(client: Client, workflow_id: str) -> list[str]:
    """The activity types the workflow scheduled, in order (its history)."""
    names = []
    async for event in client.get_workflow_handle(workflow_id).fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            names.append(event.activity_task_scheduled_event_attributes.activity_type.name)
        elif event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED:
            names.append("local")
        elif event.event_type == EventType.EVENT_TYPE_TIMER_STARTED:
            names.append("timer")
    return names


async def test_a_file_written_in_one_activity_is_read_in_another(
    temporal_dev: TemporalDev, tmp_path: Path
) -> None:
    """``workspace_write`` and ``workspace_read`` run as two activities; the read finds the
    file, and the log is the built-in runtime's, event for event."""
    store = MemoryEventStore()
    options = options_for(temporal_dev)
    with anyio.fail_after(60):
        async with _deployed(store, options, tmp_path / "ws") as server:
            await server.start(
                RemoteStartRequest(session_id="w1", agent_type="scribe", message="go")
            )
            assert await stream_to_end(server, "w1") == "done"
        builtin = await builtin_store("scribe", "w1", tmp_path / "builtin")
        scheduled = await _activities(await Client.connect(temporal_dev.address), "w1")
    log = await store.read("w1")
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    assert same_log(log, await builtin.read("w1"))
    assert scheduled.count("helix_tool_call") == 3  # write, hold, read: each its own activity
    written = tmp_path / "ws" / "w1" / "notes" / "plan.md"
    assert written.read_text() == "step one"


@pytest.mark.parametrize(
    ("agent_type", "child", "said"),
    [
        ("lead", "i-lead-sub-ls1", "the reader read it"),
        ("keeper", "i-keeper-agent-r", "the companion read it"),
    ],
)
async def test_an_inheriting_child_reads_its_parents_workspace(
    temporal_dev: TemporalDev, tmp_path: Path, agent_type: str, child: str, said: str
) -> None:
    """The reader (``inherit_workspace=True``: a sub-agent's child workflow, or a blocking
    companion's workflow of its own) reads the file its parent's activity wrote; both logs
    are the built-in runtime's."""
    store = MemoryEventStore()
    options = options_for(temporal_dev)
    session = f"i-{agent_type}"
    with anyio.fail_after(60):
        async with _deployed(store, options, tmp_path / "ws") as server:
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


@pytest.mark.parametrize(("agent_type", "call_id", "owner", "said"), _EXPIRING)
async def test_an_expiring_entry_is_answered_by_the_workflows_timer(
    temporal_dev: TemporalDev, tmp_path: Path, agent_type: str, call_id: str, owner: str, said: str
) -> None:
    """A client tool / an approval (the root's, or its child's) with ``expires_in=1`` and
    nobody answering: the paused root
    workflow's Temporal timer fires, the ``helix_expire`` step answers it as expired, and
    the run goes on to its end: the log is the built-in runtime's (its expiry instants aside)."""
    store = MemoryEventStore()
    options = options_for(temporal_dev)
    session_id = f"e-{agent_type}"
    with anyio.fail_after(60):
        async with _deployed(store, options, tmp_path / "ws") as server:
            await server.start(
                RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
            )
            await wait_for(store, session_id, lambda e: isinstance(e, Suspended))
            output = await stream_to_end(server, session_id)
            status = await server.get_status(session_id)
        builtin = await builtin_store(agent_type, session_id, tmp_path / "builtin")
        scheduled = await _activities(await Client.connect(temporal_dev.address), session_id)
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
    assert "timer" in scheduled


async def test_worker_killed_between_write_and_read_another_reads_the_file(
    temporal_dev: TemporalDev, tmp_path: Path
) -> None:
    """Worker A runs the write, then is SIGKILLed in the middle of ``hold``; worker B (another
    process, a provider of its own on the shared root) retries ``hold`` after the heartbeat
    timeout and reads the file A wrote."""
    db, root, marks = tmp_path / "store.db", tmp_path / "ws", tmp_path / "marks"
    marks.mkdir()
    options = options_for(temporal_dev, heartbeat_timeout=2.0)
    args = ("temporal", temporal_dev.address, options.task_queue, str(db), str(root))
    env = {"HELIX_WS_MARKS": str(marks), "HELIX_WS_HOLD": "60"}
    first = WorkerScript(tmp_path / "a.log", *args, env=env)
    second = WorkerScript(tmp_path / "b.log", *args, env=env)
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        with anyio.fail_after(90):
            await first.start()
            server = temporal_server(agents, store, options)
            async with server:
                await server.start(
                    RemoteStartRequest(session_id="k1", agent_type="scribe", message="go")
                )
                await held(store, "k1")
                await first.kill()
                await second.start()
                assert await stream_to_end(server, "k1") == "done"
    except BaseException:
        print(first.output(), second.output())
        raise
    finally:
        await first.stop()
        await second.stop()
        log = await store.read("k1")
        await store.close()
    assert seqs_contiguous(log)
    [read] = results_of(log, "r1")
    assert '"content":"step one"' in read.message.content
    assert sorted(path.name for path in marks.iterdir()) == ["h1.1", "h1.2"]
    pids = {(marks / name).read_text() for name in ("h1.1", "h1.2")}
    assert len(pids) == 2  # the retry ran in the other process


async def test_the_expiry_timer_outlives_the_only_worker(
    temporal_dev: TemporalDev, tmp_path: Path
) -> None:
    """The session pauses on worker A, which is SIGKILLed before the entry expires; the
    timer is Temporal's, so worker B, started after the instant, runs the expiry."""
    db, root = tmp_path / "store.db", tmp_path / "ws"
    options = options_for(temporal_dev, heartbeat_timeout=2.0)
    args = ("temporal", temporal_dev.address, options.task_queue, str(db), str(root))
    first = WorkerScript(tmp_path / "a.log", *args)
    second = WorkerScript(tmp_path / "b.log", *args)
    store = SqliteEventStore(db, poll_interval=0.05)
    try:
        with anyio.fail_after(90):
            await first.start()
            server = temporal_server(agents, store, options)
            async with server:
                await server.start(
                    RemoteStartRequest(session_id="kt", agent_type="late", message="go")
                )
                pending = await wait_for(store, "kt", lambda e: isinstance(e, ClientToolPending))
                await wait_for(store, "kt", lambda e: isinstance(e, Suspended))
                await first.kill()
                assert isinstance(pending, ClientToolPending)
                assert pending.expires_at is not None
                # No worker is left: the expiry comes from the timer, run by B.
                assert project_state(await store.read("kt")).status == "paused"
                await second.start()
                assert await stream_to_end(server, "kt") == "gave up"
    except BaseException:
        print(first.output(), second.output())
        raise
    finally:
        await first.stop()
        await second.stop()
        log = await store.read("kt")
        await store.close()
    assert seqs_contiguous(log)
    [result] = results_of(log, "p1")
    assert "no answer within 1 s" in result.message.content
    assert isinstance(log[-1], Completed)


def test_a_provider_that_keeps_files_in_one_process_is_refused() -> None:
    """A memory workspace cannot be reached from another worker: refused at construction,
    naming the agent, the workspace and the provider."""
    agent = define_agent("ws", llm=ScriptedLLM(["hi"]), workspaces=[Workspace("files", "memory")])
    with pytest.raises(UsageError, match=r"'ws' declares workspace 'files'.*MemoryWorkspace"):
        TemporalWorker(
            [agent], MemoryEventStore(), workspace_providers={"memory": MemoryWorkspaceProvider()}
        )
    TemporalWorker([agent], MemoryEventStore())  # no provider: the soft wiring, as built in


async def test_a_paused_run_past_its_wait_ends_and_the_answer_starts_a_new_one(
    temporal_dev: TemporalDev,
) -> None:
    """With no expiring entry, ``paused_wait`` still bounds the wait: the workflow ends
    (``paused``; the session stays paused in the log) and a later answer starts a new one."""
    store = MemoryEventStore()
    options = options_for(temporal_dev, paused_wait=0.5)
    with anyio.fail_after(60):
        async with gateway_and_worker(app_agents, store, options) as (server, _):
            await server.start(RemoteStartRequest(session_id="pw", agent_type="asker", message="?"))
            await wait_for(store, "pw", lambda e: isinstance(e, Suspended))
            client = await Client.connect(temporal_dev.address)
            assert await client.get_workflow_handle("pw").result() == "paused"
            assert (await server.get_status("pw")).status == "paused"
            answer = await server.submit_tool_result("pw", "k1", {"amount": 3})
            assert answer.resumed
            assert await stream_to_end(server, "pw") == "picked"
    assert seqs_contiguous(await store.read("pw"))
