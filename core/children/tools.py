"""Sub-agent tools: a child agent called as a tool, in this executor or behind a transport.

``create_sub_agent_tool`` runs a local agent as a child session per call;
``create_remote_sub_agent_tool`` reaches one through a ``RemoteAgentTransport``
(specs/runtime.md). The calls themselves run in ``core/children/call.py``.
"""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from helix_agents.agents.config import (
    _MAX_AGENT_NAME,
    AgentConfig,
    RemoteSubAgentTool,
    SubAgentTool,
)
from helix_agents.agents.tools import (
    SUBAGENT_TOOL_PREFIX,
    ApprovalRule,
    check_approval_options,
    validate_tool_name,
)
from helix_agents.errors import UsageError, WorkspaceInheritanceError
from helix_agents.transport import RemoteAgentTransport

__all__ = [
    "MAX_STREAM_RETRIES",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
]

InputT = TypeVar("InputT", bound=BaseModel)


def create_sub_agent_tool(
    agent: AgentConfig,
    input_schema: type[InputT],
    description: str | None = None,
    *,
    timeout: float | None = None,
    requires_approval: ApprovalRule = False,
    expires_in: float | None = None,
    inherit_workspace: bool = False,
) -> SubAgentTool[InputT]:
    """A tool named ``subagent__<agent.name>`` that delegates to ``agent``.

    ``requires_approval`` (True or a predicate ``(input, ctx) -> bool``) makes
    each delegation wait for a person's approval first; ``expires_in`` bounds
    that wait (see specs/hitl.md).

    With ``inherit_workspace``, the child uses its parent's workspaces (the
    parent's registry: what either writes, the other and every inheriting
    sibling sees) instead of its own; it gets the ``workspace_*`` tools for
    them. Without it, a child has only the workspaces it declares.

    Raises:
        UsageError: if ``agent`` has no ``output_schema`` (a sub-agent must
            return typed output), or for a bad input schema or timeout.
        WorkspaceInheritanceError: ``inherit_workspace`` for an agent that
            declares workspaces of its own.
    """
    if not isinstance(agent, AgentConfig):
        raise UsageError("create_sub_agent_tool needs an agent built with define_agent")
    if agent.output_schema is None:
        raise UsageError(
            f"agent {agent.name!r} has no output_schema; a sub-agent must declare one "
            "so its parent gets typed output"
        )
    if not (isinstance(input_schema, type) and issubclass(input_schema, BaseModel)):
        raise UsageError(
            f"sub-agent tool for {agent.name!r}: input_schema must be a pydantic model"
        )
    if timeout is not None and not timeout > 0:
        raise UsageError(f"sub-agent tool for {agent.name!r}: timeout must be > 0 seconds")
    check_approval_options(
        f"sub-agent tool for {agent.name!r}", requires_approval, expires_in, waits=False
    )
    if not isinstance(inherit_workspace, bool):
        raise UsageError(f"sub-agent tool for {agent.name!r}: inherit_workspace must be a bool")
    if inherit_workspace and agent.workspaces:
        raise WorkspaceInheritanceError(agent.name, [ws.name for ws in agent.workspaces])
    return SubAgentTool(
        agent=agent,
        input_schema=input_schema,
        description=description or agent.description or f"Delegate to the {agent.name} agent",
        timeout=timeout,
        inherit_workspace=inherit_workspace,
        requires_approval=requires_approval,
        expires_in=None if expires_in is None else float(expires_in),
    )


MAX_STREAM_RETRIES = 50


def create_remote_sub_agent_tool(
    name: str,
    *,
    description: str,
    input_schema: type[InputT],
    output_schema: type[BaseModel] | None = None,
    transport: RemoteAgentTransport,
    remote_agent_type: str,
    timeout: float | None = None,
    stream_retries: int = 3,
    stream_retry_base: float = 0.1,
    requires_approval: ApprovalRule = False,
    expires_in: float | None = None,
    inherit_workspace: bool = False,
) -> RemoteSubAgentTool[InputT]:
    """A tool named ``subagent__<name>`` that delegates to ``remote_agent_type`` over ``transport``.

    The remote session id is ``{parent session}-remote-{tool call id}``, so a
    retried or resumed call reaches the same remote session. Its chunks are
    forwarded into the parent's log (deduplicated by remote seq); a stream
    that drops is reconnected from the last seq held, with backoff
    ``stream_retry_base * 2**n``, up to ``stream_retries`` times (0 disables,
    at most 50).

    The call's result is the remote child's output. With ``output_schema``, it
    is validated into it (and dumped as JSON); output that does not match fails
    the call with an error naming what did not match and what the child
    returned. Without it, the output is taken as the child gave it, unvalidated:
    a text agent's text (a ``str``), a typed helix agent's output as its JSON.
    ``timeout`` interrupts the remote session and fails the call.
    ``requires_approval`` / ``expires_in``: as for :func:`create_sub_agent_tool`.
    A client tool or approval inside the remote agent reaches the parent's
    root like a local one's (specs/hitl.md).

    ``inherit_workspace=True`` is refused: the parent's workspaces are open in
    the parent's process, which a remote agent cannot reach; declare a
    workspace on the remote agent instead (specs/workspaces.md).

    Raises:
        UsageError: for a bad name, schema, timeout or retry setting, or
            ``inherit_workspace=True``.
    """
    validate_tool_name(name, what="remote sub-agent name", longest=_MAX_AGENT_NAME)
    schemas: list[tuple[str, object]] = [("input_schema", input_schema)]
    if output_schema is not None:
        schemas.append(("output_schema", output_schema))
    for label, schema in schemas:
        if not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise UsageError(f"remote sub-agent {name!r}: {label} must be a pydantic model class")
    if not remote_agent_type:
        raise UsageError(f"remote sub-agent {name!r}: remote_agent_type is required")
    if timeout is not None and not timeout > 0:
        raise UsageError(f"remote sub-agent {name!r}: timeout must be > 0 seconds")
    if (
        isinstance(stream_retries, bool)
        or not isinstance(stream_retries, int)
        or not 0 <= stream_retries <= MAX_STREAM_RETRIES
    ):
        raise UsageError(
            f"remote sub-agent {name!r}: stream_retries must be 0..{MAX_STREAM_RETRIES}"
        )
    if stream_retry_base < 0:
        raise UsageError(f"remote sub-agent {name!r}: stream_retry_base must be >= 0")
    check_approval_options(f"remote sub-agent {name!r}", requires_approval, expires_in, waits=False)
    if inherit_workspace is not False:
        raise UsageError(
            f"remote sub-agent {name!r}: inherit_workspace is not supported: the parent's "
            "workspaces live in the parent's process, which a remote agent cannot reach; "
            "declare a workspace on the remote agent instead"
        )
    return RemoteSubAgentTool(
        name=SUBAGENT_TOOL_PREFIX + name,
        description=description,
        input_schema=input_schema,
        output_schema=output_schema,
        transport=transport,
        remote_agent_type=remote_agent_type,
        timeout=timeout,
        stream_retries=stream_retries,
        stream_retry_base=stream_retry_base,
        requires_approval=requires_approval,
        expires_in=None if expires_in is None else float(expires_in),
    )
