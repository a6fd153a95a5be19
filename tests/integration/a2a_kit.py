"""What the A2A tests share: served agents, a gateway on uvicorn, a2a-sdk clients, messages.

Agents (scripted, no LLM):

- ``writer``: answers ``alpha beta gamma delta``, one word per text delta;
- ``typed``: finishes with the typed output ``{"answer": "forty-two", "count": 42}``;
- ``gated``: says ``before the gate``, calls ``wait_gate`` (which waits for the
  test's :class:`Gate`), then says ``after the gate``; ``gated_out`` likewise,
  then finishes with ``Out(answer="opened")``;
- ``memo``: answers ``turn N: <the last user message>``, N counting the user
  messages it has seen (a follow-up turn remembers the first);
- ``child``: ``hitl_app.worker`` asking the client (``ask_user``) and an approval (``rm``);
- ``approver``: a worker with the approval gate only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx
from a2a.client import A2ACardResolver, Client, ClientConfig, ClientFactory
from a2a.types import Message, Part, Role, StreamResponse
from hitl_app import Out, worker
from pydantic import BaseModel
from servers import serve

from helix_agents import AgentConfig, EventStore, define_agent, define_tool
from helix_agents.bridges.a2a.wire import data_part
from helix_agents.messages import UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.server import AgentServer, create_http_app
from helix_agents.stores import MemoryEventStore

__all__ = [
    "TYPED_OUTPUT",
    "Gate",
    "a2a_client",
    "agents",
    "collect",
    "gateway",
    "user_message",
]

TYPED_OUTPUT = {"answer": "forty-two", "count": 42}


class Typed(BaseModel):
    answer: str
    count: int


class Nothing(BaseModel):
    """``wait_gate``'s input."""


@dataclass
class Gate:
    """What ``gated`` waits on: ``entered`` once it waits, ``release`` to let it go on."""

    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)


def agents(gate: Gate) -> list[AgentConfig]:
    """The served agents (``gated`` waits on ``gate``)."""

    async def wait_gate(value: Nothing, ctx: Any) -> str:
        gate.entered.set()
        await gate.release.wait()
        return "opened"

    gate_tool = define_tool("wait_gate", "Wait for the gate.", Nothing, wait_gate)

    def gated(name: str, last: ScriptStep, output: type[BaseModel] | None) -> AgentConfig:
        first = ScriptStep(text="before the gate", tool_calls=[ScriptedLLM.call("wait_gate", {})])
        return define_agent(
            name,
            tools=[gate_tool],
            output_schema=output,
            llm=ScriptedLLM([first, last], chunk_words=1),
        )

    def memo(request: LLMRequest) -> ScriptStep:
        users = [m for m in request.messages if isinstance(m, UserMessage)]
        return ScriptedLLM.reply(f"turn {len(users)}: {users[-1].content}")

    return [
        define_agent(
            "writer",
            description="writes four words",
            llm=ScriptedLLM([ScriptedLLM.reply("alpha beta gamma delta")], chunk_words=1),
        ),
        define_agent(
            "typed",
            output_schema=Typed,
            llm=ScriptedLLM([ScriptedLLM.finish(TYPED_OUTPUT, text="typed")]),
        ),
        gated("gated", ScriptedLLM.reply("after the gate"), None),
        gated("gated_out", ScriptedLLM.finish({"answer": "opened"}, text="after the gate"), Out),
        define_agent("memo", llm=ScriptedLLM(memo)),
        worker("child", ("ask_user", "rm")),
        worker("approver", ("rm",)),
    ]


@asynccontextmanager
async def gateway(
    gate: Gate | None = None, **options: Any
) -> AsyncIterator[tuple[str, EventStore]]:
    """The agents behind ``create_http_app`` on uvicorn: (its URL, its store)."""
    store = MemoryEventStore()
    server = AgentServer(agents(gate or Gate()), store)
    async with serve(create_http_app(server, **options)) as url:
        yield url, store


async def a2a_client(
    http: httpx.AsyncClient, url: str, agent: str, *, streaming: bool = True
) -> Client:
    """a2a-sdk's client of ``agent`` at the gateway ``url``, from its card."""
    card = await A2ACardResolver(http, f"{url}/a2a/{agent}").get_agent_card()
    return ClientFactory(ClientConfig(streaming=streaming, httpx_client=http)).create(card)


def user_message(
    text: str | None = "hi",
    *,
    message_id: str = "m-1",
    context_id: str = "",
    task_id: str = "",
    data: list[Any] | None = None,
) -> Message:
    """A user message: ``text`` (if any), then a data part per item of ``data``."""
    parts = [Part(text=text)] if text is not None else []
    parts.extend(data_part(value) for value in data or [])
    return Message(
        role=Role.ROLE_USER,
        message_id=message_id,
        context_id=context_id,
        task_id=task_id,
        parts=parts,
    )


async def collect(stream: AsyncIterator[StreamResponse]) -> list[StreamResponse]:
    """Every item of an a2a-sdk stream."""
    return [item async for item in stream]
