"""Memory in real runs: tools write and read it through ``ctx.memory`` across sessions.

A real ``AgentExecutor`` (or ``AgentServer`` on each runtime, or two ``serve``
processes on one SQLite file) with the scripted keeper of ``memory_app.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import msgspec
import pytest

from helix_agents import AgentExecutor, ToolContext, define_agent, define_tool
from helix_agents.events import Event, MemoryRead, MemoryWritten, Principal, ToolEnd
from helix_agents.memory import MemoryItem, MemoryStore, memory_of
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore, SqliteEventStore
from tests.integration._durable_kit import Runtime
from tests.integration._serve_process import ServeProcess
from tests.integration._temporal_kit import stream_to_end
from tests.integration.memory_app import PREFS, Lang, keeper, recall, script

LIMIT = 30.0
TARGET = "tests.integration.memory_app:agents"


def _of(kind: type[Any], log: Sequence[Event]) -> list[Any]:
    return [event for event in log if isinstance(event, kind)]


def _answer(log: Sequence[Event]) -> Any:
    """The last tool result of a log, decoded."""
    return _of(ToolEnd, log)[-1].result


async def _turn(
    executor: AgentExecutor, session_id: str, message: str, owner: Principal | None = None
) -> Any:
    """Run one turn (a new session, or a follow-up) to its end; the tool's result."""
    if await executor.store.read(session_id):
        handle = await executor.send_message(session_id, message)
        await handle.result()
    else:
        await executor.service.start(
            RemoteStartRequest(
                session_id=session_id, agent_type="keeper", message=message, owner=owner
            )
        )
        async for _ in executor.service.stream(session_id):
            pass
    return _answer(await executor.store.read(session_id))


async def test_a_session_reads_what_another_wrote_and_the_logs_record_both(store: Any) -> None:
    """Read-after-write across sessions, on each store backend; each access is in its log."""
    agent = keeper()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            wrote = await _turn(executor, "a", "write fr")
            read = await _turn(executor, "b", "read")
            found = await _turn(executor, "c", "find FR")
    assert wrote == {"version": 1, "namespace": list(PREFS)}  # relative to the tenant
    assert read == {"found": {"lang": "fr"}, "version": 1}
    assert found == {"keys": [[*PREFS, "language"]]}
    # No auth: the default tenant "_" comes first in the store and in the log.
    memory = memory_of(store)
    assert memory is not None
    stored = await memory.get(("_", *PREFS), "language")
    assert stored is not None
    assert stored.value == {"lang": "fr"}
    [written] = _of(MemoryWritten, await store.read("a"))
    assert (written.namespace, written.key, written.value, written.version) == (
        ("_", *PREFS),
        "language",
        {"lang": "fr"},
        1,
    )
    assert written.tool_call_id == _of(ToolEnd, await store.read("a"))[0].tool_call_id
    [got] = _of(MemoryRead, await store.read("b"))
    assert (got.op, got.namespace, got.key) == ("get", ("_", *PREFS), "language")
    assert [item.value for item in got.items] == [{"lang": "fr"}]
    [searched] = _of(MemoryRead, await store.read("c"))
    assert (searched.op, searched.namespace, searched.query) == ("search", ("_", "user-7"), "FR")
    assert [item.key for item in searched.items] == ["language"]
    assert _of(MemoryRead, await store.read("a")) == []


async def test_two_processes_on_one_sqlite_file_share_memory(tmp_path: Any) -> None:
    """Two hosts: two executors, each with its own store on one SQLite file."""
    path = tmp_path / "shared.db"
    one, two = SqliteEventStore(path), SqliteEventStore(path)
    try:
        with anyio.fail_after(LIMIT):
            async with AgentExecutor(one, [keeper()]) as first:
                await _turn(first, "a", "write de")
            async with AgentExecutor(two, [keeper()]) as second:
                read = await _turn(second, "b", "read")
                deleted = await _turn(second, "c", "forget")
            async with AgentExecutor(one, [keeper()]) as first:
                after = await _turn(first, "d", "read")
    finally:
        await one.close()
        await two.close()
    assert read == {"found": {"lang": "de"}, "version": 1}
    assert deleted == {"deleted": True}
    assert after == {"found": None}


async def test_a_tool_reaches_only_its_tenants_items() -> None:
    store = MemoryEventStore()
    acme, globex = Principal(tenant="acme", user="ada"), Principal(tenant="globex", user="bob")
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [keeper()]) as executor:
            await _turn(executor, "a1", "write fr", acme)
            other = await _turn(executor, "g1", "read", globex)
            await _turn(executor, "g2", "write en", globex)
            mine = await _turn(executor, "a2", "read", acme)
            unowned = await _turn(executor, "n1", "read")  # no owner: the default tenant
    assert other == {"found": None}
    assert mine == {"found": {"lang": "fr"}, "version": 1}
    assert unowned == {"found": None}
    memory = memory_of(store)
    assert memory is not None
    items = await memory.search((), limit=100)
    assert sorted((item.namespace, item.value["lang"]) for item in items) == [
        (("acme", *PREFS), "fr"),
        (("globex", *PREFS), "en"),
    ]
    [read] = _of(MemoryRead, await store.read("g1"))
    assert read.namespace == ("globex", *PREFS)
    assert read.items == []


async def test_a_fork_sees_writes_before_its_point_and_the_origins_later_ones() -> None:
    """The fork copies the origin's memory_written; memory is shared, so the fork's live reads
    see the store as it is now, the origin's write after the fork point included."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [keeper()]) as executor:
            await _turn(executor, "o", "write fr")
            point = len(await store.read("o"))
            fork = await executor.fork("o", point, new_session_id="f", run=False)
            before = await _turn(executor, "f", "read")
            await _turn(executor, "o", "write it")  # the origin, after the fork point
            after = await _turn(executor, "f", "read")
    assert fork.session_id == "f"
    branch = await store.read("f")
    [copied] = _of(MemoryWritten, branch)
    assert (copied.session_id, copied.value, copied.version) == ("f", {"lang": "fr"}, 1)
    assert before == {"found": {"lang": "fr"}, "version": 1}
    assert after == {"found": {"lang": "it"}, "version": 2}
    assert [event.items[0].version for event in _of(MemoryRead, branch)] == [1, 2]


class _StallAfterPut:
    """A memory store whose first put lands, then never returns (the process dies there)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner
        self.landed = anyio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def put(self, *args: Any, **kwargs: Any) -> MemoryItem:
        item = await self.inner.put(*args, **kwargs)
        self.landed.set()
        await anyio.sleep_forever()
        return item


class _StallTool:
    """``remember``, whose first call stalls after its put is recorded (the process dies there)."""

    def __init__(self) -> None:
        self.recorded = anyio.Event()
        self.calls = 0

    async def execute(self, args: Lang, ctx: ToolContext) -> Any:
        """The tool's ``execute``."""
        self.calls += 1
        item = await ctx.memory.put(PREFS, "language", {"lang": args.lang})
        if self.calls == 1:
            self.recorded.set()
            await anyio.sleep_forever()
        return {"version": item.version}


@pytest.mark.parametrize("where", ["after recording", "before recording"])
async def test_a_call_run_again_after_a_crash_does_not_write_twice(
    tmp_path: Any, where: str
) -> None:
    """The call's write carries (tool call id, n): its rerun writes nothing new, and the
    log ends with the write recorded once."""
    store = SqliteEventStore(tmp_path / "s.db")
    memory = memory_of(store)
    assert memory is not None
    tool = _StallTool()
    stall = _StallAfterPut(memory)
    stalling = define_tool("remember", "remember a language", Lang, tool.execute)
    agent = define_agent("keeper", llm=ScriptedLLM(script), tools=[stalling, recall], max_steps=4)
    try:
        with anyio.fail_after(LIMIT):
            with anyio.CancelScope() as process:
                given: Any = stall if where == "before recording" else memory
                async with AgentExecutor(store, [agent], memory=given) as executor:
                    await executor.service.start(
                        RemoteStartRequest(session_id="s", agent_type="keeper", message="write fr")
                    )
                    await (stall.landed if where == "before recording" else tool.recorded).wait()
                    process.cancel()  # no interrupt recorded: the log says "running"
            async with AgentExecutor(store, [agent]) as executor:
                assert await executor.recover() == ["s"]
                await executor.wait_idle("s")
            log = await store.read("s")
            item = await memory.get(("_", *PREFS), "language")
    finally:
        await store.close()
    assert item is not None
    assert item.version == 1  # written once
    written = _of(MemoryWritten, log)
    assert [(event.version, event.write) for event in written] == [(1, 0)]
    assert _answer(log) == {"version": 1}


@pytest.mark.parametrize(
    "runtime", ["builtin", "temporal", "dbos"], indirect=True, ids=lambda name: name
)
async def test_ctx_memory_works_on_each_runtime(runtime: Runtime) -> None:
    """A tool's put and another session's get, run by the built-in, Temporal and DBOS workers."""
    store = MemoryEventStore()
    acme = Principal(tenant="acme")
    with anyio.fail_after(60):
        async with runtime.server([keeper()], store) as server:
            for session_id, message in (("w", "write fr"), ("r", "read")):
                await server.start(
                    RemoteStartRequest(
                        session_id=session_id, agent_type="keeper", message=message, owner=acme
                    )
                )
                await stream_to_end(server, session_id)
    assert _answer(await store.read("r")) == {"found": {"lang": "fr"}, "version": 1}
    [written] = _of(MemoryWritten, await store.read("w"))
    assert written.namespace == ("acme", *PREFS)
    assert len(_of(MemoryRead, await store.read("r"))) == 1
    assert msgspec.json.encode(written)  # the record is plain JSON


async def _run_over_http(client: httpx.AsyncClient, session_id: str, message: str) -> None:
    """Start ``keeper`` on ``message`` and read its stream to its end event."""
    body = {"sessionId": session_id, "agentType": "keeper", "message": message}
    started = await client.post("/start", json=body)
    assert started.status_code == 200, started.text
    async with client.stream("GET", "/sse", params={"sessionId": session_id}) as stream:
        async for line in stream.aiter_lines():
            if line == "event: end":
                return
            assert line != "event: error", session_id
    raise AssertionError(f"{session_id}: the stream ended without end")


@pytest.mark.slow
async def test_two_serve_processes_on_one_sqlite_file_share_memory(tmp_path: Path) -> None:
    """Two hosts: ``serve`` twice on one file; a session on one reads what one on the other
    wrote, and the second's ``GET /memory`` shows it."""
    db = tmp_path / "shared.db"
    one = ServeProcess(tmp_path / "one", TARGET, db=db, log=tmp_path / "one.log")
    two = ServeProcess(tmp_path / "two", TARGET, db=db, log=tmp_path / "two.log")
    try:
        with anyio.fail_after(90):
            await one.start()
            await two.start()
            async with (
                httpx.AsyncClient(base_url=one.url, timeout=15) as first,
                httpx.AsyncClient(base_url=two.url, timeout=15) as second,
            ):
                await _run_over_http(first, "w", "write pt")
                await _run_over_http(second, "r", "read")
                listed = (await second.get("/memory", params={"namespace": "user-7"})).json()
    finally:
        for server in (one, two):
            if server.process is not None:
                await server.stop()
    store = SqliteEventStore(db)
    try:
        assert _answer(await store.read("r")) == {"found": {"lang": "pt"}, "version": 1}
        [written] = _of(MemoryWritten, await store.read("w"))
        assert written.namespace == ("_", *PREFS)
    finally:
        await store.close()
    assert [(item["namespace"], item["key"], item["value"]) for item in listed["items"]] == [
        (list(PREFS), "language", {"lang": "pt"})
    ]


class _NoMemory:
    """An event store that offers no memory store (a user's own store, say)."""

    def __init__(self, inner: MemoryEventStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "memory_store":
            raise AttributeError(name)
        return getattr(self.inner, name)


async def _bad_put(args: Lang, ctx: ToolContext) -> Any:
    return await ctx.memory.put(PREFS, "language", ["not", "an", "object"])  # type: ignore[arg-type]


async def test_refusals_are_the_tools_error_results_and_write_nothing() -> None:
    """A bad value, and an executor without a memory store: the model reads why."""
    store = MemoryEventStore()
    bad = define_tool("remember", "remember", Lang, _bad_put)
    agent = define_agent("keeper", llm=ScriptedLLM(script), tools=[bad, recall], max_steps=4)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            await _turn(executor, "bad", "write fr")
        async with AgentExecutor(_NoMemory(store), [keeper()]) as executor:  # type: ignore[arg-type]
            await _turn(executor, "none", "read")
    [refused] = _of(ToolEnd, await store.read("bad"))
    assert refused.error is not None
    assert "a memory value is a JSON object" in refused.error
    [missing] = _of(ToolEnd, await store.read("none"))
    assert missing.error is not None
    assert "no memory store" in missing.error
    for session_id in ("bad", "none"):
        log = await store.read(session_id)
        assert _of(MemoryWritten, log) == _of(MemoryRead, log) == []
    memory = memory_of(store)
    assert memory is not None
    assert await memory.search((), limit=100) == []


async def test_a_fork_inside_a_tool_call_does_not_write_again() -> None:
    """Forked after the call's write was recorded and before its result, the branch runs the
    call again (as after a crash): it meets the copied record and writes nothing new."""
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [keeper()]) as executor:
            await _turn(executor, "o", "write fr")
            origin = await store.read("o")
            point = next(e.seq for e in origin if isinstance(e, MemoryWritten))
            await executor.fork("o", point, new_session_id="f")
            await executor.wait_idle("f")
    memory = memory_of(store)
    assert memory is not None
    item = await memory.get(("_", *PREFS), "language")
    assert item is not None
    assert item.version == 1
    branch = await store.read("f")
    assert [(e.session_id, e.version) for e in _of(MemoryWritten, branch)] == [("f", 1)]
    assert _answer(branch) == {"version": 1, "namespace": list(PREFS)}
