"""Toolsets (``helix_agents.toolsets``): opened once by the executor, shared, closed at its exit.

A toolset here is an in-memory fake that records what was done to it; the
MCP toolset, the real one, is tested against real servers in
``tests/integration/test_mcp_*.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, define_agent, define_tool
from helix_agents.agents.tools import Tool
from helix_agents.errors import ToolsetError, UsageError
from helix_agents.events import ToolEnd
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.protocol import RemoteStartRequest
from helix_agents.stores import MemoryEventStore


class Word(BaseModel):
    word: str


def shout(value: Word, ctx: Any) -> str:
    return value.word.upper()


class FakeToolset:
    """A toolset that offers ``tools`` once open and records its opening and closing."""

    def __init__(self, name: str, tools: Sequence[Any] = (), *, fail: str | None = None) -> None:
        self._name = name
        self.offered = list(tools)
        self.fail = fail
        self.fail_on_close = False
        self.opened = 0
        self.closed = 0
        self.open = False
        self.tasks: list[int] = []

    @property
    def name(self) -> str:
        return self._name

    def tools(self) -> Sequence[Tool[Any]]:
        assert self.open, "tools() is only called while open"
        return self.offered

    async def __aenter__(self) -> FakeToolset:
        self.tasks.append(anyio.get_current_task().id)
        if self.fail is not None:
            raise ConnectionError(self.fail)
        self.opened += 1
        self.open = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.tasks.append(anyio.get_current_task().id)
        self.closed += 1
        self.open = False
        if self.fail_on_close:
            raise RuntimeError("could not close")


def shouter(toolset: FakeToolset, *, name: str = "user", **more: Any) -> Any:
    return define_agent(
        name,
        toolsets=[toolset],
        llm=ScriptedLLM([[ScriptedLLM.call("shout", {"word": "hi"}, id="c-1")], "done"]),
        **more,
    )


def test_define_agent_checks_its_toolsets() -> None:
    toolset = FakeToolset("words")
    with pytest.raises(UsageError, match="is not a toolset"):
        define_agent("a", toolsets=[object()])  # type: ignore[list-item]
    with pytest.raises(UsageError, match="listed twice"):
        define_agent("a", toolsets=[toolset, toolset])
    with pytest.raises(UsageError, match="must be a list of toolsets"):
        define_agent("a", toolsets="words")  # type: ignore[arg-type]
    assert define_agent("a", toolsets=[toolset]).toolsets == (toolset,)


async def test_a_toolset_opens_once_serves_every_run_and_closes_in_the_same_task() -> None:
    toolset = FakeToolset("words", [define_tool("shout", "Shout.", Word, shout)])
    first, second = shouter(toolset, name="first"), shouter(toolset, name="second")
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, [first, second]) as executor:
            assert (toolset.opened, toolset.closed) == (1, 0)
            for index in range(3):
                await executor.run(first, "go", session_id=f"first-{index}")
                await executor.run(second, "go", session_id=f"second-{index}")
            assert (toolset.opened, toolset.closed) == (1, 0)
        assert (toolset.opened, toolset.closed) == (1, 1)
        entered, left = toolset.tasks
        assert entered == left  # a task group in a toolset must be left where it was entered
        end = next(e for e in await store.read("second-2") if isinstance(e, ToolEnd))
    assert end.result == "HI"


async def test_a_run_sees_the_toolsets_tools_after_its_own_as_they_are_when_it_begins() -> None:
    seen: list[list[str]] = []

    def script(request: LLMRequest) -> ScriptItem:
        seen.append([spec.name for spec in request.tools])
        return "done"

    toolset = FakeToolset("words", [define_tool("shout", "Shout.", Word, shout)])
    own = define_tool("own", "Mine.", Word, shout)
    agent = define_agent("lister", tools=[own], toolsets=[toolset], llm=ScriptedLLM(script))
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [agent]) as executor:
            await executor.run(agent, "go")
            toolset.offered = [define_tool("whisper", "Whisper.", Word, shout)]
            await executor.run(agent, "go")
    assert seen == [["own", "shout"], ["own", "whisper"]]


async def test_a_toolset_that_will_not_open_fails_the_executor_and_closes_the_others() -> None:
    good = FakeToolset("good", [define_tool("shout", "Shout.", Word, shout)])
    bad = FakeToolset("bad", fail="refused")
    store = MemoryEventStore()
    agents = [
        shouter(good, name="fine"),
        define_agent("broken", toolsets=[bad], llm=ScriptedLLM([])),
    ]
    with anyio.fail_after(10), pytest.raises(ToolsetError) as caught:
        async with AgentExecutor(store, agents):
            pass
    assert str(caught.value) == "toolset bad: could not be opened: ConnectionError: refused"
    assert caught.value.toolset == "bad"
    assert (good.opened, good.closed) == (1, 1)
    assert await store.list_sessions() == []


async def test_execute_opens_the_toolsets_of_an_agent_registered_late_or_refuses_it() -> None:
    good = FakeToolset("good", [define_tool("shout", "Shout.", Word, shout)])
    bad = FakeToolset("bad", fail="refused")
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, llm=ScriptedLLM(["done"])) as executor:
            assert good.opened == 0
            assert await executor.run(shouter(good), "go") == "done"
            assert good.opened == 1
            broken = define_agent("broken", toolsets=[bad])
            with pytest.raises(ToolsetError, match="could not be opened"):
                await executor.execute(broken, "go", session_id="never")
            assert await store.read("never") == []  # nothing was started


async def test_a_toolset_opened_by_a_run_that_will_not_open_fails_that_run_recoverably() -> None:
    toolset = FakeToolset("flaky", [define_tool("shout", "Shout.", Word, shout)], fail="down")
    agent = shouter(toolset)
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore()) as executor:
            executor.registry.register(agent)  # as a server does: no execute() to open it

            async def start(session_id: str) -> None:
                await executor.service.start(
                    RemoteStartRequest(session_id=session_id, agent_type="user", message="go")
                )
                await executor.wait_idle(session_id)

            await start("first")
            failed = await executor.state("first")
            assert failed.status == "failed"
            assert failed.recoverable  # as a retryable model error: try again later
            assert failed.error == "toolset flaky: could not be opened: ConnectionError: down"
            toolset.fail = None  # the source is back: the next run opens it
            await start("second")
            assert (await executor.state("second")).status == "completed"
            assert toolset.opened == 1


async def test_a_toolset_tool_whose_name_is_taken_or_that_is_no_tool_is_refused() -> None:
    clash = FakeToolset("clash", [define_tool("own", "Theirs.", Word, shout)])
    own = define_tool("own", "Mine.", Word, shout)
    agent = define_agent("a", tools=[own], toolsets=[clash], llm=ScriptedLLM(["done"]))
    junk = FakeToolset("junk", ["not a tool"])
    other = define_agent("b", toolsets=[junk], llm=ScriptedLLM(["done"]))
    with anyio.fail_after(10):
        with pytest.raises(ToolsetError, match="'own' has the name of another tool of agent 'a'"):
            async with AgentExecutor(MemoryEventStore(), [agent]):
                pass
        with pytest.raises(ToolsetError, match="which is not a Tool"):
            async with AgentExecutor(MemoryEventStore(), [other]):
                pass


async def test_a_toolset_that_fails_to_close_does_not_fail_the_executors_exit(
    caplog: pytest.LogCaptureFixture,
) -> None:
    toolset = FakeToolset("sticky", [define_tool("shout", "Shout.", Word, shout)])
    toolset.fail_on_close = True
    with anyio.fail_after(10):
        async with AgentExecutor(MemoryEventStore(), [shouter(toolset)]):
            pass
    assert toolset.closed == 1
    assert "toolset sticky failed while closing: RuntimeError: could not close" in caplog.text


async def test_the_toolsets_need_an_entered_executor() -> None:
    agent = shouter(FakeToolset("words"))
    executor = AgentExecutor(MemoryEventStore(), [agent])
    with pytest.raises(UsageError, match="async with AgentExecutor"):
        await executor.execute(agent, "go")
