"""What a child gets from its parent's call: its message and its starting state (specs/runtime.md).

The rule, the same for a local and a remote child: the input's priority field
(``message``, ``query``, ``text``, ``content``: the first holding a string) is
the message when no other field has a value; otherwise the message is the
whole input as JSON, so no field is ever dropped. A child whose custom state
fits the input starts with that state, local or remote alike.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
)
from helix_agents.log import project_state
from helix_agents.messages import UserMessage
from helix_agents.models import ScriptedLLM
from helix_agents.protocol import message_from_input
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.anyio

LIMIT = 30


class Ask(BaseModel):
    query: str
    context: str | None = None


class Seen(BaseModel):
    query: str = ""
    context: str | None = None


class Out(BaseModel):
    answer: str


def _child() -> AgentConfig:
    return define_agent(
        "child",
        state_schema=Seen,
        output_schema=Out,
        llm=ScriptedLLM([ScriptedLLM.finish({"answer": "ok"})]),
    )


def _root(tool: Any) -> AgentConfig:
    return define_agent(
        "root",
        tools=[tool],
        llm=ScriptedLLM([[ScriptedLLM.call(tool.name, CALL)], "done"]),
    )


CALL: dict[str, Any] = {}


def test_the_priority_field_is_the_message_only_when_it_is_the_only_value() -> None:
    assert message_from_input({"query": "moon"}) == "moon"
    assert message_from_input({"query": "moon", "context": None}) == "moon"
    both = {"query": "moon", "context": "tides"}
    assert json.loads(message_from_input(both)) == both
    assert json.loads(message_from_input({"n": 3})) == {"n": 3}
    assert message_from_input("plain") == "plain"


def _first_message(log: list[Any]) -> str:
    first = project_state(log).messages[0]
    assert isinstance(first, UserMessage)
    assert isinstance(first.content, str)
    return first.content


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"query": "moon", "context": "tides"}, '{"query":"moon","context":"tides"}'),
        ({"query": "moon"}, "moon"),
    ],
    ids=["two-fields", "only-the-priority-field"],
)
async def test_a_local_child_gets_every_field_and_its_state(
    call: dict[str, Any], message: str
) -> None:
    CALL.clear()
    CALL.update(call)
    store = MemoryEventStore()
    root = _root(create_sub_agent_tool(_child(), Ask))
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(store, [root]) as executor:
            handle = await executor.execute(root, "hi", session_id="c1")
            assert (await handle.result()).status == "completed"
        log = list(await store.read("c1-sub-call_0_0"))
    assert _first_message(log) == message
    assert project_state(log).custom_state == {"context": None, **call}


@pytest.mark.parametrize(
    ("call", "message"),
    [
        ({"query": "tides", "context": "moon"}, '{"query":"tides","context":"moon"}'),
        ({"query": "tides"}, "tides"),
    ],
    ids=["two-fields", "only-the-priority-field"],
)
async def test_a_remote_child_gets_every_field_and_its_state(
    call: dict[str, Any], message: str
) -> None:
    CALL.clear()
    CALL.update(call)
    remote_store = MemoryEventStore()
    app = create_http_app(AgentServer([_child()], remote_store))
    with anyio.fail_after(LIMIT):
        async with (
            serve(app) as url,
            HttpRemoteAgentTransport(url, max_retries=1, timeout=10) as transport,
        ):
            tool = create_remote_sub_agent_tool(
                "child",
                description="the child, remote",
                input_schema=Ask,
                output_schema=Out,
                transport=transport,
                remote_agent_type="child",
            )
            root = _root(tool)
            async with AgentExecutor(MemoryEventStore(), [root]) as executor:
                handle = await executor.execute(root, "hi", session_id="c2")
                assert (await handle.result()).status == "completed"
            log = list(await remote_store.read("c2-remote-call_0_0"))
    assert _first_message(log) == message
    assert project_state(log).custom_state == {"context": None, **call}
