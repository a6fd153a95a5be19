"""Follow-up turns: a new message to a finished conversation, with its memory.

``AgentExecutor.send_message`` (the protocol's ``send_message``): a completed
session takes a new turn (``run_started(continue)``) with its messages and
state kept, ``max_steps`` counted per turn; an interrupted one resumes with the
message; a running one queues it for its next step; a failed or aborted one
refuses (``SESSION_FAILED``). Idempotent per message id. Runs on the memory
and SQLite stores; every test is bounded and synchronises on events.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, EventStore, ToolContext, define_agent, define_tool
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    Completed,
    MessageQueued,
    OutputChunk,
    RunStarted,
    StepStarted,
    TextDelta,
)
from helix_agents.log import project_state
from helix_agents.messages import AssistantMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem
from helix_agents.protocol import ChunkEvent, EndEvent, RemoteMessageRequest

LIMIT = 10.0

call = ScriptedLLM.call


class _Empty(BaseModel):
    pass


class _Text(BaseModel):
    text: str


async def _noop(value: _Empty, ctx: ToolContext) -> str:
    return "ok"


@pytest.fixture(params=["memory", "sqlite"])
def store_backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def users(request: LLMRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, UserMessage)]


def echo(request: LLMRequest) -> ScriptItem:
    """Answer with every user message so far, so a test sees what the model saw."""
    return ScriptedLLM.reply(" | ".join(users(request)))


def chatter(script: Any = echo, *, max_steps: int = 10, tools: Any = ()) -> Any:
    return define_agent("chatter", llm=ScriptedLLM(script), max_steps=max_steps, tools=tools)


async def test_a_completed_session_takes_a_new_turn_with_its_memory(store: EventStore) -> None:
    agent = chatter()
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            first = await executor.execute(agent, "hello", session_id="s1", state={"n": 1})
            assert (await first.result()).output == "hello"
            second = await executor.send_message("s1", "and then?")
            result = await second.result()
            status = await executor.service.get_status("s1")
    assert result.status == "completed"
    assert result.output == "hello | and then?"  # the model saw the first turn
    assert result.state == {"n": 1}  # state kept
    assert second.run_id != first.run_id
    assert status.run_id == second.run_id
    log = await store.read("s1")
    runs = [event for event in log if isinstance(event, RunStarted)]
    assert [run.mode for run in runs] == ["start", "continue"]
    assert runs[1].messages == [UserMessage(content="and then?")]
    assert second.start_seq == runs[1].seq


async def test_max_steps_counts_per_turn(store: EventStore) -> None:
    tool = define_tool("noop", "Do nothing.", _Empty, _noop)

    def script(request: LLMRequest) -> ScriptItem:
        # Each turn: one tool call, then the answer: two steps per turn.
        last = request.messages[-1]
        if isinstance(last, UserMessage):
            return call("noop", {})
        return ScriptedLLM.reply(f"turn {len(users(request))}")

    agent = chatter(script, max_steps=2, tools=[tool])
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            await (await executor.execute(agent, "one", session_id="s2")).result()
            for turn, text in ((2, "two"), (3, "three")):
                result = await (await executor.send_message("s2", text)).result()
                assert (result.status, result.output) == ("completed", f"turn {turn}")
    state = project_state(await store.read("s2"))
    assert state.step_count == 6  # three turns of two steps, each within max_steps=2


async def test_the_same_message_id_changes_nothing_and_answers_the_same_run(
    store: EventStore,
) -> None:
    agent = chatter()
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            await (await executor.execute(agent, "hi", session_id="s3")).result()
            handle = await executor.send_message("s3", "again", message_id="m-1")
            await handle.result()
            before = await store.read("s3")
            repeat = await executor.send_message("s3", "again", message_id="m-1")
            assert repeat.run_id == handle.run_id
            assert repeat.start_seq == handle.start_seq
            with pytest.raises(AgentServerError) as caught:
                await executor.send_message("s3", "something else", message_id="m-1")
            assert caught.value.code == "INVALID_REQUEST"
            assert await store.read("s3") == before


async def test_concurrent_sends_of_one_message_id_start_one_turn(store: EventStore) -> None:
    agent = chatter()
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            await (await executor.execute(agent, "hi", session_id="s4")).result()
            run_ids: list[str] = []

            async def send() -> None:
                run_ids.append((await executor.send_message("s4", "x", message_id="m")).run_id)

            async with anyio.create_task_group() as tg:
                for _ in range(5):
                    tg.start_soon(send)
            await executor.wait_idle("s4")
    assert len(set(run_ids)) == 1
    runs = [e for e in await store.read("s4") if isinstance(e, RunStarted)]
    assert len(runs) == 2


@pytest.mark.parametrize("ending", ["failed", "aborted"])
async def test_a_failed_or_aborted_session_refuses_and_nothing_changes(
    store: EventStore, ending: str
) -> None:
    gate = anyio.Event()

    async def stall(request: LLMRequest) -> ScriptItem:
        if ending == "failed":
            return ScriptedLLM.fail("model down")
        await gate.wait()
        return ScriptedLLM.reply("never")

    agent = chatter(stall)
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            handle = await executor.execute(agent, "hi", session_id="s5")
            if ending == "aborted":
                await handle.abort("stop")
            assert (await handle.result()).status == "failed"
            before = await store.read("s5")
            with pytest.raises(AgentServerError) as caught:
                await executor.send_message("s5", "are you there?")
    assert caught.value.code == "SESSION_FAILED"
    assert await store.read("s5") == before


@pytest.mark.parametrize(
    ("session_id", "message", "message_id", "code"),
    [
        ("nobody", "hi", None, "NOT_FOUND"),
        ("s6", "", None, "INVALID_REQUEST"),
        ("s6", "   ", None, "INVALID_REQUEST"),
        ("s6", [], None, "INVALID_REQUEST"),
        ("s6", "hi", "", "INVALID_REQUEST"),
        ("s6", "hi", "a b", "INVALID_REQUEST"),
        ("bad id", "hi", None, "INVALID_REQUEST"),
    ],
)
async def test_bad_follow_ups_are_refused_and_change_nothing(
    store: EventStore, session_id: str, message: Any, message_id: str | None, code: str
) -> None:
    agent = chatter()
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            await (await executor.execute(agent, "hi", session_id="s6")).result()
            before = await store.read("s6")
            with pytest.raises(AgentServerError) as caught:
                await executor.service.send_message(
                    RemoteMessageRequest(
                        session_id=session_id, message=message, message_id=message_id
                    )
                )
    assert caught.value.code == code
    assert await store.read("s6") == before


async def test_a_message_to_a_running_session_joins_its_next_step(store: EventStore) -> None:
    entered, release = anyio.Event(), anyio.Event()

    async def wait(value: _Empty, ctx: ToolContext) -> str:
        entered.set()
        await release.wait()
        return "done"

    def script(request: LLMRequest) -> ScriptItem:
        if len(request.messages) == 1:
            return call("wait", {})
        return ScriptedLLM.reply(" | ".join(users(request)))

    agent = chatter(script, tools=[define_tool("wait", "Wait.", _Empty, wait)])
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            handle = await executor.execute(agent, "start", session_id="s7")
            await entered.wait()
            queued = await executor.service.send_message(
                RemoteMessageRequest(session_id="s7", message="meanwhile", message_id="q1")
            )
            release.set()
            result = await handle.result()
    assert queued.queued
    assert queued.run_id == handle.run_id
    assert result.output == "start | meanwhile"
    log = await store.read("s7")
    assert [type(e) for e in log].count(MessageQueued) == 1
    steps = [e for e in log if isinstance(e, StepStarted)]
    assert [s.taken for s in steps] == [0, 1]
    state = project_state(log)
    # The queued message sits after the tool round, before the answer that used it.
    kinds = [type(m).__name__ for m in state.messages]
    assert kinds == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "UserMessage",
        "AssistantMessage",
    ]
    assert state.queued_messages == []


@pytest.mark.parametrize("schema", [False, True])
async def test_a_run_never_completes_with_a_message_queued(store: EventStore, schema: bool) -> None:
    """A follow-up queued while the model writes its final answer is answered first."""
    asked, answer = anyio.Event(), anyio.Event()

    async def script(request: LLMRequest) -> ScriptItem:
        said = users(request)
        if said == ["first"]:
            asked.set()
            await answer.wait()  # the model is "thinking" its final answer
        text = " | ".join(said)
        return ScriptedLLM.finish({"text": text}) if schema else ScriptedLLM.reply(text)

    agent = define_agent(
        "chatter", llm=ScriptedLLM(script), output_schema=_Text if schema else None
    )
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            handle = await executor.execute(agent, "first", session_id="s8")
            await asked.wait()
            sent = await executor.send_message("s8", "second")
            answer.set()
            result = await handle.result()
    assert sent.run_id == handle.run_id  # queued into the run going on
    assert result.status == "completed"
    assert result.output == (_Text(text="first | second") if schema else "first | second")
    log = await store.read("s8")
    assert [e.mode for e in log if isinstance(e, RunStarted)] == ["start"]
    assert sum(isinstance(e, Completed) for e in log) == 1
    assert project_state(log).queued_messages == []


async def test_an_interrupted_session_resumes_with_the_message(store: EventStore) -> None:
    entered = anyio.Event()

    async def block(value: _Empty, ctx: ToolContext) -> str:
        entered.set()
        await anyio.sleep_forever()
        raise AssertionError

    def script(request: LLMRequest) -> ScriptItem:
        if len(request.messages) == 1:
            return call("block", {})
        return ScriptedLLM.reply(" | ".join(users(request)))

    agent = chatter(script, tools=[define_tool("block", "Block.", _Empty, block)])
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            handle = await executor.execute(agent, "go", session_id="s9")
            await entered.wait()
            await handle.interrupt("enough")
            assert (await handle.result()).status == "interrupted"

    # The blocked call is re-run on resume: give it a fresh, non-blocking tool.
    agent2 = chatter(script, tools=[define_tool("block", "Block.", _Empty, _noop)])
    async with AgentExecutor(store, [agent2]) as executor:
        with anyio.fail_after(LIMIT):
            result = await (await executor.send_message("s9", "carry on")).result()
    assert (result.status, result.output) == ("completed", "go | carry on")
    runs = [e for e in await store.read("s9") if isinstance(e, RunStarted)]
    assert [run.mode for run in runs] == ["start", "resume"]


async def test_the_stream_ends_at_a_turn_and_goes_on_after_its_sequence(
    store: EventStore,
) -> None:
    agent = chatter()
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            await (await executor.execute(agent, "one two three", session_id="s10")).result()
            service = executor.service
            first = [event async for event in service.stream("s10", 0)]
            latest = (await service.get_status("s10")).latest_sequence
            # A completed session's stream ends at its end, even from its last sequence.
            assert [event async for event in service.stream("s10", latest)] == [
                EndEvent(output="one two three", state={})
            ]
            await (await executor.send_message("s10", "four")).result()
            second = [event async for event in service.stream("s10", latest)]
    assert isinstance(first[-1], EndEvent)
    chunks = [event for event in second if isinstance(event, ChunkEvent)]
    assert chunks
    assert all(event.sequence > latest for event in chunks)
    texts = "".join(e.chunk.delta for e in chunks if isinstance(e.chunk, TextDelta))
    assert texts == "one two three | four"
    assert isinstance(chunks[-1].chunk, OutputChunk)
    assert second[-1] == EndEvent(output="one two three | four", state={})


async def test_the_model_sees_the_whole_conversation_each_turn(store: EventStore) -> None:
    seen: list[list[str]] = []

    def script(request: LLMRequest) -> ScriptItem:
        seen.append([type(m).__name__[0] for m in request.messages])
        return ScriptedLLM.reply("ok")

    agent = chatter(script)
    async with AgentExecutor(store, [agent]) as executor:
        with anyio.fail_after(LIMIT):
            await (await executor.execute(agent, "a", session_id="s12")).result()
            await (await executor.send_message("s12", "b")).result()
            await (await executor.send_message("s12", [UserMessage(content="c")])).result()
    assert seen == [["U"], ["U", "A", "U"], ["U", "A", "U", "A", "U"]]
    assert isinstance((await executor.state("s12")).messages[-1], AssistantMessage)
