"""``create_a2a_sub_agent_tool``: an A2A agent as a sub-agent tool of a helix agent."""

from __future__ import annotations

from typing import TypeVar

from pydantic import BaseModel

from helix_agents import create_remote_sub_agent_tool
from helix_agents.agents import ApprovalRule, RemoteSubAgentTool
from helix_agents.errors import UsageError
from helix_agents.transports import HeadersSource

from .transport import A2ARemoteAgentTransport

__all__ = ["create_a2a_sub_agent_tool"]

InputT = TypeVar("InputT", bound=BaseModel)


def create_a2a_sub_agent_tool(
    name: str,
    *,
    input_schema: type[InputT],
    output_schema: type[BaseModel] | None = None,
    url: str | None = None,
    transport: A2ARemoteAgentTransport | None = None,
    headers: HeadersSource | None = None,
    description: str | None = None,
    timeout: float | None = None,
    stream_retries: int = 3,
    stream_retry_base: float = 0.1,
    requires_approval: ApprovalRule = False,
    expires_in: float | None = None,
) -> RemoteSubAgentTool[InputT]:
    """A tool named ``subagent__<name>`` that delegates to the A2A agent at ``url``.

    It is :func:`~helix_agents.create_remote_sub_agent_tool` over an
    :class:`A2ARemoteAgentTransport`: each call is an A2A context whose id is
    ``{parent session}-remote-{tool call id}`` (so a retried or resumed call
    reaches the same task), its artifacts stream into the parent's log, its
    output is the call's result (validated against ``output_schema`` when
    given; else as it came: the agent's text, or its data), ``timeout`` and the
    parent's interrupt or abort cancel the task, and its ``input-required``
    is a pending input at the parent's root (specs/a2a.md).

    Args:
        name: the tool's name after ``subagent__``; also the child's agent type here.
        input_schema: what the parent's model passes (sent as the message's text,
            and as a data part when the agent's card takes JSON).
        output_schema: what the agent's output must match (None, the default:
            any output, taken as it came; most A2A agents answer with text).
        url: the agent's base URL (its card is read from it), unless ``transport``.
        transport: an :class:`A2ARemoteAgentTransport` to use (you close it).
        headers: headers for a transport made here (``Authorization``...).
        description: what the parent's model reads about the tool.
        timeout, stream_retries, stream_retry_base, requires_approval, expires_in:
            as for ``create_remote_sub_agent_tool``.

    Raises:
        UsageError: neither or both of ``url`` and ``transport``, ``headers`` with
            ``transport``, or any option ``create_remote_sub_agent_tool`` refuses.
    """
    if (url is None) == (transport is None):
        raise UsageError(f"A2A sub-agent {name!r}: give url or transport (one of them)")
    if transport is not None and headers is not None:
        raise UsageError(f"A2A sub-agent {name!r}: give headers to the transport you pass")
    if transport is None:
        transport = A2ARemoteAgentTransport(url, headers=headers)
    return create_remote_sub_agent_tool(
        name,
        description=description or f"Delegate to the A2A agent {name}",
        input_schema=input_schema,
        output_schema=output_schema,
        transport=transport,
        remote_agent_type=name,
        timeout=timeout,
        stream_retries=stream_retries,
        stream_retry_base=stream_retry_base,
        requires_approval=requires_approval,
        expires_in=expires_in,
    )
