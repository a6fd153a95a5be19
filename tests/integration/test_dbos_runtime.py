"""Agents run as DBOS workflows (SQLite system database), against the built-in runtime."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest
from dbos import DBOS

from helix_agents import AgentExecutor, define_agent
from helix_agents.dbos import DbosOptions, DbosWorker, ToolPolicy, dbos_server
from helix_agents.engines.dbos.routes import open_runs
from helix_agents.errors import UsageError
from helix_agents.events import (
    Aborted,
    CustomChunk,
    Interrupted,
    StepStarted,
    Suspended,
    ToolEnd,
    ToolStart,
)
from helix_agents.log import project_state
from helix_agents.messages import UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteMessageRequest, RemoteStartRequest
from helix_agents.stores import MemoryEventStore
from tests.integration._temporal_kit import (
    comparable,
    results_of,
    seqs_contiguous,
    stream_to_end,
    wait_for,
)
from tests.integration.temporal_app import agents

pytestmark = [pytest.mark.slow]


def options_in(tmp_path: Path, **knobs: object) -> DbosOptions:
    """Options with a system database of the test's own."""
    url = f"sqlite:///{tmp_path / 'dbos.sqlite'}"
    return DbosOptions(system_database=url, **knobs)  # type: ignore[arg-type]


async def _builtin_store(agent_type: str, session_id: str) -> MemoryEventStore:
    store = MemoryEventStore()
    async with AgentExecutor(store, list(agents.values())) as executor:
        await executor.service.start(
            RemoteStartRequest(session_id=session_id, agent_type=agent_type, message="go")
        )
        async for _ in executor.service.stream(session_id):
            pass
    return store


async def test_tools_and_local_child_write_the_builtin_runtimes_log(tmp_path: Path) -> None:
    """The same agent on DBOS and on the built-in runtime leaves the same logs."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with DbosWorker(agents.values(), store, options_in(tmp_path)) as worker:
            service = worker.executor.service
            await service.start(
                RemoteStartRequest(session_id="s1", agent_type="boss", message="go")
            )
            output = await stream_to_end(service, "s1")  # type: ignore[arg-type]
        builtin = await _builtin_store("boss", "s1")
    assert output == "one plus two is three and the helper said six"
    for session_id in ("s1", "s1-sub-h1"):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert comparable(log) == comparable(await builtin.read(session_id))
    assert project_state(await store.read("s1-sub-h1")).output == {"value": 6}


async def test_approval_answered_at_the_root_resumes_the_tree(tmp_path: Path) -> None:
    """The child's gated call pauses child and root, whose workflows wait durably for their
    resume message (DBOS.recv); the approval given at the root is routed to the child, the
    waiting workflows are woken, and both runs go on to the end."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path)) as server:
            await server.start(
                RemoteStartRequest(session_id="a1", agent_type="hitl_boss", message="pay")
            )
            await wait_for(store, "a1", lambda e: isinstance(e, Suspended))
            status = await server.get_status("a1")
            assert status.status == "paused"
            [entry] = status.pending_inputs
            assert entry.kind == "approval"
            for session_id in ("a1", "a1-sub-c1"):  # both workflows open, waiting
                assert await open_runs(session_id) == [f"{session_id}#2"]
            answer = await server.submit_approval("a1", entry.tool_call_id, True)
            assert answer.resumed
            assert await stream_to_end(server, "a1") == "payment done"
            for session_id in ("a1", "a1-sub-c1"):
                # The paused workflow went on (woken by its message): no second one.
                ran = await DBOS.list_workflows_async(workflow_id_prefix=f"{session_id}#")
                assert [wf.workflow_id for wf in ran] == [f"{session_id}#2"]
    child = project_state(await store.read("a1-sub-c1"))
    assert child.status == "completed"
    assert child.output == {"value": 5}
    for session_id in ("a1", "a1-sub-c1"):
        assert seqs_contiguous(await store.read(session_id))


async def test_client_tool_answered_at_the_root_resumes_the_run(tmp_path: Path) -> None:
    """A client tool pauses the run; the result submitted at the root goes on with it."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path)) as server:
            await server.start(RemoteStartRequest(session_id="ct", agent_type="asker", message="?"))
            await wait_for(store, "ct", lambda e: isinstance(e, Suspended))
            answer = await server.submit_tool_result("ct", "k1", {"colour": "teal"})
            assert answer.resumed
            assert await stream_to_end(server, "ct") == "picked"
    log = await store.read("ct")
    assert seqs_contiguous(log)
    assert [r.message.content for r in results_of(log, "k1")] == ['{"colour":"teal"}']


async def test_interrupt_reaches_a_grandchild(tmp_path: Path) -> None:
    """An interrupt at the root reaches the grandchild's running tool (each run's steps hear
    the stop request in their log; the stopping parent halts its children); every session of
    the tree ends interrupted and every tool_start has its tool_end."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path)) as server:
            await server.start(RemoteStartRequest(session_id="t1", agent_type="tree", message="go"))
            leaf = "t1-sub-m1-sub-l1"
            await wait_for(store, leaf, lambda e: isinstance(e, ToolStart) and e.tool_name == "nap")
            began = time.monotonic()
            await server.interrupt("t1", "enough")
            await wait_for(store, leaf, lambda e: isinstance(e, Interrupted))
            reached = time.monotonic() - began
            await wait_for(store, "t1", lambda e: isinstance(e, Interrupted))
            status = await server.get_status("t1")
    print(f"interrupt reached the grandchild in {reached * 1000:.0f} ms")
    assert reached < 5.0
    assert status.status == "interrupted"
    for session_id in ("t1", "t1-sub-m1", leaf):
        log = await store.read(session_id)
        assert seqs_contiguous(log)
        assert project_state(log).status == "interrupted"
        starts = {e.tool_call_id for e in log if isinstance(e, ToolStart)}
        ends = {e.tool_call_id for e in log if isinstance(e, ToolEnd)}
        assert starts == ends


async def test_abort_reaches_every_descendant(tmp_path: Path) -> None:
    """An abort at the root ends every session of the tree aborted (failed)."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path)) as server:
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


async def test_follow_up_turns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A message sent while running is taken at the next step; one sent after the end is a
    new turn (a new workflow of the session)."""
    monkeypatch.setenv("HELIX_TEMPORAL_MARKS", str(tmp_path))
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path)) as server:
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
    assert [m.content for m in state.messages if isinstance(m, UserMessage)] == ["go", "and then?"]
    assert any(isinstance(e, StepStarted) and e.taken == 1 for e in await store.read("fu"))
    for session_id in ("fu", "e1"):
        assert seqs_contiguous(await store.read(session_id))


async def test_a_tools_policy_bounds_its_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ToolPolicy(timeout, max_attempts) is the tool step's: each attempt is cut at the
    timeout and retried; when spent, the call gets an error result and the run goes on."""
    marks = tmp_path / "marks"
    marks.mkdir()
    monkeypatch.setenv("HELIX_TEMPORAL_MARKS", str(marks))
    store = MemoryEventStore()
    policy = ToolPolicy(timeout=0.5, max_attempts=2, initial_interval=0.1)
    options = options_in(tmp_path, tool_policies={"mark": policy})
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options) as server:
            await server.start(
                RemoteStartRequest(session_id="p1", agent_type="marker_boss", message="go")
            )
            assert await stream_to_end(server, "p1") == "marked and done"
    log = await store.read("p1")
    assert seqs_contiguous(log)
    [result] = results_of(log, "m1")
    assert "tool failed" in result.message.content
    assert sorted(path.name for path in marks.iterdir()) == ["m1.1", "m1.2"]


def test_worker_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    """A tool policy naming no tool is refused at construction (UsageError). Workspaces and
    expiring inputs run (tests/integration/test_dbos_workspaces.py)."""
    llm = ScriptedLLM(["hi"])
    with pytest.raises(UsageError, match="no agent has"):
        DbosWorker(
            [define_agent("plain", llm=llm)],
            MemoryEventStore(),
            DbosOptions(tool_policies={"nope": ToolPolicy()}),
        )


async def test_an_interrupt_of_a_paused_root_ends_its_waiting_workflow(tmp_path: Path) -> None:
    """A tree paused for an approval is interrupted at the root: the root ends interrupted
    and its paused workflow, woken, ends; the paused child stays paused (as on the built-in
    runtime: it can still be answered), its workflow still waiting."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path)) as server:
            await server.start(
                RemoteStartRequest(session_id="pi", agent_type="hitl_boss", message="pay")
            )
            await wait_for(store, "pi", lambda e: isinstance(e, Suspended))
            assert await open_runs("pi") == ["pi#2"]
            await server.interrupt("pi", "never mind")
            await wait_for(store, "pi", lambda e: isinstance(e, Interrupted))
            # DBOS's state offers no event to wait on: polled, bounded by fail_after.
            while await open_runs("pi"):  # noqa: ASYNC110
                await anyio.sleep(0.05)
            assert await open_runs("pi-sub-c1") == ["pi-sub-c1#2"]
    log = await store.read("pi")
    assert seqs_contiguous(log)
    assert project_state(log).status == "interrupted"
    assert project_state(await store.read("pi-sub-c1")).status == "paused"


async def test_a_paused_run_past_its_wait_ends_and_the_answer_starts_a_new_one(
    tmp_path: Path,
) -> None:
    """``paused_wait``: a paused workflow waits that long, then ends (the session stays
    paused in the log); the answer that comes later runs in a new workflow of the session."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options_in(tmp_path, paused_wait=0.5)) as server:
            await server.start(RemoteStartRequest(session_id="pw", agent_type="asker", message="?"))
            await wait_for(store, "pw", lambda e: isinstance(e, Suspended))
            # DBOS's state offers no event to wait on: polled, bounded by fail_after.
            while await open_runs("pw"):  # noqa: ASYNC110
                await anyio.sleep(0.05)
            assert (await server.get_status("pw")).status == "paused"
            answer = await server.submit_tool_result("pw", "k1", {"colour": "teal"})
            assert answer.resumed
            assert await stream_to_end(server, "pw") == "picked"
            ran = await DBOS.list_workflows_async(workflow_id_prefix="pw#")
    assert len(ran) == 2  # the one that waited and ended, and the answer's
    log = await store.read("pw")
    assert seqs_contiguous(log)
    assert [r.message.content for r in results_of(log, "k1")] == ['{"colour":"teal"}']


async def test_a_second_dbos_in_the_process_is_refused_and_the_first_goes_on(
    tmp_path: Path,
) -> None:
    """One DBOS per process: a second worker entered while one runs is refused, and the
    refusal leaves the running one's DBOS launched, its sessions running to their end."""
    store = MemoryEventStore()
    with anyio.fail_after(60):
        async with DbosWorker(agents.values(), store, options_in(tmp_path)) as worker:
            second = DbosWorker(agents.values(), store, options_in(tmp_path / "other"))
            with pytest.raises(UsageError, match="one per process"):
                await second.__aenter__()
            service = worker.executor.service
            await service.start(
                RemoteStartRequest(session_id="one", agent_type="boss", message="go")
            )
            output = await stream_to_end(service, "one")  # type: ignore[arg-type]
    assert output == "one plus two is three and the helper said six"
