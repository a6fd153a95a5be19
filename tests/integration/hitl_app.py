"""Agents for the human-in-the-loop tests over real servers (``test_hitl_*.py``).

Importable both by the tests (as ``hitl_app``) and by a served subprocess
(``helix-agents serve tests.integration.hitl_app:ATTR`` from the repository
root), so both sides agree on the schemas and the scripts.

- a **worker** asks the client (``ask_user``, a client tool with an output
  schema) and/or removes a file (``rm``, behind an approval gate), then
  finishes with an :class:`Out` whose ``answer`` lists every tool result it
  saw (so a denial's reason reaches the output: the LLM saw it);
- a **relay** delegates to one sub-agent tool (local or remote), then
  finishes with ``relay(<the child's result>)``;
- the **root** delegates likewise and ends with the text ``root got: ...``.

Scripts are functions of the conversation (``ScriptedLLM``), so a session
resumed after a crash gets the same answers again.

Served attributes (for subprocesses): ``child_agents`` (``child`` -> local
``grand`` with both tools) and, built on first access from the
``HITL_CHILD_URL`` environment variable, ``root_agents`` (``root`` -> remote
``child`` over HTTP at that URL).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    RemoteAgentTransport,
    ToolContext,
    create_remote_sub_agent_tool,
    create_sub_agent_tool,
    define_agent,
    define_tool,
)
from helix_agents.agents import RemoteSubAgentTool, SubAgentTool
from helix_agents.messages import AssistantMessage, ToolResultMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep

__all__ = [
    "ASK_ARGS",
    "RM_ARGS",
    "Ask",
    "Color",
    "Out",
    "Query",
    "ask_user",
    "relay",
    "remote_tool",
    "removed",
    "rm",
    "root_agent",
    "worker",
]


class Query(BaseModel):
    """A delegation's input."""

    query: str


class Out(BaseModel):
    """Every worker's and relay's output."""

    answer: str


class Ask(BaseModel):
    """The input of ``ask_user`` and ``rm``."""

    question: str


class Color(BaseModel):
    """What the client must answer to ``ask_user``."""

    color: str


removed: list[str] = []
"""What ``rm`` removed in this process (it only runs once approved)."""


def _remove(value: Ask, ctx: ToolContext) -> dict[str, str]:
    removed.append(value.question)
    return {"removed": value.question}


ask_user = define_tool("ask_user", "Ask the user.", Ask, "client", output_schema=Color)
rm = define_tool("rm", "Remove a file.", Ask, _remove, requires_approval=True)

ASK_ARGS = {"question": "favourite colour?"}
RM_ARGS = {"question": "/tmp/scratch"}


def _turn(request: LLMRequest) -> int:
    return sum(1 for message in request.messages if isinstance(message, AssistantMessage))


def _results(request: LLMRequest) -> str:
    """The tool results the model sees, ``name=content``, sorted (their order may vary)."""
    seen = sorted(
        f"{message.tool_name}={message.content}"
        for message in request.messages
        if isinstance(message, ToolResultMessage)
    )
    return "; ".join(seen)


def worker(name: str, tools: Sequence[str] = ("ask_user",)) -> AgentConfig:
    """An agent that calls ``tools`` (``ask_user`` and/or ``rm``) in one turn, then finishes."""
    calls = [
        ScriptedLLM.call("ask_user", ASK_ARGS)
        if tool == "ask_user"
        else ScriptedLLM.call("rm", RM_ARGS)
        for tool in tools
    ]

    def script(request: LLMRequest) -> ScriptStep:
        if _turn(request) == 0:
            return ScriptStep(text=f"{name} needs a person", tool_calls=calls)
        return ScriptedLLM.finish({"answer": _results(request)}, text=f"{name} is done")

    return define_agent(
        name, tools=[ask_user, rm], output_schema=Out, llm=ScriptedLLM(script, chunk_words=2)
    )


def _delegating_script(name: str, tool_name: str, *, final: bool) -> Any:
    def script(request: LLMRequest) -> ScriptStep:
        if _turn(request) == 0:
            return ScriptStep(
                text=f"{name} delegates",
                tool_calls=[ScriptedLLM.call(tool_name, {"query": f"from {name}"})],
            )
        if final:
            return ScriptStep(text=f"root got: {_results(request)}")
        return ScriptedLLM.finish({"answer": f"relay({_results(request)})"})

    return script


def relay(name: str, tool: SubAgentTool[Any] | RemoteSubAgentTool[Any]) -> AgentConfig:
    """An agent that delegates to ``tool`` once, then finishes with the child's result."""
    return define_agent(
        name,
        tools=[tool],
        output_schema=Out,
        llm=ScriptedLLM(_delegating_script(name, tool.name, final=False)),
    )


def root_agent(
    tool: SubAgentTool[Any] | RemoteSubAgentTool[Any], name: str = "root"
) -> AgentConfig:
    """The root: delegates to ``tool`` once, then answers ``root got: <the child's result>``."""
    return define_agent(
        name, tools=[tool], llm=ScriptedLLM(_delegating_script(name, tool.name, final=True))
    )


def remote_tool(
    name: str, transport: RemoteAgentTransport, **options: Any
) -> RemoteSubAgentTool[Query]:
    """``subagent__<name>``: the remote agent ``name`` over ``transport``."""
    return create_remote_sub_agent_tool(
        name,
        description=f"{name} (remote)",
        input_schema=Query,
        output_schema=Out,
        transport=transport,
        remote_agent_type=name,
        stream_retry_base=0.05,
        **options,
    )


child_agents = {
    "child": relay("child", create_sub_agent_tool(worker("grand", ("ask_user", "rm")), Query))
}
"""Served by server B: ``child`` delegates to a local ``grand`` that asks and removes."""


def __getattr__(attribute: str) -> Any:
    if attribute == "root_agents":
        from helix_agents.transports import HttpRemoteAgentTransport

        transport = HttpRemoteAgentTransport(
            os.environ["HITL_CHILD_URL"], max_retries=2, retry_base_delay=0.05, timeout=10
        )
        # Many stream retries: a restarted server B comes back within them.
        return {"root": root_agent(remote_tool("child", transport, stream_retries=20))}
    raise AttributeError(attribute)


paused_agents = {"asker": worker("asker")}
"""One ``asker`` that pauses on its ``ask_user`` client tool (``test_serve_shutdown.py``)."""
