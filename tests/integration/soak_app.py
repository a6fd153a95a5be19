"""The soak test's agents: a 3-deep tree whose sub-agent calls go over NATS, host to host.

Served by ``helix-agents host tests.integration.soak_app:agents --nats URL``
(``test_nats_soak.py``) with ``HELIX_SOAK_NATS`` set to the same URL: each
delegation goes through the fleet, so a tree spans hosts.

- ``soak_root`` delegates to ``soak_mid`` (remote), then finishes with
  ``root(<mid's answer>)``;
- ``soak_mid`` delegates to ``soak_leaf`` (remote), then finishes with
  ``mid(<leaf's answer>)``;
- ``soak_leaf`` streams a few one-word text deltas and finishes with
  ``leaf(<its input>)``.

Scripts are functions of the conversation, so a run taken over after its host
died gets the same answers again. The NATS client behind the remote calls is
connected on first use, inside the host's event loop (:class:`LazyNatsTransport`).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import nats
from pydantic import BaseModel

from helix_agents import create_remote_sub_agent_tool, define_agent
from helix_agents.messages import AssistantMessage, ToolResultMessage, UserMessage
from helix_agents.models import LLMRequest, ScriptedLLM, ScriptStep
from helix_agents.protocol import (
    RemoteMessageRequest,
    RemoteMessageResponse,
    RemoteResumeRequest,
    RemoteStartRequest,
    RemoteStartResponse,
    RemoteStatusResponse,
    SubmitResponse,
    TransportEvent,
)
from helix_agents.stores import JetStreamEventStore
from helix_agents.transports.nats import NatsRemoteAgentTransport

__all__ = [
    "LEAF_WORDS",
    "Answer",
    "LazyNatsTransport",
    "Query",
    "agents",
    "await_chain",
    "expected_output",
]

NATS_ENV = "HELIX_SOAK_NATS"
LEAF_WORDS = 6
"""Text deltas in one uninterrupted leaf step (one word each)."""
DELTA_DELAY = 0.02
"""Seconds between a leaf's text deltas: a leaf runs for about 0.1 s, so kills catch runs."""


class Query(BaseModel):
    """Every agent's input (as a delegation's arguments)."""

    query: str


class Answer(BaseModel):
    """Every agent's output."""

    answer: str


def expected_output(query: str) -> dict[str, Any]:
    """The root's output for ``query``."""
    return {"answer": f"root(mid(leaf({query})))"}


class LazyNatsTransport:
    """A ``NatsRemoteAgentTransport`` on ``$HELIX_SOAK_NATS``, connected on first use."""

    def __init__(self) -> None:
        self._inner: NatsRemoteAgentTransport | None = None
        self._lock: anyio.Lock | None = None

    async def _transport(self) -> NatsRemoteAgentTransport:
        if self._lock is None:
            self._lock = anyio.Lock()
            # SIGUSR1 (the soak sends it to a host when a tree is stuck): where every task waits.
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks)
        async with self._lock:
            if self._inner is None:
                url = os.environ[NATS_ENV]
                store = await JetStreamEventStore.connect(url)
                nc = await nats.connect(
                    servers=url.split(","), allow_reconnect=True, max_reconnect_attempts=-1
                )
                # Generous retries: a start may land while a host dies or a node elects.
                self._inner = NatsRemoteAgentTransport(
                    nc, store, timeout=5.0, max_retries=6, retry_base_delay=0.2
                )
        return self._inner

    async def start(self, request: RemoteStartRequest) -> RemoteStartResponse:
        """Start on the fleet."""
        return await (await self._transport()).start(request)

    async def resume(self, request: RemoteResumeRequest) -> RemoteStartResponse:
        """Resume on the fleet."""
        return await (await self._transport()).resume(request)

    async def send_message(self, request: RemoteMessageRequest) -> RemoteMessageResponse:
        """A follow-up, on the fleet."""
        return await (await self._transport()).send_message(request)

    async def stream(
        self, session_id: str, from_sequence: int = 0
    ) -> AsyncIterator[TransportEvent]:
        """The session's stream, from the shared store."""
        async for event in (await self._transport()).stream(session_id, from_sequence):
            yield event

    async def get_status(self, session_id: str) -> RemoteStatusResponse:
        """The session's status, from the fleet."""
        return await (await self._transport()).get_status(session_id)

    async def interrupt(self, session_id: str, reason: str | None = None) -> None:
        """Interrupt, on the fleet."""
        await (await self._transport()).interrupt(session_id, reason)

    async def abort(self, session_id: str, reason: str | None = None) -> None:
        """Abort, on the fleet."""
        await (await self._transport()).abort(session_id, reason)

    async def submit_tool_result(
        self, session_id: str, tool_call_id: str, result: Any = None, error: str | None = None
    ) -> SubmitResponse:
        """Answer a client tool, on the fleet."""
        return await (await self._transport()).submit_tool_result(
            session_id, tool_call_id, result, error
        )

    async def submit_approval(
        self,
        session_id: str,
        tool_call_id: str,
        approved: bool,
        reason: str | None = None,
        *,
        decided_by: str | None = None,
    ) -> SubmitResponse:
        """Answer an approval, on the fleet."""
        return await (await self._transport()).submit_approval(
            session_id, tool_call_id, approved, reason, decided_by=decided_by
        )


def await_chain(task: asyncio.Task[Any]) -> list[str]:
    """Where a task waits: each coroutine or async generator it awaits, outermost first."""
    chain: list[str] = []
    awaited: Any = task.get_coro()
    while awaited is not None and len(chain) < 60:
        frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "ag_frame", None)
        if frame is None:
            # An async generator's asend() hides its generator: find it among its referents.
            inner = [o for o in gc.get_referents(awaited) if getattr(o, "ag_frame", None)]
            if not inner:
                chain.append(repr(awaited)[:120])
                break
            awaited = inner[0]
            continue
        chain.append(f"{frame.f_code.co_filename}:{frame.f_lineno} {frame.f_code.co_name}")
        awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "ag_await", None)
    return chain


def _dump_tasks() -> None:
    out: list[str] = []
    for task in asyncio.all_tasks():
        chain = await_chain(task)
        if any(part in line for line in chain for part in ("child_link", " pump", "stream")):
            out.append("\n  ".join(["task:", *chain]))
    sys.stderr.write("TASKS\n" + "\n".join(out)[-20000:] + "\nEND TASKS\n")
    sys.stderr.flush()


_transport = LazyNatsTransport()


def _query(request: LLMRequest) -> str:
    return next(m.content for m in request.messages if isinstance(m, UserMessage))


def _delegating(name: str, child: str) -> Any:
    """A script: call ``child`` with the query; then finish with ``name(<its answer>)``."""

    def script(request: LLMRequest) -> ScriptStep:
        turn = sum(1 for m in request.messages if isinstance(m, AssistantMessage))
        if turn == 0:
            call = ScriptedLLM.call(f"subagent__{child}", {"query": _query(request)}, id="c1")
            return ScriptStep(tool_calls=[call])
        result = next(m.content for m in request.messages if isinstance(m, ToolResultMessage))
        answer = Answer.model_validate_json(result).answer
        return ScriptedLLM.finish({"answer": f"{name}({answer})"}, text=f"{name} done")

    return script


def _leaf(request: LLMRequest) -> ScriptStep:
    words = " ".join(f"w{n}" for n in range(LEAF_WORDS))
    return ScriptedLLM.finish({"answer": f"leaf({_query(request)})"}, text=words)


def _remote(child: str) -> Any:
    return create_remote_sub_agent_tool(
        child,
        description=f"{child} (remote, over NATS)",
        input_schema=Query,
        output_schema=Answer,
        transport=_transport,
        remote_agent_type=f"soak_{child}",
        stream_retries=8,  # a node's death drops streams until a leader is elected
        stream_retry_base=0.1,
    )


agents = [
    define_agent(
        "soak_root",
        output_schema=Answer,
        tools=[_remote("mid")],
        llm=ScriptedLLM(_delegating("root", "mid")),
    ),
    define_agent(
        "soak_mid",
        output_schema=Answer,
        tools=[_remote("leaf")],
        llm=ScriptedLLM(_delegating("mid", "leaf")),
    ),
    define_agent(
        "soak_leaf",
        output_schema=Answer,
        llm=ScriptedLLM(_leaf, chunk_words=1, delta_delay=DELTA_DELAY),
    ),
]
"""What every host of the soak serves."""
