"""Agents and log readers shared by the companion tests (specs/companions.md).

The children's models wait on :class:`Gates` where a test needs a child to be
live; nothing sleeps. ``deliveries`` counts how a parent's log delivered each
child outcome, so a test can assert exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import anyio
from pydantic import BaseModel

from helix_agents import (
    AgentConfig,
    EventStore,
    PersistentAgent,
    RemoteAgentTransport,
    define_agent,
)
from helix_agents.events import (
    CompletionDelivered,
    Event,
    MessageAppended,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
)
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM
from helix_agents.models.scripted import ScriptItem

call = ScriptedLLM.call
finish = ScriptedLLM.finish


class Verdict(BaseModel):
    """The critic's typed answer."""

    verdict: str
    notes: str


class Report(BaseModel):
    """A worker's typed answer."""

    text: str


class Gates:
    """Named events a child's model waits on before it answers (``open`` releases one)."""

    def __init__(self) -> None:
        self._gates: dict[str, anyio.Event] = {}

    def gate(self, name: str) -> anyio.Event:
        return self._gates.setdefault(name, anyio.Event())

    def open(self, name: str) -> None:
        self.gate(name).set()


def user_texts(request: LLMRequest) -> list[str]:
    return [m.content for m in request.messages if isinstance(m, UserMessage)]


def critic(*, name: str = "critic") -> AgentConfig:
    """Passes the artifact once it has seen two versions (so it must remember round 1)."""

    def script(request: LLMRequest) -> ScriptItem:
        asks = [t for t in user_texts(request) if t.startswith("Review")]
        verdict = "pass" if len(asks) >= 2 else "revise"
        return finish({"verdict": verdict, "notes": f"round {len(asks)}: seen {asks}"})

    return define_agent(name, output_schema=Verdict, llm=ScriptedLLM(script))


def worker(gates: Gates, *, name: str = "worker") -> AgentConfig:
    """Answers each message once its gate (the message text) opens; 'fail' makes it fail."""

    async def script(request: LLMRequest) -> ScriptItem:
        last = user_texts(request)[-1]
        await gates.gate(last).wait()
        if last.startswith("fail"):
            return ScriptedLLM.fail(f"worker failed on {last!r}")
        return finish({"text": f"done: {last} (turn {len(user_texts(request))})"})

    return define_agent(name, output_schema=Report, llm=ScriptedLLM(script))


def parent(
    script: Sequence[ScriptItem] | Any,
    companions: Sequence[PersistentAgent],
    *,
    name: str = "lead",
    max_steps: int = 20,
) -> AgentConfig:
    return define_agent(
        name, llm=ScriptedLLM(script), persistent_agents=companions, max_steps=max_steps
    )


def tool_results(log: Sequence[Event]) -> dict[str, Any]:
    """Each call's result as the model read it (JSON decoded when it is JSON)."""
    results: dict[str, Any] = {}
    for event in log:
        if isinstance(event, MessageAppended) and isinstance(event.message, ToolResultMessage):
            try:
                results[event.message.tool_call_id] = json.loads(event.message.content)
            except ValueError:
                results[event.message.tool_call_id] = event.message.content
    return results


def notices(log: Sequence[Event]) -> list[str]:
    """The pushed outcome messages in a parent's log."""
    return [
        event.message.content
        for event in log
        if isinstance(event, MessageAppended)
        and isinstance(event.message, UserMessage)
        and event.message.content.startswith("Sub-agent ")
    ]


def deliveries(log: Sequence[Event]) -> dict[str, list[str]]:
    """Per child session, how each recorded outcome was delivered (pull/push), in order."""
    seen: dict[str, list[str]] = {}
    for event in log:
        if isinstance(event, CompletionDelivered):
            seen.setdefault(event.sub_session_id, []).append(event.via)
    return seen


def outcomes(log: Sequence[Event]) -> dict[str, int]:
    """Per child session, how many turn ends the parent recorded (terminations excluded)."""
    ends: dict[str, int] = {}
    open_: set[str] = set()
    for event in log:
        if isinstance(event, SubSessionStarted | SubSessionResumed):
            open_.add(event.sub_session_id)
        elif isinstance(event, SubSessionFinished) and event.sub_session_id in open_:
            open_.discard(event.sub_session_id)
            if event.status != "terminated":
                ends[event.sub_session_id] = ends.get(event.sub_session_id, 0) + 1
    return ends


def model_calls(log: Sequence[Event]) -> int:
    return sum(
        1
        for event in log
        if isinstance(event, MessageAppended) and isinstance(event.message, AssistantMessage)
    )


async def settled(store: EventStore, session_id: str, status: str = "completed") -> list[Event]:
    """Wait (tailing the log, no polling) until ``session_id``'s log says ``status``."""
    from helix_agents.log import project_state

    async for _ in store.tail(session_id, 0):
        log = await store.read(session_id)
        if log and project_state(log).status == status:
            return log
    raise AssertionError("tail ended")


def transport_of(entry: PersistentAgent) -> RemoteAgentTransport | None:
    return entry.transport
