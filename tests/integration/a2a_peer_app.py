"""A reference A2A server written with a2a-sdk's own server classes (not our bridge).

The peer a helix parent reaches through ``A2ARemoteAgentTransport`` in the
tests: each agent is an SDK ``AgentExecutor`` behind the SDK's
``DefaultRequestHandler``, ``InMemoryTaskStore``, JSON-RPC routes and card
routes, served at ``/{name}`` (its card at ``/{name}/.well-known/agent-card.json``):

- ``researcher``: streams ``CHUNKS`` text chunks into one artifact, then an
  ``output`` artifact holding ``{"findings": ..., "sources": 3}``, and completes;
- ``asker``: says it will ask, goes ``input-required`` ("What colour?"), and on
  the next message completes with ``{"answer": "colour=<the answer>"}``;
- ``slow``: streams a chunk, then waits for :attr:`Peer.release` before the
  rest (a test cuts or cancels it meanwhile); a cancel ends it ``canceled``;
- ``replier``: answers with a message (text and ``{"answer": "quick"}``), no task;
- ``wrong``: completes with an output that matches no schema of ours;
- ``texter``: streams ``TEXT`` as text chunks into one artifact and completes,
  with no data part (what most A2A agents do).

``Peer.seen`` records every message each agent received (role, parts, ids).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

import anyio
from a2a.helpers.proto_helpers import new_task
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentSkill,
    Message,
    Part,
    Role,
    TaskState,
)
from google.protobuf import json_format, struct_pb2
from starlette.applications import Starlette

__all__ = ["CHUNKS", "FINDINGS", "TEXT", "TEXT_CHUNKS", "Peer"]

CHUNKS = 5
FINDINGS = {"findings": "logs replay", "sources": 3}
TEXT_CHUNKS = ["Here are my findings: ", "logs replay, ", "from 3 sources."]
TEXT = "".join(TEXT_CHUNKS)


def _data(value: Any) -> Part:
    holder = struct_pb2.Value()
    json_format.ParseDict(value, holder)
    return Part(data=holder)


@dataclass
class Peer:
    """The served agents' shared state: what they saw, and the gate of ``slow``."""

    base: str = ""
    seen: dict[str, list[Message]] = field(default_factory=dict)
    release: anyio.Event = field(default_factory=anyio.Event)
    slow_started: anyio.Event = field(default_factory=anyio.Event)
    cancels: int = 0

    def card(self, name: str) -> AgentCard:
        """The card of agent ``name`` at ``self.base``."""
        return AgentCard(
            name=name,
            description=f"reference {name}",
            version="1.0",
            supported_interfaces=[
                AgentInterface(
                    protocol_binding="JSONRPC", url=f"{self.base}/{name}", protocol_version="1.0"
                )
            ],
            capabilities=AgentCapabilities(streaming=True),
            default_input_modes=["text/plain", "application/json"],
            default_output_modes=["text/plain", "application/json"],
            skills=[AgentSkill(id=name, name=name, description=name, tags=["test"])],
        )

    def app(self) -> Starlette:
        """The Starlette app serving every agent (set :attr:`base` before cards are read)."""
        routes = []
        for name in ("researcher", "asker", "slow", "replier", "wrong", "texter"):
            card = self.card(name)  # placeholder URL: the modifier fills in the base

            async def modify(card: AgentCard, name: str = name) -> AgentCard:
                return self.card(name)

            handler = DefaultRequestHandler(
                agent_executor=_Agent(self, name), task_store=InMemoryTaskStore(), agent_card=card
            )
            routes.extend(
                create_agent_card_routes(
                    card, card_modifier=modify, card_url=f"/{name}/.well-known/agent-card.json"
                )
            )
            routes.extend(create_jsonrpc_routes(handler, f"/{name}"))
        return Starlette(routes=routes)


class _Agent(AgentExecutor):  # type: ignore[misc]
    def __init__(self, peer: Peer, name: str) -> None:
        self.peer = peer
        self.name = name

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        assert context.message is not None
        self.peer.seen.setdefault(self.name, []).append(context.message)
        task_id = context.task_id or str(uuid.uuid4())
        context_id = context.context_id or str(uuid.uuid4())
        if self.name == "replier":
            await event_queue.enqueue_event(
                Message(
                    role=Role.ROLE_AGENT,
                    message_id=str(uuid.uuid4()),
                    context_id=context_id,
                    parts=[Part(text="a quick reply"), _data({"answer": "quick"})],
                )
            )
            return
        if context.current_task is None:
            await event_queue.enqueue_event(
                new_task(task_id, context_id, TaskState.TASK_STATE_SUBMITTED)
            )
        updater = TaskUpdater(event_queue, task_id, context_id)
        await updater.start_work()
        if self.name == "asker":
            await self._ask(context, updater)
        elif self.name == "slow":
            await updater.add_artifact([Part(text="first ")], artifact_id="text")
            self.peer.slow_started.set()
            await self.peer.release.wait()
            await updater.add_artifact([Part(text="second")], artifact_id="text", append=True)
            await updater.add_artifact([_data(FINDINGS)], artifact_id="output", name="output")
            await updater.complete()
        elif self.name == "texter":
            for index, chunk in enumerate(TEXT_CHUNKS):
                await updater.add_artifact(
                    [Part(text=chunk)], artifact_id="answer", append=index > 0
                )
            await updater.complete()
        elif self.name == "wrong":
            await updater.add_artifact([_data({"nothing": "useful"})], name="output")
            await updater.complete()
        else:
            for index in range(CHUNKS):
                await updater.add_artifact(
                    [Part(text=f"part {index} ")], artifact_id="text", append=index > 0
                )
            await updater.add_artifact([_data(FINDINGS)], artifact_id="output", name="output")
            await updater.complete()

    async def _ask(self, context: RequestContext, updater: TaskUpdater) -> None:
        task = context.current_task
        if task is None or task.status.state != TaskState.TASK_STATE_INPUT_REQUIRED:
            await updater.add_artifact([Part(text="let me ask. ")], artifact_id="text")
            question = updater.new_agent_message([Part(text="What colour?")])
            await updater.requires_input(message=question)
            return
        assert context.message is not None
        answer = " ".join(p.text for p in context.message.parts if p.HasField("text"))
        await updater.add_artifact([Part(text=f"got {answer}")], artifact_id="text", append=True)
        await updater.add_artifact(
            [_data({"answer": f"colour={answer}"})], artifact_id="output", name="output"
        )
        await updater.complete()

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        self.peer.cancels += 1
        assert context.task_id is not None
        assert context.context_id is not None
        await TaskUpdater(event_queue, context.task_id, context.context_id).cancel()
