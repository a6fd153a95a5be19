"""Sub-agent calls: start or reopen a child session through a transport, forward its stream.

Every child, local or remote, is its own session reached through a
:class:`~helix_agents.RemoteAgentTransport`. The parent appends each chunk it
receives as ``child_chunk_forwarded`` with the child's seq; whether a chunk is
new is decided against the parent's *log* (``SubSessionRef.last_child_seq``)
under the writer's lock, so a redelivered chunk is dropped, never appended,
and after a crash forwarding resumes from exactly the last seq held.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio
import msgspec
from pydantic import BaseModel

from ._aio import prefetch
from .errors import AgentServerError, StreamDropError, TransportError
from .events import (
    ChildChunkForwarded,
    Event,
    RemoteRef,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
)
from .protocol import ChunkEvent, EndEvent, ErrorEvent
from .session_writer import SessionWriter
from .state import SessionState
from .transport import RemoteAgentTransport

__all__ = [
    "ChildOutcome",
    "ChildTarget",
    "child_session_id",
    "forward_child",
    "remote_session_id",
    "retrying",
    "sub_agent_end",
    "sub_agent_start",
]


log = logging.getLogger("helix_agents")

T = TypeVar("T")


class ChildOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a child's run ended, as seen through its stream."""

    status: Literal["completed", "failed", "interrupted"]
    output: Any = None
    error: str | None = None


def child_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The deterministic id of a local sub-agent's session: ``{parent}-sub-{call id}``."""
    return f"{parent_session_id}-sub-{tool_call_id}"


def remote_session_id(parent_session_id: str, tool_call_id: str) -> str:
    """The deterministic id of a remote sub-agent's session: ``{parent}-remote-{call id}``."""
    return f"{parent_session_id}-remote-{tool_call_id}"


@dataclass(frozen=True, kw_only=True)
class ChildTarget:
    """Where one sub-agent call's child session lives and how to reach it."""

    session_id: str
    agent_type: str
    transport: RemoteAgentTransport
    remote: RemoteRef | None = None
    state_schema: type[BaseModel] | None = None
    output_schema: type[BaseModel] | None = None
    timeout: float | None = None
    stream_retries: int = 3
    stream_retry_base: float = 0.1


def sub_agent_start(
    parent: SessionState, child_id: str, child_type: str, tool_call_id: str, value: Any
) -> SubAgentStart:
    """The parent's ``subagent_start`` chunk."""
    return SubAgentStart(
        agent_id=parent.session_id,
        agent_type=parent.agent_type,
        sub_agent_id=child_id,
        sub_agent_type=child_type,
        tool_call_id=tool_call_id,
        parent_session_id=parent.session_id,
        input=value,
    )


def sub_agent_end(
    parent: SessionState, child_id: str, child_type: str, tool_call_id: str, outcome: ChildOutcome
) -> list[Event]:
    """The parent's record of a child's end: ``sub_session_finished`` and ``subagent_end``."""
    return [
        SubSessionFinished(
            sub_session_id=child_id,
            status=outcome.status,
            output=outcome.output,
            error=outcome.error,
        ),
        SubAgentEnd(
            agent_id=parent.session_id,
            agent_type=parent.agent_type,
            sub_agent_id=child_id,
            sub_agent_type=child_type,
            tool_call_id=tool_call_id,
            parent_session_id=parent.session_id,
            success=outcome.status == "completed",
            result=outcome.output,
            error=outcome.error,
        ),
    ]


def _transient(exc: BaseException) -> bool:
    """A failure worth retrying: the network, or the server's INTERNAL_ERROR (a 5xx)."""
    if isinstance(exc, AgentServerError):
        return exc.code == "INTERNAL_ERROR"
    return isinstance(exc, TransportError) and not isinstance(exc, StreamDropError)


async def retrying(call: Callable[[], Awaitable[T]], *, retries: int, base_delay: float) -> T:
    """Await ``call()``, retrying transient failures with backoff ``base * 2**n``.

    Only for idempotent calls (start with a fixed session id, resume, status).
    """
    attempt = 0
    while True:
        try:
            return await call()
        except (TransportError, AgentServerError) as exc:
            if not _transient(exc) or attempt >= retries:
                raise
            attempt += 1
            await anyio.sleep(base_delay * 2 ** (attempt - 1))


async def forward_child(
    writer: SessionWriter,
    transport: RemoteAgentTransport,
    child_id: str,
    *,
    stream_retries: int = 3,
    retry_base_delay: float = 0.1,
) -> ChildOutcome:
    """Forward the child's chunks into the parent's log until the child's run ends.

    A stream that stops without ``end``/``error`` is reconnected from the last
    seq held, with backoff; ``stream_retries`` bounds the drops in a row (a
    connection that delivered new chunks resets the count), then
    :class:`StreamDropError`.
    """
    drops = 0
    # The last child seq held: the log's, plus what this call has emitted and
    # not yet seen committed. Only this call forwards this child's chunks.
    held = writer.held_child_seq(child_id)
    while True:
        before = held
        try:
            async with prefetch(transport.stream(child_id, held)) as events:
                async for batch in events.batches():
                    forwarded: list[Event] = []
                    for event in batch:
                        if isinstance(event, ChunkEvent) and event.sequence > held:
                            held = event.sequence
                            forwarded.append(_forward(writer, child_id, event))
                    if forwarded:
                        writer.emit(*forwarded)
                    final = batch[-1]
                    if isinstance(final, EndEvent):
                        return ChildOutcome(status="completed", output=final.output)
                    if isinstance(final, ErrorEvent):
                        status = await retrying(
                            lambda: transport.get_status(child_id),
                            retries=stream_retries,
                            base_delay=retry_base_delay,
                        )
                        return ChildOutcome(
                            status="interrupted" if status.status == "interrupted" else "failed",
                            error=final.error,
                        )
        except (TransportError, AgentServerError) as exc:
            if not _transient(exc):
                raise
            log.info("stream of %s failed (%s); reconnecting", child_id, exc)
        # Only drops in a row count: a connection that made progress resets it.
        drops = 1 if held > before else drops + 1
        if drops > stream_retries:
            raise StreamDropError(child_id, held)
        await anyio.sleep(retry_base_delay * 2 ** (drops - 1))


def _forward(writer: SessionWriter, child_id: str, event: ChunkEvent) -> Event:
    return ChildChunkForwarded(
        child_session_id=child_id,
        child_seq=event.sequence,
        chunk=event.chunk,
    )
