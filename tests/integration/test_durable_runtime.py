"""Agents run as durable workflows, Temporal's and DBOS's, against the built-in runtime.

Each scenario runs once per durable runtime (the ``runtime`` fixture,
``tests/integration/_durable_kit.py``): the worker and the gateway's server in
this process (the code ``helix-agents worker`` / ``serve --temporal`` and
``serve --dbos`` run), on the run's one Temporal dev server
(``tests/temporal_server.py``) or a DBOS SQLite system database of the test's
own. What only one engine has is in ``test_temporal_runtime.py`` and
``test_dbos_runtime.py``; where a scenario looks into the engine's own record
(open workflows, history), it says which engine it asks.
"""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from helix_agents import AgentExecutor, define_agent
from helix_agents.errors import UsageError
from helix_agents.events import (
    Aborted,
    Completed,
    CompletionDelivered,
    CustomChunk,
    Interrupted,
    MessageAppended,
    StepStarted,
    Suspended,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import project_state
from helix_agents.messages import ToolResultMessage, UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteMessageRequest, RemoteStartRequest
from helix_agents.server import AgentServer
from helix_agents.stores import MemoryEventStore
from tests.integration._durable_kit import Runtime
from tests.integration._temporal_kit import (
    comparable,
    results_of,
    seqs_contiguous,
    stream_to_end,
    wait_for,
)
from tests.integration.companion_app import agents as companion_agents
from tests.integration.temporal_app import agents

pytestmark = [
    pytest.mark.slow,
    pytest.mark.parametrize("runtime", ["temporal", "dbos"], indirect=True),
]

LIMIT = 90
"""Seconds for one scenario, its gateway's start and stop included."""

REACHED = {"temporal": 2.0, "dbos": 5.0}
"""Seconds an interrupt at the root may take to reach the grandchild's tool. Seed 002's
budget is 500 ms to the whole tree; the shared 2-core machine gets slack, and DBOS's
steps hear the stop request by reading their log."""


async def _builtin_store(agent_type: str, session_id: str) -> MemoryEventStore:
    """A store holding ``agent_type`` run to its end by the built-in runtime."""
    store = MemoryEventStore()
    async with AgentExecutor(store, list(agents.values())) as executor:
        await executor.service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        async for _ in executor.service.stream(session_id):
            pass
    return store


async def _open_workflows(runtime: Runtime, server: AgentServer, session_id: str) -> list[str]:
    """The open workflows of ``session_id``: DBOS's run ids, or Temporal's one (its id)."""
    if runtime.name == "dbos":
        from helix_agents.engines.dbos.routes import open_runs

        return list(await open_runs(session_id))
    service = server.executor.service
    return [session_id] if await service.workflow_open(session_id) else []  # type: ignore[attr-defined]


async def test_tools_and_local_child_write_the_builtin_runtimes_log(runtime: Runtime) -> None:
    """The same agent, run durably and on the built-in runtime, leaves the same logs.

    Event for event (times and run ids aside): the parent's (its tool, the
    child's segment with every forwarded chunk, its answer) and the child's.
    """
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store) as server:
            await server.start(RemoteStartRequest(session_id="s1", agent_type="boss", message="go"))
            output = await stream_to_end(server, "s1")
        builtin = await _builtin_store("boss", "s1")
    assert output == "one plus two is three and the helper said six"
    for session_id in ("s1", "s1-sub-h1"):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert comparable(log) == comparable(await builtin.read(session_id))
    child = project_state(await store.read("s1-sub-h1"))
    assert child.status == "completed"
    assert child.output == {"value": 6}


async def test_approval_answered_at_the_root_resumes_the_tree(runtime: Runtime) -> None:
    """The child's gated call pauses child and root, whose workflows wait durably for their
    resume (Temporal: a signal; DBOS: ``DBOS.recv``), open, nothing running; the approval
    given at the root is routed to the child, the waiting workflows are woken, and both runs
    go on to the end."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store) as server:
            await server.start(
                RemoteStartRequest(session_id="a1", agent_type="hitl_boss", message="pay")
            )
            await wait_for(store, "a1", lambda e: isinstance(e, Suspended))
            status = await server.get_status("a1")
            assert status.status == "paused"
            [entry] = status.pending_inputs
            assert entry.kind == "approval"
            for session_id in ("a1", "a1-sub-c1"):  # both workflows open, waiting
                waiting = [f"{session_id}#2"] if runtime.name == "dbos" else [session_id]
                assert await _open_workflows(runtime, server, session_id) == waiting
            answer = await server.submit_approval("a1", entry.tool_call_id, True)
            assert answer.resumed
            assert await stream_to_end(server, "a1") == "payment done"
            if runtime.name == "dbos":
                from dbos import DBOS

                for session_id in ("a1", "a1-sub-c1"):
                    # The paused workflow went on (woken by its message): no second one.
                    ran = await DBOS.list_workflows_async(workflow_id_prefix=f"{session_id}#")
                    assert [wf.workflow_id for wf in ran] == [f"{session_id}#2"]
    child = project_state(await store.read("a1-sub-c1"))
    assert child.status == "completed"
    assert child.output == {"value": 5}
    for session_id in ("a1", "a1-sub-c1"):
        assert seqs_contiguous(await store.read(session_id))


async def test_client_tool_answered_at_the_root_resumes_the_run(runtime: Runtime) -> None:
    """A client tool pauses the run (its workflow waits for its resume); the result
    submitted at the root is recorded and the run goes on with it."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store) as server:
            await server.start(RemoteStartRequest(session_id="ct", agent_type="asker", message="?"))
            await wait_for(store, "ct", lambda e: isinstance(e, Suspended))
            assert (await server.get_status("ct")).pending_client_tool_call_ids == ["k1"]
            answer = await server.submit_tool_result("ct", "k1", {"colour": "teal"})
            assert answer.resumed
            assert await stream_to_end(server, "ct") == "picked"
    log = await store.read("ct")
    assert seqs_contiguous(log)
    assert [r.message.content for r in results_of(log, "k1")] == ['{"colour":"teal"}']


async def test_interrupt_reaches_a_grandchild(runtime: Runtime) -> None:
    """Seed 002 'Immediate (Trigger)': an interrupt at the root stops the grandchild's nap (a
    60 s tool); every session of the tree ends interrupted and every tool_start has its
    tool_end. Temporal passes a stop signal from each workflow to its children; DBOS's steps
    hear the stop request in their log, and a stopping parent halts its children."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store, heartbeat_timeout=2.0) as server:
            await server.start(RemoteStartRequest(session_id="t1", agent_type="tree", message="go"))
            leaf = "t1-sub-m1-sub-l1"
            await wait_for(store, leaf, lambda e: isinstance(e, ToolStart) and e.tool_name == "nap")
            began = time.monotonic()
            await server.interrupt("t1", "enough")
            await wait_for(store, leaf, lambda e: isinstance(e, Interrupted))
            reached = time.monotonic() - began
            await wait_for(store, "t1", lambda e: isinstance(e, Interrupted))
            whole = time.monotonic() - began
            status = await server.get_status("t1")
    print(
        f"{runtime.name}: interrupt reached the grandchild in {reached * 1000:.0f} ms, "
        f"the root ended in {whole * 1000:.0f} ms"
    )
    assert reached < REACHED[runtime.name]
    assert status.status == "interrupted"
    for session_id in ("t1", "t1-sub-m1", leaf):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert project_state(log).status == "interrupted"
        starts = {e.tool_call_id for e in log if isinstance(e, ToolStart)}
        ends = {e.tool_call_id for e in log if isinstance(e, ToolEnd)}
        assert starts == ends  # every tool_start has its tool_end


async def test_abort_reaches_every_descendant(runtime: Runtime) -> None:
    """An abort at the root reaches every descendant: every session of the tree ends aborted
    (failed, with its error chunk), and every tool_start has its tool_end."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store) as server:
            await server.start(RemoteStartRequest(session_id="ab", agent_type="tree", message="go"))
            leaf = "ab-sub-m1-sub-l1"
            await wait_for(store, leaf, lambda e: isinstance(e, ToolStart) and e.tool_name == "nap")
            await server.abort("ab", "stop it")
            for session_id in ("ab", "ab-sub-m1", leaf):
                await wait_for(store, session_id, lambda e: isinstance(e, Aborted))
    for session_id in ("ab", "ab-sub-m1", leaf):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert project_state(log).status == "failed"
        starts = {e.tool_call_id for e in log if isinstance(e, ToolStart)}
        ends = {e.tool_call_id for e in log if isinstance(e, ToolEnd)}
        assert starts == ends


async def test_follow_up_turns(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A message sent to a running session is queued in the log (the service appends it)
    and the workflow's next model step takes it in, as on the built-in runtime; one sent
    after the end is a new turn (a new run of the session)."""
    monkeypatch.setenv("HELIX_TEMPORAL_MARKS", str(tmp_path))
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store) as server:
            await server.start(
                RemoteStartRequest(session_id="fu", agent_type="marker_boss", message="go")
            )
            await wait_for(store, "fu", lambda e: isinstance(e, CustomChunk))
            sent = await server.send_message(
                RemoteMessageRequest(session_id="fu", message="and then?", message_id="m-1")
            )
            assert sent.queued
            assert await stream_to_end(server, "fu") == "marked and done"
            await server.start(
                RemoteStartRequest(session_id="e1", agent_type="echo", message="one")
            )
            assert await stream_to_end(server, "e1") == "echo: one"
            await server.send_message(RemoteMessageRequest(session_id="e1", message="two"))
            last = (await store.read("e1"))[-1].seq
            assert await stream_to_end(server, "e1", last - 1) == "echo: two"
    state = project_state(await store.read("fu"))
    said = [m.content for m in state.messages if isinstance(m, UserMessage)]
    assert said == ["go", "and then?"]
    assert any(isinstance(e, StepStarted) and e.taken == 1 for e in await store.read("fu"))
    for session_id in ("fu", "e1"):
        assert seqs_contiguous(await store.read(session_id))


async def test_a_tools_policy_bounds_its_step(
    runtime: Runtime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ToolPolicy(timeout, max_attempts) is the tool's step's (Temporal: its activity's):
    each attempt is cut at the timeout and retried; when the attempts are spent, the call
    gets an error result the model reads, and the run goes on."""
    from helix_agents.temporal import ToolPolicy

    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("HELIX_TEMPORAL_MARKS", str(marks))
    store = MemoryEventStore()
    policy = ToolPolicy(timeout=0.5, max_attempts=2, initial_interval=0.1)
    with anyio.fail_after(LIMIT):
        async with runtime.server(
            agents, store, tool_policies={"mark": policy}, heartbeat_timeout=2.0
        ) as server:
            await server.start(
                RemoteStartRequest(session_id="p1", agent_type="marker_boss", message="go")
            )
            assert await stream_to_end(server, "p1") == "marked and done"
    log = await store.read("p1")
    assert seqs_contiguous(log)
    [result] = results_of(log, "m1")
    assert "tool failed" in result.message.content
    runs = sorted([path.name async for path in anyio.Path(marks).iterdir()])
    assert runs == ["m1.1", "m1.2"]  # two attempts, as the policy says


def test_the_worker_refuses_what_it_cannot_run(runtime: Runtime) -> None:
    """A tool policy naming no tool is refused at construction (UsageError). Workspaces and
    expiring inputs run (``test_durable_workspaces.py``)."""
    from helix_agents.temporal import ToolPolicy

    llm = ScriptedLLM(["hi"])
    with pytest.raises(UsageError, match="no agent has"):
        runtime.worker_in_process(
            [define_agent("plain", llm=llm)],
            MemoryEventStore(),
            tool_policies={"nope": ToolPolicy()},
        )


async def test_companions_blocking_and_non_blocking(runtime: Runtime) -> None:
    """Seed 004's companions: a blocking spawn returns the child's output inline, a
    non-blocking one runs on its own (its own workflow); every child session completes and
    the parent's follow-up turn gets the pushed outcome, each once."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(companion_agents, store) as server:
            await server.start(RemoteStartRequest(session_id="cp", agent_type="lead", message="go"))
            first = await stream_to_end(server, "cp")
            for child in ("cp-agent-slow", "cp-agent-bg"):
                await wait_for(store, child, lambda e: isinstance(e, Completed))
            await server.send_message(RemoteMessageRequest(session_id="cp", message="more"))
            last = (await store.read("cp"))[-1].seq
            second = await stream_to_end(server, "cp", last)
    assert first == 'turn 1: {"name":"bg","status":"running"}'  # as on the built-in runtime
    assert second == "turn 2: more"
    assert project_state(await store.read("cp-agent-slow")).output == {"text": "answered s"}
    assert project_state(await store.read("cp-agent-bg")).output == {"text": "answered b"}
    log = await store.read("cp")
    assert seqs_contiguous(log)
    inline = [
        e.message.content
        for e in log
        if isinstance(e, MessageAppended) and isinstance(e.message, ToolResultMessage)
    ]
    assert any("answered s" in text for text in inline)  # the blocking spawn's output, inline
    delivered = [e.sub_session_id for e in log if isinstance(e, CompletionDelivered)]
    assert sorted(delivered) == ["cp-agent-bg", "cp-agent-slow"]  # each outcome once


async def test_a_paused_run_past_its_wait_ends_and_the_answer_starts_a_new_one(
    runtime: Runtime,
) -> None:
    """``paused_wait``: a paused workflow waits that long, then ends (Temporal's result:
    ``paused``; the session stays paused in the log); the answer that comes later runs in a
    new workflow of the session."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with runtime.server(agents, store, paused_wait=0.5) as server:
            await server.start(RemoteStartRequest(session_id="pw", agent_type="asker", message="?"))
            await wait_for(store, "pw", lambda e: isinstance(e, Suspended))
            if runtime.name == "temporal":
                from temporalio.client import Client

                assert runtime.dev is not None
                client = await Client.connect(runtime.dev.address)
                assert await client.get_workflow_handle("pw").result() == "paused"
            else:
                # DBOS's state offers no event to wait on: polled, bounded by fail_after.
                while await _open_workflows(runtime, server, "pw"):  # noqa: ASYNC110
                    await anyio.sleep(0.05)
            assert (await server.get_status("pw")).status == "paused"
            answer = await server.submit_tool_result("pw", "k1", {"colour": "teal"})
            assert answer.resumed
            assert await stream_to_end(server, "pw") == "picked"
            if runtime.name == "dbos":
                from dbos import DBOS

                ran = await DBOS.list_workflows_async(workflow_id_prefix="pw#")
                assert len(ran) == 2  # the one that waited and ended, and the answer's
    log = await store.read("pw")
    assert seqs_contiguous(log)
    assert [r.message.content for r in results_of(log, "k1")] == ['{"colour":"teal"}']
