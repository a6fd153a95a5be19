"""MCP tools in: an MCP server's tools as an agent's tools, over stdio and streamable HTTP.

Every server here is a real MCP server written with the ``mcp`` SDK
(``mcp_servers.py``), run as a subprocess over stdio or on uvicorn over
loopback; the bridge speaks to it with the SDK's own client. Calls are
counted on the server's side (its calls file).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp_servers import read_calls, stdio_command, tools_http_app
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.errors import ToolsetError
from helix_agents.events import CustomChunk, ToolEnd
from helix_agents.mcp import (
    CALL_META_KEYS,
    PROGRESS_CHUNK,
    MCPArguments,
    MCPServerError,
    MCPToolset,
    StdioServerParameters,
)
from helix_agents.messages import ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.stores import MemoryEventStore

LIMIT = 30  # seconds any one test may take: the machine is shared


def stdio_tools(calls: Path, **options: Any) -> MCPToolset:
    """The ``tools`` test server as a subprocess."""
    command, *args = stdio_command("tools", calls)
    return MCPToolset(StdioServerParameters(command=command, args=args), **options)


def results(events: list[Any]) -> dict[str, ToolResultMessage]:
    """Each call's recorded result message, by tool call id."""
    return {
        e.message.tool_call_id: e.message
        for e in events
        if isinstance(getattr(e, "message", None), ToolResultMessage)
    }


def tool_ends(events: list[Any]) -> dict[str, ToolEnd]:
    return {e.tool_call_id: e for e in events if isinstance(e, ToolEnd)}


def one_turn(*calls: Any) -> list[ScriptItem]:
    """A script: the given calls in one turn, then a final answer."""
    return [list(calls), "done"]


async def test_stdio_tools_reach_the_model_named_described_and_with_the_servers_schemas(
    tmp_path: Path,
) -> None:
    seen: list[LLMRequest] = []

    def script(request: LLMRequest) -> ScriptItem:
        seen.append(request)
        return "done"

    toolset = stdio_tools(tmp_path / "calls.jsonl", prefix="calc_", include=["add", "echo"])
    agent = define_agent("asker", toolsets=[toolset], llm=ScriptedLLM(script))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            await executor.run(agent, "hello")
    specs = {spec.name: spec for spec in seen[0].tools}
    assert set(specs) == {"calc_add", "calc_echo"}  # include left the others out
    assert specs["calc_add"].description == "Add two integers."
    add_schema = specs["calc_add"].parameters
    assert add_schema["type"] == "object"
    assert add_schema["required"] == ["a", "b"]
    assert add_schema["properties"]["a"]["type"] == "integer"


async def test_structured_text_and_error_results_are_recorded_as_tool_results(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    toolset = stdio_tools(calls)
    agent = define_agent(
        "worker",
        toolsets=[toolset],
        llm=ScriptedLLM(
            one_turn(
                ScriptedLLM.call("add", {"a": 2, "b": 3}, id="c-add"),
                ScriptedLLM.call("echo", {"text": "hi"}, id="c-echo"),
                ScriptedLLM.call("fail", {"message": "disk full"}, id="c-fail"),
                ScriptedLLM.call("picture", {}, id="c-picture"),
            )
        ),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            assert await executor.run(agent, "go", session_id="s") == "done"
        events = await store.read("s")
    recorded = results(events)
    ends = tool_ends(events)
    assert ends["c-add"].result == {"total": 5}  # structured content, as is
    assert recorded["c-add"].content == '{"total":5}'
    assert ends["c-echo"].result == "echo: hi"  # text content only
    assert recorded["c-fail"].is_error
    assert ends["c-fail"].error is not None
    assert ends["c-fail"].error.startswith("MCPToolError: ")
    assert "disk full" in ends["c-fail"].error  # the model reads the server's message
    assert ends["c-picture"].result == [
        {"type": "text", "text": "a red dot"},
        {"type": "image", "mimeType": "image/png"},
    ]
    assert [call["tool"] for call in read_calls(calls)].count("add") == 1


async def test_bad_arguments_are_the_models_error_and_never_reach_the_server(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    agent = define_agent(
        "sloppy",
        toolsets=[stdio_tools(calls)],
        llm=ScriptedLLM(one_turn(ScriptedLLM.call("add", {"a": "two"}, id="c-1"))),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            await executor.run(agent, "go", session_id="s")
        events = await store.read("s")
    error = tool_ends(events)["c-1"].error
    assert error is not None
    assert error.startswith("invalid arguments: ")
    assert "'b' is a required property" in error
    assert read_calls(calls) == []


async def test_each_call_carries_the_session_and_tool_call_id_in_its_meta(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    agent = define_agent(
        "meta",
        toolsets=[stdio_tools(calls)],
        llm=ScriptedLLM(one_turn(ScriptedLLM.call("echo", {"text": "x"}, id="c-9"))),
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            await executor.run(agent, "go", session_id="s-meta")
    [call] = read_calls(calls)
    session_key, call_key = CALL_META_KEYS
    assert call["meta"][session_key] == "s-meta"
    assert call["meta"][call_key] == "c-9"


async def test_progress_notifications_become_custom_chunks_in_order(tmp_path: Path) -> None:
    agent = define_agent(
        "patient",
        toolsets=[stdio_tools(tmp_path / "calls.jsonl")],
        llm=ScriptedLLM(one_turn(ScriptedLLM.call("steps", {"count": 3}, id="c-1"))),
    )
    quiet = define_agent(
        "quiet",
        toolsets=[stdio_tools(tmp_path / "quiet.jsonl", progress=False)],
        llm=ScriptedLLM(one_turn(ScriptedLLM.call("steps", {"count": 3}, id="c-1"))),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent, quiet]) as executor:
            await executor.run(agent, "go", session_id="loud")
            await executor.run(quiet, "go", session_id="quiet")
        loud_events = await store.read("loud")
        quiet_events = await store.read("quiet")
    chunks = [e for e in loud_events if isinstance(e, CustomChunk)]
    assert [c.name for c in chunks] == [PROGRESS_CHUNK] * 3
    assert [c.data["progress"] for c in chunks] == [1.0, 2.0, 3.0]
    assert chunks[-1].data == {"tool": "steps", "progress": 3.0, "total": 3.0, "message": "step 3"}
    end = next(e for e in loud_events if isinstance(e, ToolEnd))
    assert all(c.seq < end.seq for c in chunks)  # all before the call's end
    assert not any(isinstance(e, CustomChunk) for e in quiet_events)


async def test_one_connection_serves_every_session_and_closes_with_the_executor(
    tmp_path: Path,
) -> None:
    calls = tmp_path / "calls.jsonl"
    toolset = stdio_tools(calls)
    first = define_agent(
        "first", toolsets=[toolset], llm=ScriptedLLM(one_turn(ScriptedLLM.call("pid", {})))
    )
    second = define_agent(
        "second", toolsets=[toolset], llm=ScriptedLLM(one_turn(ScriptedLLM.call("pid", {})))
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [first, second]) as executor:
            assert toolset.connections == 1  # opened on entering
            handles = [
                await executor.execute(agent, "go", session_id=f"{agent.name}-{index}")
                for index in range(3)
                for agent in (first, second)
            ]
            for handle in handles:  # six sessions, running side by side
                assert (await handle.result()).status == "completed"
            assert toolset.connections == 1
        pids = {call["pid"] for call in read_calls(calls)}
        assert len(read_calls(calls)) == 6
        assert len(pids) == 1  # one server process served them all
        assert toolset.tools() == ()
        [server_pid] = pids
        with pytest.raises(ProcessLookupError):
            os.kill(server_pid, 0)  # the executor's exit stopped the subprocess


async def test_a_toolset_opens_again_for_the_next_executor(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    toolset = stdio_tools(calls)
    agent = define_agent(
        "again", toolsets=[toolset], llm=ScriptedLLM(one_turn(ScriptedLLM.call("pid", {})))
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        for session in ("one", "two"):
            async with AgentExecutor(store, [agent]) as executor:
                await executor.run(agent, "go", session_id=session)
    assert toolset.connections == 2
    assert len({call["pid"] for call in read_calls(calls)}) == 2


async def test_an_agent_registered_later_opens_its_toolset_when_it_is_executed(
    tmp_path: Path,
) -> None:
    toolset = stdio_tools(tmp_path / "calls.jsonl")
    agent = define_agent(
        "late", toolsets=[toolset], llm=ScriptedLLM(one_turn(ScriptedLLM.call("pid", {})))
    )
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore()) as executor:
            assert toolset.connections == 0
            assert await executor.run(agent, "go") == "done"
            assert toolset.connections == 1


async def test_approval_gates_an_mcp_call_before_it_reaches_the_server(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    asked: list[dict[str, Any]] = []

    def big_sums(value: MCPArguments, ctx: Any) -> bool:
        asked.append(value.arguments())
        return int(value.arguments()["a"]) > 100

    toolset = stdio_tools(calls, requires_approval={"add": big_sums, "echo": True})
    agent = define_agent(
        "careful",
        toolsets=[toolset],
        llm=ScriptedLLM(
            one_turn(
                ScriptedLLM.call("add", {"a": 1, "b": 1}, id="c-small"),
                ScriptedLLM.call("add", {"a": 500, "b": 1}, id="c-big"),
                ScriptedLLM.call("echo", {"text": "psst"}, id="c-echo"),
                ScriptedLLM.call("pid", {}, id="c-pid"),
            )
        ),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "go", session_id="gated")
            paused = await handle.result()
            assert paused.status == "paused"
            pending = {
                entry.tool_call_id: entry for entry in await executor.pending_inputs("gated")
            }
            assert set(pending) == {"c-big", "c-echo"}
            assert pending["c-big"].tool_name == "add"
            # the ungated and the predicate-approved calls ran; the gated ones did not
            assert sorted(call["tool"] for call in read_calls(calls)) == ["add", "pid"]
            await executor.submit_approval("gated", "c-big", True)
            await executor.submit_approval("gated", "c-echo", False, "not now")
            await executor.wait_idle("gated")
            assert (await executor.state("gated")).status == "completed"
        events = await store.read("gated")
    assert sorted(call["tool"] for call in read_calls(calls)) == ["add", "add", "pid"]
    ends = tool_ends(events)
    assert ends["c-big"].result == {"total": 501}
    assert ends["c-echo"].error == "denied by a person: not now"
    assert {"a": 500, "b": 1} in asked


class Note(BaseModel):
    text: str


async def test_a_toolset_tool_with_the_name_of_another_tool_is_refused_before_anything_runs(
    tmp_path: Path,
) -> None:
    own_echo = define_tool("echo", "Mine.", Note, lambda value, ctx: value.text)
    agent = define_agent(
        "clash",
        tools=[own_echo],
        toolsets=[stdio_tools(tmp_path / "calls.jsonl")],
        llm=ScriptedLLM(["done"]),
    )
    store = MemoryEventStore()
    with anyio.fail_after(LIMIT):
        with pytest.raises(ToolsetError, match="'echo' has the name of another tool"):
            async with AgentExecutor(store, [agent]):
                pass
        prefixed = define_agent(
            "prefixed",
            tools=[own_echo],
            toolsets=[stdio_tools(tmp_path / "calls.jsonl", prefix="mcp_")],
            llm=ScriptedLLM(["done"]),
        )
        async with AgentExecutor(store, [prefixed]) as executor:
            assert await executor.run(prefixed, "go") == "done"
    assert await store.list_sessions() != []  # only the second executor ran anything


async def test_streamable_http_server_with_a_bearer_token(tmp_path: Path) -> None:
    calls = tmp_path / "calls.jsonl"
    with anyio.fail_after(LIMIT):
        async with serve(tools_http_app(calls, token="sesame")) as url:
            toolset = MCPToolset(
                f"{url}/mcp", headers={"Authorization": "Bearer sesame"}, prefix="web_"
            )
            agent = define_agent(
                "webby",
                toolsets=[toolset],
                llm=ScriptedLLM(
                    one_turn(
                        ScriptedLLM.call("web_add", {"a": 20, "b": 22}, id="c-add"),
                        ScriptedLLM.call("web_fail", {"message": "nope"}, id="c-fail"),
                    )
                ),
            )
            store = MemoryEventStore()
            async with AgentExecutor(store, [agent]) as executor:
                await executor.run(agent, "go", session_id="s")
            ends = tool_ends(await store.read("s"))
            assert ends["c-add"].result == {"total": 42}
            assert ends["c-fail"].error is not None
            assert "nope" in ends["c-fail"].error

            no_token = define_agent(
                "no-token", toolsets=[MCPToolset(f"{url}/mcp")], llm=ScriptedLLM(["done"])
            )
            with pytest.raises(MCPServerError, match="could not connect"):
                async with AgentExecutor(MemoryEventStore(), [no_token]):
                    pass
    # One call each; a round's calls run at once, so the server may see them in either order.
    assert sorted(call["tool"] for call in read_calls(calls)) == ["add", "fail"]
