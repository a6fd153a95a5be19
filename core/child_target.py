"""Where a sub-agent call's child lives: its deterministic session id, transport and limits.

Local children are ``{parent}-sub-{call id}`` reached through the executor's
in-process transport; remote ones are ``{parent}-remote-{call id}`` reached
through their tool's transport. The same lookup routes a person's answer to
a child (``answers.py``) and opens a call (``child_calls.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from pydantic import BaseModel

from .agents import RemoteSubAgentTool, SubAgentTool
from .events import PendingInput, RemoteRef
from .retry import retrying
from .transport import RemoteAgentTransport

__all__ = [
    "ChildOutcome",
    "ChildTarget",
    "SubAgentToolLike",
    "child_session_id",
    "child_target",
    "fits",
    "remote_session_id",
]

SubAgentToolLike = SubAgentTool[Any] | RemoteSubAgentTool[Any]
"""A tool that calls a sub-agent: local or remote."""


class ChildOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """How a child's run ended, as seen through its stream.

    ``suspended``: it paused waiting for people (``pending``); the call has no
    result yet and the parent waits too.
    """

    status: Literal["completed", "failed", "interrupted", "suspended"]
    output: Any = None
    error: str | None = None
    pending: list[PendingInput] = []


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

    async def retry(self, call: Any) -> Any:
        """Await an idempotent control call with this target's retry budget."""
        return await retrying(call, retries=self.stream_retries, base_delay=self.stream_retry_base)


def child_target(
    tool: SubAgentToolLike,
    parent_session_id: str,
    tool_call_id: str,
    local_transport: RemoteAgentTransport,
) -> ChildTarget:
    """Where the child of call ``tool_call_id`` (of ``tool``) lives: local or remote."""
    if isinstance(tool, SubAgentTool):
        return ChildTarget(
            session_id=child_session_id(parent_session_id, tool_call_id),
            agent_type=tool.agent.name,
            transport=local_transport,
            state_schema=tool.agent.state_schema,
            timeout=tool.timeout,
        )
    return ChildTarget(
        session_id=remote_session_id(parent_session_id, tool_call_id),
        agent_type=tool.remote_agent_type,
        transport=tool.transport,
        remote=RemoteRef(
            transport=type(tool.transport).__name__,
            remote_agent_type=tool.remote_agent_type,
            url=getattr(tool.transport, "url", None),
        ),
        output_schema=tool.output_schema,
        timeout=tool.timeout,
        stream_retries=tool.stream_retries,
        stream_retry_base=tool.stream_retry_base,
    )


def fits(schema: type[BaseModel] | None, value: Any) -> bool:
    """True when ``value`` can seed a child's state: it fits the schema (or is a dict)."""
    if schema is None:
        return isinstance(value, dict)
    try:
        schema.model_validate(value)
    except ValueError:
        return False
    return True
