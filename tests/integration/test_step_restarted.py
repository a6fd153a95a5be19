"""A restart is visible on the stream: ``step_restarted`` voids the cut step's partial text.

Issue 12, finding 5: after a crash the interrupted step re-runs and its text
deltas come again with new sequences; without a marker a reader shows
"alpha beta gamma alpha beta gamma delta". The marker says which earlier text
to drop, on the session's own stream (by sequence) and, forwarded, on its
ancestors' streams (by count, per agent).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, StreamItem, create_sub_agent_tool, define_agent
from helix_agents.events import StepRestarted, TextDelta
from helix_agents.log import project_stream
from helix_agents.models import LLMRequest, LLMResponse, LLMTextDelta
from helix_agents.stores import MemoryEventStore, SqliteEventStore

pytestmark = pytest.mark.anyio

WORDS = ["alpha ", "beta ", "gamma "]


class CutOnce:
    """Streams three words then hangs the first time it is asked; answers fully after."""

    def __init__(self) -> None:
        self.calls = 0
        self.cut = anyio.Event()
        self.session_id = ""

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMTextDelta | LLMResponse]:
        self.calls += 1
        self.session_id = request.session_id or ""
        for word in WORDS:
            yield LLMTextDelta(text=word)
        if self.calls == 1:
            self.cut.set()
            await anyio.sleep_forever()  # the process dies here
        yield LLMTextDelta(text="delta")
        yield LLMResponse(content="".join(WORDS) + "delta")


def read_text(items: list[StreamItem], agent_id: str) -> str:
    """What a reader shows for ``agent_id``, honouring ``step_restarted`` by sequence."""
    kept: list[tuple[int, str]] = []
    for item in items:
        chunk = item.chunk
        if isinstance(chunk, StepRestarted) and chunk.agent_id == agent_id:
            kept = [(seq, text) for seq, text in kept if seq <= chunk.discard_from]
        elif isinstance(chunk, TextDelta) and chunk.agent_id == agent_id:
            kept.append((item.sequence, chunk.delta))
    return "".join(text for _, text in kept)


def read_forwarded_text(items: list[StreamItem], agent_id: str) -> str:
    """The same on an ancestor's stream, where only the counts apply."""
    kept: list[str] = []
    for item in items:
        chunk = item.chunk
        if isinstance(chunk, StepRestarted) and chunk.agent_id == agent_id:
            assert sum(len(text) for text in kept[-chunk.discard_deltas :]) == chunk.discard_chars
            del kept[len(kept) - chunk.discard_deltas :]
        elif isinstance(chunk, TextDelta) and chunk.agent_id == agent_id:
            kept.append(chunk.delta)
    return "".join(kept)


async def _crash_mid_step(store: object, agent: object, llm: CutOnce, session_id: str) -> None:
    """Run until the model is cut mid-text, then end the executor as a kill would."""
    with anyio.CancelScope() as process:
        async with AgentExecutor(store, [agent]) as executor:  # type: ignore[arg-type,list-item]
            await executor.execute(agent, "go", session_id=session_id)  # type: ignore[arg-type]
            await llm.cut.wait()
            # Readers saw the cut step's text: it is committed (written behind).
            seen = 0
            async with aclosing(store.tail(llm.session_id, 0)) as events:  # type: ignore[attr-defined]
                async for event in events:
                    seen += isinstance(event, TextDelta)
                    if seen == len(WORDS):
                        break
            process.cancel()  # no interrupt recorded: the log says "running"


async def test_a_step_cut_by_a_crash_is_declared_void_when_it_runs_again(tmp_path: object) -> None:
    llm = CutOnce()
    agent = define_agent("talker", llm=llm)
    store = SqliteEventStore(f"{tmp_path}/s.db")  # type: ignore[arg-type]
    with anyio.fail_after(20):
        await _crash_mid_step(store, agent, llm, "t1")
        async with AgentExecutor(store, [agent]) as executor:
            assert await executor.recover() == ["t1"]
            await executor.wait_idle("t1")
        items = project_stream(await store.read("t1"))
    await store.close()
    restarts = [item for item in items if isinstance(item.chunk, StepRestarted)]
    assert len(restarts) == 1
    marker = restarts[0].chunk
    assert isinstance(marker, StepRestarted)
    assert (marker.step, marker.discard_deltas, marker.discard_chars) == (1, 3, 17)
    # Without the marker the text repeats; with it, it reads once.
    raw = "".join(i.chunk.delta for i in items if isinstance(i.chunk, TextDelta))
    assert raw == "alpha beta gamma alpha beta gamma delta"
    assert read_text(items, "t1") == "alpha beta gamma delta"
    assert read_forwarded_text(items, "t1") == "alpha beta gamma delta"


class Brief(BaseModel):
    query: str


class Out(BaseModel):
    text: str


async def test_a_childs_restart_reaches_the_parents_stream() -> None:
    # A parent whose child is cut: the child's marker is forwarded like any chunk.
    kid_llm = CutOnce()
    kid = define_agent("kid", llm=_Finishing(kid_llm), output_schema=Out)
    boss = define_agent("boss", tools=[create_sub_agent_tool(kid, Brief)], llm=_Delegating())
    store = MemoryEventStore()
    with anyio.fail_after(20):
        await _crash_mid_step(store, boss, kid_llm, "b1")
        async with AgentExecutor(store, [boss]) as executor:
            assert "b1" in await executor.recover()
            await executor.wait_idle("b1")
            await executor.wait_idle("b1-sub-c1")
            await executor.wait_idle("b1")
        items = project_stream(await store.read("b1"))
    kid_id = "b1-sub-c1"
    assert any(isinstance(i.chunk, StepRestarted) and i.chunk.agent_id == kid_id for i in items)
    assert read_forwarded_text(items, kid_id) == "alpha beta gamma delta"


class _Finishing:
    """The kid's model: the cut text, then a finish with its output."""

    def __init__(self, inner: CutOnce) -> None:
        self.inner = inner

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMTextDelta | LLMResponse]:
        from helix_agents.models import ScriptedLLM

        async for part in self.inner.stream(request):
            if isinstance(part, LLMResponse):
                yield LLMResponse(
                    content=part.content,
                    tool_calls=[ScriptedLLM.call("__finish__", {"text": part.content}, id="f1")],
                )
            else:
                yield part


class _Delegating:
    """The boss's model: delegate once, then say it is done."""

    async def stream(self, request: LLMRequest) -> AsyncIterator[LLMTextDelta | LLMResponse]:
        from helix_agents.messages import ToolResultMessage
        from helix_agents.models import ScriptedLLM

        if any(isinstance(m, ToolResultMessage) for m in request.messages):
            yield LLMResponse(content="done")
            return
        yield LLMResponse(tool_calls=[ScriptedLLM.call("subagent__kid", {"query": "go"}, id="c1")])
