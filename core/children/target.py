"""Where a sub-agent call's child lives: its deterministic session id, transport and limits.

Local children are ``{parent}-sub-{call id}`` reached through the executor's
in-process transport; remote ones are ``{parent}-remote-{call id}`` reached
through their tool's transport; persistent companions are
``{parent}-agent-{name}`` (``.2``, ``.3``... for a fresh re-spawn), reached
through their :class:`~helix_agents.PersistentAgent`'s transport or the
in-process one. The same lookup routes a person's answer to a child
(``core/hitl/routing.py``) and opens a call (``core/children/call.py``,
``core/companions/parent.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import msgspec
from pydantic import BaseModel, ValidationError

from helix_agents.agents.config import (
    AgentConfig,
    PersistentAgent,
    RemoteSubAgentTool,
    SubAgentTool,
)
from helix_agents.errors import AgentServerError
from helix_agents.events import PendingInput, RemoteRef
from helix_agents.messages import ToolCall
from helix_agents.protocol import RemoteResumeRequest, RemoteStartRequest
from helix_agents.retry import retrying, transient_unspent
from helix_agents.transport import RemoteAgentTransport

__all__ = [
    "ChildOutcome",
    "ChildTarget",
    "SubAgentCall",
    "SubAgentToolLike",
    "checked_output",
    "child_session_id",
    "child_target",
    "companion_session_id",
    "companion_target",
    "fits",
    "hook_call",
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


class SubAgentCall(ToolCall, frozen=True, kw_only=True):
    """The ``call`` the ``before_sub_agent`` / ``after_sub_agent`` hooks get: a ToolCall, and more.

    ``agent_type``: the child's agent type (the remote one's for a remote
    child); ``agent_config``: the child's ``AgentConfig`` when it runs in this
    executor, None when remote (as the seeds' hooks); ``is_remote``;
    ``session_id``: the child's session.
    """

    agent_type: str
    agent_config: Any = None
    is_remote: bool = False
    session_id: str = ""


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
    agent: AgentConfig | None = None
    """The child's config when it runs in this executor (None: remote)."""
    stream_retries: int = 3
    stream_retry_base: float = 0.1

    async def retry(self, call: Any) -> Any:
        """Await an idempotent control call with this target's retry budget.

        A failure the transport already retried to the end of its own budget
        is not retried again here (one budget per call, not one per layer).
        """
        return await retrying(
            call,
            retries=self.stream_retries,
            base_delay=self.stream_retry_base,
            retry_if=transient_unspent,
        )

    async def start(self, request: RemoteStartRequest) -> None:
        """Ask the child's server to start it; one that already ran to its end is no error.

        Start is idempotent with the child's deterministic id: a start with the
        same request answers the existing run, another request is refused
        (``ALREADY_RUNNING``), and a child that already ended (a start retried
        after a lost answer) tells how it ended on its stream.
        """
        try:
            await self.retry(lambda: self.transport.start(request))
        except AgentServerError as exc:
            if exc.code != "ALREADY_COMPLETED":
                raise

    async def reach(self, start: Callable[[], RemoteStartRequest] | None = None) -> None:
        """Make sure the child exists and something runs it: status first, then start or resume.

        Not found: started with ``start()`` (the parent recorded the start and
        stopped before it reached the child); without ``start`` that is an
        error. Interrupted, paused, or running with no process running it:
        resumed (a paused child with all its answers goes on; otherwise it
        suspends again at once and says so on its stream).
        """
        try:
            status = await self.retry(lambda: self.transport.get_status(self.session_id))
        except AgentServerError as exc:
            if exc.code != "NOT_FOUND" or start is None:
                raise
            await self.start(start())
            return
        if status.status in ("interrupted", "paused") or (
            status.status == "running" and not status.is_executing
        ):
            resume = RemoteResumeRequest(session_id=self.session_id)
            try:
                await self.retry(lambda: self.transport.resume(resume))
            except AgentServerError as exc:
                if exc.code != "ALREADY_COMPLETED":
                    raise


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
            agent=tool.agent,
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


def companion_session_id(parent_session_id: str, name: str, generation: int = 1) -> str:
    """A companion's session id: ``{parent}-agent-{name}``, then ``.2``, ``.3``... per fresh spawn.

    A log is append-only, so a fresh child after a failed or terminated one
    is a new session; the first keeps the seeds' plain id.
    """
    base = f"{parent_session_id}-agent-{name}"
    return base if generation <= 1 else f"{base}.{generation}"


def companion_target(
    entry: PersistentAgent, session_id: str, local_transport: RemoteAgentTransport
) -> ChildTarget:
    """Where companion session ``session_id`` (of type ``entry``) lives and how to reach it."""
    if entry.transport is None:
        return ChildTarget(
            session_id=session_id,
            agent_type=entry.agent.name,
            transport=local_transport,
            agent=entry.agent,
        )
    return ChildTarget(
        session_id=session_id,
        agent_type=entry.agent.name,
        transport=entry.transport,
        remote=RemoteRef(
            transport=type(entry.transport).__name__,
            remote_agent_type=entry.agent.name,
            url=getattr(entry.transport, "url", None),
        ),
        output_schema=entry.agent.output_schema,
    )


def hook_call(call: ToolCall, target: ChildTarget) -> SubAgentCall:
    """What the sub-agent hooks get for ``call`` to ``target``."""
    return SubAgentCall(
        id=call.id,
        name=call.name,
        arguments=call.arguments,
        agent_type=target.agent_type,
        agent_config=target.agent if target.remote is None else None,
        is_remote=target.remote is not None,
        session_id=target.session_id,
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


_SHOWN = 200
"""Characters of a child's output quoted in the error when it misses its schema."""
_PROBLEMS = 3
"""Validation problems named in that error (then how many more)."""


def checked_output(schema: type[BaseModel] | None, output: Any) -> tuple[Any, str | None]:
    """A remote child's output checked against its parent's schema: (JSON output, error).

    Without a schema the output passes as the child gave it (its text, or its
    JSON), unvalidated. With one, it is validated and dumped as JSON; output
    that misses it is an error naming what did not match and what came back.
    """
    if schema is None:
        return output, None
    try:
        return schema.model_validate(output).model_dump(mode="json"), None
    except ValueError as exc:
        return None, _mismatch(schema, exc, output)


def _mismatch(schema: type[BaseModel], exc: ValueError, output: Any) -> str:
    """``remote output does not match <Schema>: <problems>; the child returned: <output>``."""
    if isinstance(exc, ValidationError):
        found = exc.errors(include_url=False)
        problems = [
            ": ".join(p for p in (".".join(str(x) for x in e["loc"]), e["msg"]) if p)
            for e in found[:_PROBLEMS]
        ]
        if len(found) > _PROBLEMS:
            problems.append(f"and {len(found) - _PROBLEMS} more")
    else:
        problems = str(exc).splitlines()[:_PROBLEMS]
    if isinstance(output, str):
        shown = repr(output if len(output) <= _SHOWN else output[:_SHOWN] + "...")
        hint = " (a text: leave output_schema out to take it as it is)"
    else:
        try:
            encoded = msgspec.json.encode(output).decode()
        except (TypeError, msgspec.EncodeError):
            encoded = repr(output)
        shown = encoded if len(encoded) <= _SHOWN else encoded[:_SHOWN] + "..."
        hint = ""
    return (
        f"remote output does not match {schema.__name__}: {'; '.join(problems)}; "
        f"the child returned: {shown}{hint}"
    )
