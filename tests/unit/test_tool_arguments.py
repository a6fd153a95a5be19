"""Arguments the model broke: malformed JSON is named as such, and the run goes on.

An adapter keeps tool-call arguments that are not valid JSON as the raw string
(specs/llm.md); the scripted model hands such a string over as it is. The tool
result the model reads says the JSON was malformed and where, with the text
trimmed, and the model can call again.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel

from helix_agents import AgentExecutor, create_sub_agent_tool, define_agent, tool
from helix_agents.events import Event, ToolEnd
from helix_agents.messages import ToolResultMessage
from helix_agents.models import ScriptedLLM
from helix_agents.runtime.tool_runner import InvalidArguments, decode_arguments
from helix_agents.stores import MemoryEventStore

call, finish, reply = ScriptedLLM.call, ScriptedLLM.finish, ScriptedLLM.reply


@tool
def word_count(text: str) -> int:
    """Count the words of a text."""
    return len(text.split())


class Answer(BaseModel):
    answer: str


def tool_errors(events: list[Event]) -> list[str | None]:
    return [event.error for event in events if isinstance(event, ToolEnd)]


def results(events: list[Event]) -> list[str]:
    return [
        event.message.content
        for event in events
        if hasattr(event, "message") and isinstance(event.message, ToolResultMessage)
    ]


async def run(agent: Any) -> tuple[Any, list[Event]]:
    store = MemoryEventStore()
    with anyio.fail_after(10):
        async with AgentExecutor(store, [agent]) as executor:
            handle = await executor.execute(agent, "count", session_id="s")
            result = await handle.result()
    return result, await store.read("s")


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (
            '{"text": "abc',
            "invalid arguments: not valid JSON (Unterminated string starting at line 1 "
            'column 10): \'{"text": "abc\'',
        ),
        (
            '{"text": "abc" "n": 1}',
            "invalid arguments: not valid JSON (Expecting ',' delimiter at line 1 column 16): "
            '\'{"text": "abc" "n": 1}\'',
        ),
    ],
    ids=["truncated", "missing-comma"],
)
async def test_malformed_json_arguments_tell_the_model_where_and_the_run_goes_on(
    raw: str, expected: str
) -> None:
    agent = define_agent(
        "counter",
        tools=[word_count],
        llm=ScriptedLLM([[call("word_count", raw)], [call("word_count", {"text": "a b"})], "2"]),
    )
    result, events = await run(agent)
    assert result.status == "completed"
    assert result.output == "2"
    assert tool_errors(events) == [expected, None]
    assert json.loads(results(events)[0]) == {"error": expected}


async def test_a_string_that_is_valid_json_is_decoded_and_validated() -> None:
    agent = define_agent(
        "counter",
        tools=[word_count],
        llm=ScriptedLLM([[call("word_count", '{"text": "one two three"}')], "3"]),
    )
    result, events = await run(agent)
    assert result.status == "completed"
    assert tool_errors(events) == [None]
    assert results(events) == ["3"]


async def test_a_malformed_finish_says_so_and_a_good_one_completes() -> None:
    agent = define_agent(
        "answerer",
        output_schema=Answer,
        llm=ScriptedLLM([finish('{"answer": "lo'), finish({"answer": "logs"})]),
    )
    result, events = await run(agent)
    assert result.status == "completed"
    assert result.output == Answer(answer="logs")
    first = tool_errors(events)[0]
    assert first is not None
    assert first.startswith("invalid arguments: not valid JSON (Unterminated string")


async def test_a_malformed_sub_agent_call_is_a_tool_error_the_parent_reads() -> None:
    child = define_agent(
        "child", output_schema=Answer, llm=ScriptedLLM([finish({"answer": "from the child"})])
    )

    class Ask(BaseModel):
        question: str

    parent = define_agent(
        "parent",
        tools=[create_sub_agent_tool(child, Ask)],
        llm=ScriptedLLM([[call("subagent__child", '{"question": ')], "gave up"]),
    )
    result, events = await run(parent)
    assert result.status == "completed"
    [error] = tool_errors(events)
    assert error is not None
    assert error.startswith("invalid arguments: not valid JSON (Expecting value at line 1 column")


def test_long_arguments_are_trimmed_keeping_both_ends() -> None:
    raw = '{"text": "' + "word " * 100
    with pytest.raises(InvalidArguments) as caught:
        decode_arguments(raw)
    message = str(caught.value)
    assert len(message) < 320
    assert '\'{"text": "word word' in message
    assert "..." in message
    assert message.endswith("word word word '")  # the end, where the JSON broke off
    assert decode_arguments("") == {}
    assert decode_arguments({"a": 1}) == {"a": 1}
