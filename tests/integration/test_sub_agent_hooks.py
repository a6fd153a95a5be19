"""Sub-agent hooks see the child's agent type, its config when local, and whether it is remote.

Seed 000 ("Local vs Remote", "Limitations"): ``before_sub_agent`` and
``after_sub_agent`` fire for local and remote sub-agents alike; the payload
carries the agent's config for a local child (none for a remote one) and
whether it is remote. Ours: the ``call`` argument is a ``SubAgentCall`` (a
``ToolCall`` with ``agent_type``, ``agent_config``, ``is_remote`` and the
child's ``session_id``), so hooks written for a plain ``ToolCall`` still work.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from pydantic import BaseModel
from servers import serve

from helix_agents import (
    AgentConfig,
    AgentExecutor,
    AgentHooks,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
)
from helix_agents.children.target import SubAgentCall
from helix_agents.messages import ToolCall
from helix_agents.models import ScriptedLLM
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore
from helix_agents.transports import HttpRemoteAgentTransport

pytestmark = pytest.mark.anyio

LIMIT = 30


class Ask(BaseModel):
    query: str


class Out(BaseModel):
    answer: str


def _child() -> AgentConfig:
    return define_agent(
        "child", output_schema=Out, llm=ScriptedLLM([ScriptedLLM.finish({"answer": "ok"})])
    )


def _root(tool: Any, seen: list[tuple[str, Any]]) -> AgentConfig:
    hooks = AgentHooks(
        before_sub_agent=lambda ctx, call: seen.append(("before", call)),
        after_sub_agent=lambda ctx, call, outcome: seen.append(("after", call)),
    )
    return define_agent(
        "root",
        tools=[tool],
        hooks=hooks,
        llm=ScriptedLLM([[ScriptedLLM.call(tool.name, {"query": "q"})], "done"]),
    )


def _check(seen: list[tuple[str, Any]], *, remote: bool, config: Any, child: str) -> None:
    assert [when for when, _ in seen] == ["before", "after"]
    for _, call in seen:
        assert isinstance(call, SubAgentCall)
        assert isinstance(call, ToolCall)  # hooks written for a ToolCall keep working
        assert (call.id, call.name, call.arguments) == (
            "call_0_0",
            "subagent__child",
            {"query": "q"},
        )
        assert call.agent_type == "child"
        assert call.is_remote is remote
        assert call.agent_config is config
        assert call.session_id == child


async def test_hooks_on_a_local_sub_agent_get_its_config_and_is_remote_false() -> None:
    seen: list[tuple[str, Any]] = []
    child = _child()
    root = _root(create_sub_agent_tool(child, Ask), seen)
    with anyio.fail_after(LIMIT):
        async with AgentExecutor(MemoryEventStore(), [root]) as executor:
            handle = await executor.execute(root, "hi", session_id="h1")
            assert (await handle.result()).status == "completed"
    _check(seen, remote=False, config=child, child="h1-sub-call_0_0")


async def test_hooks_on_a_remote_sub_agent_get_its_type_and_is_remote_true() -> None:
    seen: list[tuple[str, Any]] = []
    app = create_http_app(AgentServer([_child()], MemoryEventStore()))
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
            root = _root(tool, seen)
            async with AgentExecutor(MemoryEventStore(), [root]) as executor:
                handle = await executor.execute(root, "hi", session_id="h2")
                assert (await handle.result()).status == "completed"
    _check(seen, remote=True, config=None, child="h2-remote-call_0_0")
