"""``companion__waitForResult`` on DBOS: a durable sleep, woken by the companion's notice.

Seed 004's DBOS row: the wait is a durable ``DBOS.recv`` in the parent's
workflow (no step held while it waits), the companion's run wakes it when it
ends, and a crash mid-wait keeps the call's original deadline.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from _serve_process import ServeProcess
from dbos import DBOS
from servers import serve

from helix_agents import PersistentAgent, define_agent
from helix_agents.dbos import DbosOptions, dbos_server
from helix_agents.engines.dbos.routes import open_runs
from helix_agents.events import Completed, Interrupted, MessageAppended
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage
from helix_agents.protocol import EndEvent, RemoteStartRequest
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from helix_agents.transports import HttpRemoteAgentTransport
from tests.integration._temporal_kit import results_of, seqs_contiguous, stream_to_end, wait_for
from tests.integration.companion_wait_app import agents, napper, quick, waiter

pytestmark = [pytest.mark.slow]

CHILD = "-agent-n"


def _start(session_id: str) -> RemoteStartRequest:
    return RemoteStartRequest(session_id=session_id, agent_type="waiter", message="wait")


def _waiting(event: Any) -> bool:
    """The parent's turn that calls ``waitForResult``."""
    return (
        isinstance(event, MessageAppended)
        and isinstance(event.message, AssistantMessage)
        and any(call.name == "companion__waitForResult" for call in event.message.tool_calls)
    )


async def test_the_wait_ends_on_the_companions_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The companion naps 1 s under a 30 s timeout: the wait ends as it completes (its run
    sends the notice), as a DBOS.recv of the parent's workflow between two looks."""
    monkeypatch.setenv("HELIX_WAIT_NAP", "1")
    store = MemoryEventStore()
    options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options) as server:
            await server.start(
                RemoteStartRequest(session_id="wn", agent_type="waiter", message="?")
            )
            asked = await wait_for(store, "wn", _waiting)
            output = await stream_to_end(server, "wn")
            [workflow] = await DBOS.list_workflows_async(workflow_id_prefix="wn#")
            steps = await DBOS.list_workflow_steps_async(workflow.workflow_id)
    log = await store.read("wn")
    [result] = results_of(log, "w1")
    waited = result.ts - asked.ts
    print(f"the wait ended {waited:.2f} s after the call (the companion naps 1 s)")
    assert waited < 10.0  # woken by the notice, far before the 30 s timeout
    assert '"status":"completed"' in result.message.content
    assert "rested well" in output
    names = [step["function_name"] for step in steps]
    begin = names.index("helix_wait_begin")
    # The sleep is DBOS's (its end recorded), between two looks: no step waits.
    assert names[begin + 1 : begin + 4] == ["DBOS.recv", "DBOS.sleep", "helix_wait_look"]
    assert seqs_contiguous(log)
    assert project_state(await store.read("wn" + CHILD)).status == "completed"


async def test_an_interrupt_ends_the_sleeping_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt of the parent wakes its sleeping wait: the parent ends interrupted at
    once; the companion, running on its own (not a blocking spawn), keeps running."""
    monkeypatch.setenv("HELIX_WAIT_NAP", "60")
    store = MemoryEventStore()
    options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
    with anyio.fail_after(60):
        async with dbos_server(agents, store, options) as server:
            await server.start(
                RemoteStartRequest(session_id="wi", agent_type="waiter", message="?")
            )
            await wait_for(store, "wi", _waiting)
            await _began(tmp_path / "dbos.sqlite")
            began = time.monotonic()
            await server.interrupt("wi", "enough")
            await wait_for(store, "wi", lambda e: isinstance(e, Interrupted))
            took = time.monotonic() - began
            await _closed("wi")  # its workflow returns after recording the end
            child = project_state(await store.read("wi" + CHILD))
    print(f"the interrupted wait ended in {took * 1000:.0f} ms")
    assert took < 3.0
    assert child.status == "running"
    assert results_of(await store.read("wi"), "w1") == []


async def _recorded(database: Path, step_name: str) -> float | None:
    """When DBOS recorded a step named ``step_name`` (its start, epoch seconds), or None."""

    def read() -> float | None:
        with sqlite3.connect(database) as db:
            row = db.execute(
                "select started_at_epoch_ms from operation_outputs where function_name = ?",
                (step_name,),
            ).fetchone()
        return None if row is None or row[0] is None else row[0] / 1000

    try:
        return await anyio.to_thread.run_sync(read)
    except sqlite3.OperationalError:  # not created yet, or locked a moment
        return None


async def _began(database: Path) -> float:
    """When the wait's first look was recorded (polled: DBOS's table is all there is)."""
    for _ in range(600):
        began = await _recorded(database, "helix_wait_begin")
        if began is not None:
            return began
        await anyio.sleep(0.05)
    raise AssertionError("the wait never began")


async def _closed(session_id: str) -> None:
    """Return once no workflow of ``session_id`` is open (polled: DBOS has no event for it)."""
    for _ in range(600):
        if not await open_runs(session_id):
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"a workflow of {session_id} stays open")


async def _to_end(client: HttpRemoteAgentTransport, session_id: str) -> Any:
    async for event in client.stream(session_id, 0):
        if isinstance(event, EndEvent):
            return event.output
    raise AssertionError("no end event")


async def test_killed_mid_wait_the_restart_keeps_the_original_deadline(tmp_path: Path) -> None:
    """SIGKILL the process 2 s into a 12 s wait (the companion naps far longer); started
    again, DBOS recovers the parent's workflow, whose recorded sleep ends at the first
    deadline (not a fresh 12 s from the restart): one ``timeout`` result, seqs 1..N."""
    system = tmp_path / "dbos.sqlite"
    gateway = ServeProcess(
        tmp_path,
        "tests.integration.companion_wait_app:agents",
        "--dbos",
        f"sqlite:///{system}",
        env={"HELIX_WAIT_NAP": "600", "HELIX_WAIT_MS": "12000"},
    )
    await gateway.start()
    store = SqliteEventStore(tmp_path / "serve.db")
    try:
        async with HttpRemoteAgentTransport(gateway.url) as client:
            with anyio.fail_after(120):
                await client.start(
                    RemoteStartRequest(session_id="wk", agent_type="waiter", message="?")
                )
                await wait_for(store, "wk", _waiting)
                began = await _began(system)
                await anyio.sleep(max(0.0, began + 2.0 - time.time()))  # the crash point
                await gateway.kill()
                await gateway.start()
                restarted = time.time()
                output = await _to_end(client, "wk")
        log = await store.read("wk")
        [result] = results_of(log, "w1")
        print(
            f"the wait ended {result.ts - began:.2f} s after it began "
            f"(deadline 12 s; restarted at {restarted - began:.2f} s)"
        )
        assert '"status":"timeout"' in result.message.content
        assert "timeout" in output
        # The first deadline: 12 s after the wait began. A fresh timeout from the
        # restart would end it at least 12 s after the restart (2 s + startup later).
        assert 11.5 <= result.ts - began < restarted - began + 12.0 - 0.5
        assert result.ts - began < 15.0
        assert seqs_contiguous(log)
        assert project_state(log).status == "completed"
        child = await store.read("wk" + CHILD)
        assert not any(isinstance(event, Completed) for event in child)
    except BaseException:
        print(gateway.output())
        raise
    finally:
        await store.close()
        await gateway.stop()


async def test_a_remote_companion_is_followed_until_its_turn_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A companion behind HTTP (another server: no notice from it): the look follows its
    stream, within the checkpointed deadline, and answers when its turn ends."""
    monkeypatch.setenv("HELIX_WAIT_NAP", "1")
    child_server = AgentServer([napper], MemoryEventStore())
    async with (
        child_server,
        serve(create_http_app(child_server)) as url,
        HttpRemoteAgentTransport(url) as transport,
    ):
        remote_waiter = define_agent(
            "waiter",
            llm=waiter.llm,
            persistent_agents=[
                PersistentAgent(napper, mode="non-blocking", transport=transport),
                PersistentAgent(quick),
            ],
        )
        store = MemoryEventStore()
        options = DbosOptions(system_database=f"sqlite:///{tmp_path / 'dbos.sqlite'}")
        with anyio.fail_after(60):
            async with dbos_server([remote_waiter, quick], store, options) as server:
                await server.start(_start("wr"))
                asked = await wait_for(store, "wr", _waiting)
                output = await stream_to_end(server, "wr")
                [workflow] = await DBOS.list_workflows_async(workflow_id_prefix="wr#")
                steps = await DBOS.list_workflow_steps_async(workflow.workflow_id)
    log = await store.read("wr")
    [result] = results_of(log, "w1")
    assert '"status":"completed"' in result.message.content
    assert result.ts - asked.ts < 10.0  # followed to its end, far before the 30 s timeout
    assert "rested well" in output
    names = [step["function_name"] for step in steps]
    begin = names.index("helix_wait_begin")
    assert names[begin + 1] == "helix_wait_look"  # no sleep: the look followed it
    assert seqs_contiguous(log)
