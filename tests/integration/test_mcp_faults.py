"""MCP tools in, when things go wrong: crashes, slowness, bad tool lists, a crash of our own.

Real MCP servers (``mcp_servers.py``, written with the ``mcp`` SDK) over stdio
and streamable HTTP; calls counted on the server's side. A server that dies is
reconnected or reported as the call's error, a slow one times out, and a
result the log holds is never asked for again.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_servers import HttpServerProcess, read_calls, stdio_command, tools_http_app
from servers import listen_port, serve

from helix_agents import AgentExecutor, AgentHooks, define_agent
from helix_agents.errors import ToolsetError
from helix_agents.events import ToolEnd
from helix_agents.mcp import MCPServerError, MCPToolset, StdioServerParameters
from helix_agents.messages import ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.stores import MemoryEventStore, SqliteEventStore

pytestmark = pytest.mark.slow

LIMIT = 40  # seconds any one test may take


def stdio(kind: str, calls: Path, listing: Path | None = None, **options: Any) -> MCPToolset:
    command, *args = stdio_command(kind, calls, listing)
    return MCPToolset(StdioServerParameters(command=command, args=args), **options)


def ends(events: list[Any]) -> dict[str, ToolEnd]:
    return {e.tool_call_id: e for e in events if isinstance(e, ToolEnd)}


def calling(*calls: Any) -> ScriptedLLM:
    """A model that makes the calls in one turn, then answers."""
    return ScriptedLLM([list(calls), "done"])


async def until(check: Callable[[], bool]) -> None:
    """Wait until ``check()`` holds: a subprocess's file gives no other signal."""
    while True:
        if check():
            return
        await anyio.sleep(0.05)


# --- a server that dies ---------------------------------------------------------------


async def test_a_stdio_server_that_crashes_mid_call_is_an_error_then_a_new_process(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    toolset = stdio("tools", calls)
    crasher = define_agent(
        "crasher", toolsets=[toolset], llm=calling(ScriptedLLM.call("crash", {}, id="c-crash"))
    )
    asker = define_agent(
        "asker", toolsets=[toolset], llm=calling(ScriptedLLM.call("pid", {}, id="c-pid"))
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [crasher, asker]) as executor:
            assert await executor.run(crasher, "go", session_id="crash") == "done"
            assert await executor.run(asker, "go", session_id="after") == "done"
            assert toolset.connections == 2
        crash_end = ends(await store.read("crash"))["c-crash"]
        pid_end = ends(await store.read("after"))["c-pid"]
    assert crash_end.error is not None
    assert "connection closed during the call" in crash_end.error
    assert "not sent again" in crash_end.error
    first_pid, second_pid = (call["pid"] for call in read_calls(calls))
    assert pid_end.result == {"result": second_pid}
    assert first_pid != second_pid  # a new server process answered
    assert [call["tool"] for call in read_calls(calls)] == ["crash", "pid"]  # crash: once


async def test_an_http_server_that_crashes_is_an_error_until_it_is_back_then_reconnected(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    server = HttpServerProcess(listen_port(), calls, tmp_path / "server.log")
    toolset = MCPToolset(server.url, connect_timeout=5)
    crasher = define_agent(
        "crasher", toolsets=[toolset], llm=calling(ScriptedLLM.call("crash", {}, id="c-crash"))
    )
    asker = define_agent(
        "asker", toolsets=[toolset], llm=calling(ScriptedLLM.call("pid", {}, id="c-pid"))
    )
    store = MemoryEventStore()
    try:
        with anyio.fail_after(LIMIT):
            await server.start()
            async with AgentExecutor(store, [crasher, asker]) as executor:
                await executor.run(crasher, "go", session_id="crash")
                assert await server.exited() == 17
                await executor.run(asker, "go", session_id="down")  # nobody listens
                await server.start()
                await executor.run(asker, "go", session_id="back")
                assert toolset.connections == 2
            crashed = ends(await store.read("crash"))["c-crash"]
            down = ends(await store.read("down"))["c-pid"]
            back = ends(await store.read("back"))["c-pid"]
    finally:
        await server.stop()
    assert crashed.error is not None
    assert "connection closed during the call" in crashed.error
    assert down.error is not None
    assert "could not connect" in down.error
    assert back.error is None
    assert back.result == {"result": read_calls(calls)[-1]["pid"]}
    assert [call["tool"] for call in read_calls(calls)] == ["crash", "pid"]


# --- a server that is slow or silent -------------------------------------------------------


@asynccontextmanager
async def slow_server(transport: str, calls: Path) -> AsyncIterator[MCPToolset]:
    """The ``tools`` server over ``transport``, as a toolset whose calls time out after 1 s."""
    if transport == "stdio":
        yield stdio("tools", calls, timeout=1)
        return
    async with serve(tools_http_app(calls)) as url:
        yield MCPToolset(f"{url}/mcp", timeout=1)


@pytest.mark.parametrize("transport", ["stdio", "http"])
async def test_a_slow_call_times_out_is_cancelled_at_the_server_and_the_connection_stays(
    tmp_path: Path, transport: str
) -> None:
    calls = tmp_path / "calls.jsonl"
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with slow_server(transport, calls) as toolset:
            agent = define_agent(
                "waiter",
                toolsets=[toolset],
                llm=ScriptedLLM(
                    [
                        [ScriptedLLM.call("slow", {"seconds": 60}, id="c-slow")],
                        [ScriptedLLM.call("add", {"a": 1, "b": 2}, id="c-add")],
                        "done",
                    ]
                ),
            )
            async with AgentExecutor(store, [agent]) as executor:
                assert await executor.run(agent, "go", session_id="s") == "done"
                await until(lambda: any(call.get("cancelled") for call in read_calls(calls)))
                assert toolset.connections == 1  # the same connection served the next call
    recorded = ends(await store.read("s"))
    assert recorded["c-slow"].error == "tool 'slow' timed out after 1s"
    assert recorded["c-add"].result == {"total": 3}


async def test_an_interrupt_cancels_an_mcp_call_under_way_at_the_server(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    agent = define_agent(
        "napper",
        toolsets=[stdio("tools", calls)],
        llm=calling(ScriptedLLM.call("slow", {"seconds": 60}, id="c-slow")),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            await executor.execute(agent, "go", session_id="s")
            await until(lambda: len(read_calls(calls)) == 1)  # the server is in the call
            await executor.service.interrupt("s", "enough")
            await executor.wait_idle("s")
            assert (await executor.state("s")).status == "interrupted"
            await until(lambda: any(call.get("cancelled") for call in read_calls(calls)))
        end = ends(await store.read("s"))["c-slow"]
    assert end.error == "interrupted"


async def test_a_server_that_never_answers_fails_the_opening_within_connect_timeout(
    tmp_path: Path,
) -> None:
    silent = MCPToolset(
        StdioServerParameters(command=sys.executable, args=["-c", "import time; time.sleep(60)"]),
        connect_timeout=1,
        name="silent",
    )
    store = MemoryEventStore()
    agent = define_agent("hopeful", toolsets=[silent], llm=ScriptedLLM(["done"]))
    with anyio.fail_after(LIMIT):
        with pytest.raises(MCPServerError, match="silent: could not connect: no answer within 1s"):
            async with AgentExecutor(store, [agent]):
                pass
    assert await store.list_sessions() == []


async def test_a_command_that_cannot_start_fails_the_opening(tmp_path: Path) -> None:
    missing = MCPToolset(StdioServerParameters(command=str(tmp_path / "no-such-server")))
    agent = define_agent("hopeful", toolsets=[missing], llm=ScriptedLLM(["done"]))
    with anyio.fail_after(LIMIT):
        with pytest.raises(MCPServerError, match="could not connect"):
            async with AgentExecutor(MemoryEventStore(), [agent]):
                pass


# --- a tool list that cannot be used -------------------------------------------------------


def listing(path: Path, *tools: dict[str, Any]) -> Path:
    path.write_text(json.dumps(list(tools)), encoding="utf-8")
    return path


OK = {"name": "ok", "description": "Fine.", "inputSchema": {"type": "object"}}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            {"name": "read file", "inputSchema": {"type": "object"}},
            "tool 'read file' cannot be an agent tool: invalid tool name",
        ),
        (
            {"name": "files.read", "inputSchema": {"type": "object"}},
            "include=[...] leaves a tool out",
        ),
        (
            {"name": "weird", "inputSchema": {"type": "object", "properties": {"x": 3}}},
            "tool 'weird' has an invalid input schema",
        ),
    ],
)
async def test_a_malformed_tool_list_is_refused_with_a_clear_error_and_nothing_runs(
    tmp_path: Path, bad: dict[str, Any], message: str
) -> None:
    tools = listing(tmp_path / "tools.json", OK, bad)
    toolset = stdio("listed", tmp_path / "calls.jsonl", tools)
    agent = define_agent("picky", toolsets=[toolset], llm=ScriptedLLM(["done"]))
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        with pytest.raises(ToolsetError, match=message.replace("[", r"\[").replace("]", r"\]")):
            async with AgentExecutor(store, [agent]):
                pass
        assert toolset.tools() == ()
        assert await store.list_sessions() == []
        # leaving the bad tool out makes the server usable
        good = stdio("listed", tmp_path / "calls.jsonl", tools, include=["ok"])
        fine = define_agent(
            "fine", toolsets=[good], llm=calling(ScriptedLLM.call("ok", {"n": 1}, id="c-ok"))
        )
        async with AgentExecutor(store, [fine]) as executor:
            await executor.run(fine, "go", session_id="s")
        result = ends(await store.read("s"))["c-ok"].result
    assert json.loads(result) == {"called": "ok", "arguments": {"n": 1}}


async def test_a_bad_tool_list_after_a_reconnection_keeps_the_tools_it_had(
    tmp_path: Path,
) -> None:
    tools = listing(
        tmp_path / "tools.json", OK, {"name": "crash", "inputSchema": {"type": "object"}}
    )
    calls = tmp_path / "calls.jsonl"
    toolset = stdio("listed", calls, tools)
    store = MemoryEventStore()

    def break_the_list(ctx: Any, call: Any, outcome: Any) -> None:
        if call.id == "c-crash":  # the server is gone: its next start lists a bad tool
            listing(tools, OK, {"name": "bad name", "inputSchema": {"type": "object"}})

    steady = define_agent(
        "steady",
        toolsets=[toolset],
        llm=ScriptedLLM(
            [
                [ScriptedLLM.call("crash", {}, id="c-crash")],
                [ScriptedLLM.call("ok", {}, id="c-ok")],
                "done",
            ]
        ),
        hooks=AgentHooks(after_tool=break_the_list),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [steady]) as executor:
            before = [tool.name for tool in toolset.tools()]
            assert await executor.run(steady, "go", session_id="s") == "done"
            assert [tool.name for tool in toolset.tools()] == before == ["ok", "crash"]
            assert toolset.connections == 2
        recorded = ends(await store.read("s"))
    assert recorded["c-crash"].error is not None
    assert recorded["c-ok"].error is None  # the new connection served the old list's tool
    assert [call["tool"] for call in read_calls(calls)] == ["crash", "ok"]


# --- a crash of our own: the log answers for recorded calls --------------------------------


async def test_recovery_after_our_crash_never_calls_the_server_again_for_a_recorded_call(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    toolset = stdio("tools", calls)
    recorded = anyio.Event()
    seen_after_restart: list[LLMRequest] = []

    def first_life(request: LLMRequest) -> ScriptItem:
        if not any(isinstance(m, ToolResultMessage) for m in request.messages):
            return [ScriptedLLM.call("add", {"a": 40, "b": 2}, id="c-add")]
        return ScriptedLLM.reply("never said", delay=3600)  # we "crash" while it thinks

    def second_life(request: LLMRequest) -> ScriptItem:
        seen_after_restart.append(request)
        return "the answer is 42"

    def on_tool(ctx: Any, call: Any, outcome: Any) -> None:
        recorded.set()

    db = tmp_path / "events.db"
    with anyio.fail_after(LIMIT):
        store = SqliteEventStore(db)
        before = define_agent(
            "adder",
            toolsets=[toolset],
            llm=ScriptedLLM(first_life),
            hooks=AgentHooks(after_tool=on_tool),
        )
        with anyio.CancelScope() as crash:
            async with AgentExecutor(store, [before]) as executor:
                await executor.execute(before, "go", session_id="s")
                await recorded.wait()
                crash.cancel()  # the process dies: the log says the session still runs
        await store.close()

        store = SqliteEventStore(db)
        after = define_agent("adder", toolsets=[toolset], llm=ScriptedLLM(second_life))
        async with AgentExecutor(store, [after]) as executor:
            assert await executor.recover() == ["s"]
            await executor.wait_idle("s")
            state = await executor.state("s")
        await store.close()
    assert state.status == "completed"
    assert state.output == "the answer is 42"
    assert [call["tool"] for call in read_calls(calls)] == ["add"]  # once, across the crash
    [request] = seen_after_restart
    [result] = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    assert result.content == '{"total":42}'  # the model got the recorded result


async def test_a_call_cut_short_by_our_crash_runs_again_with_the_same_idempotency_key(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    toolset = stdio("tools", calls)
    script: list[ScriptItem] = [
        [ScriptedLLM.call("slow", {"seconds": 3}, id="c-slow")],
        "done",
    ]
    db = tmp_path / "events.db"
    with anyio.fail_after(LIMIT):
        store = SqliteEventStore(db)
        agent = define_agent("sleeper", toolsets=[toolset], llm=ScriptedLLM(script))
        with anyio.CancelScope() as crash:
            async with AgentExecutor(store, [agent]) as executor:
                await executor.execute(agent, "go", session_id="s")
                await until(lambda: len(read_calls(calls)) == 1)
                crash.cancel()  # mid-call: no result is in the log
        await store.close()
        store = SqliteEventStore(db)
        async with AgentExecutor(store, [agent]) as executor:
            assert await executor.recover() == ["s"]
            await executor.wait_idle("s")
            state = await executor.state("s")
        await store.close()
    assert state.status == "completed"
    starts = [call for call in read_calls(calls) if not call.get("cancelled")]
    assert len(starts) == 2  # at least once: the cut call ran again...
    assert starts[0]["meta"] == starts[1]["meta"]  # ...with the same session and call id
    assert starts[0]["meta"]["helix-agents/toolCallId"] == "c-slow"
