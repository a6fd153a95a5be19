"""Agents: ``define_agent``, lifecycle hooks, sub-agent tools and the registry."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from .errors import UsageError, WorkspaceInheritanceError
from .llm import LLMAdapter, ToolSpec
from .tools import (
    SUBAGENT_TOOL_PREFIX,
    ApprovalRule,
    Tool,
    check_approval_options,
    validate_tool_name,
)
from .transport import RemoteAgentTransport
from .workspaces import Workspace

__all__ = [
    "RemoteSubAgentTool",
    "create_remote_sub_agent_tool",
    "AgentConfig",
    "AgentHooks",
    "AgentRegistry",
    "HookContext",
    "LLMConfig",
    "SubAgentTool",
    "create_sub_agent_tool",
    "define_agent",
]

InputT = TypeVar("InputT", bound=BaseModel)

_MAX_AGENT_NAME = 64 - len(SUBAGENT_TOOL_PREFIX)


@dataclass(frozen=True, kw_only=True)
class HookContext:
    """Who a hook fires for: the session, its agent, its parent and root."""

    session_id: str
    agent_type: str
    run_id: str
    parent_session_id: str | None
    root_session_id: str


Hook = Callable[..., Awaitable[None] | None]


@dataclass(frozen=True, kw_only=True)
class AgentHooks:
    """Lifecycle callbacks, fired live (never while replaying a log). Sync or async.

    ``on_agent_start(ctx)``, ``on_agent_complete(ctx, output)``,
    ``on_agent_fail(ctx, error)``, ``before_sub_agent(ctx, call)``,
    ``after_sub_agent(ctx, call, outcome)``, ``before_tool(ctx, call)``,
    ``after_tool(ctx, call, outcome)``. A hook that raises is logged and
    ignored: observability must not change the run.
    """

    on_agent_start: Hook | None = None
    on_agent_complete: Hook | None = None
    on_agent_fail: Hook | None = None
    before_sub_agent: Hook | None = None
    after_sub_agent: Hook | None = None
    before_tool: Hook | None = None
    after_tool: Hook | None = None


@dataclass(frozen=True, kw_only=True)
class LLMConfig:
    """Model settings passed with every LLM call of an agent."""

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None


@dataclass(frozen=True, kw_only=True)
class AgentConfig:
    """An agent: its prompt, tools, schemas and model. Build it with :func:`define_agent`."""

    name: str
    description: str = ""
    system_prompt: str | Callable[[dict[str, Any]], str] | None = None
    tools: tuple[Tool[Any] | SubAgentTool[Any] | RemoteSubAgentTool[Any], ...] = ()
    output_schema: type[BaseModel] | None = None
    state_schema: type[BaseModel] | None = None
    llm: LLMAdapter | None = None
    llm_config: LLMConfig = field(default_factory=LLMConfig)
    max_steps: int = 10
    hooks: AgentHooks = field(default_factory=AgentHooks)
    workspaces: tuple[Workspace, ...] = ()

    def tool(self, name: str) -> Tool[Any] | SubAgentTool[Any] | RemoteSubAgentTool[Any] | None:
        """The tool called ``name``, or None."""
        for candidate in self.tools:
            if candidate.name == name:
                return candidate
        return None

    def initial_state(self, seed: dict[str, Any] | None = None) -> dict[str, Any]:
        """The custom state a new session starts with: schema defaults, then ``seed``.

        Raises :class:`UsageError` when the result does not fit ``state_schema``.
        """
        if self.state_schema is None:
            return dict(seed or {})
        try:
            model = self.state_schema.model_validate(seed or {})
        except ValueError as exc:
            raise UsageError(f"agent {self.name!r}: initial state is invalid: {exc}") from exc
        return model.model_dump(mode="json")


def define_agent(
    name: str,
    *,
    description: str = "",
    system_prompt: str | Callable[[dict[str, Any]], str] | None = None,
    tools: Iterable[Tool[Any] | SubAgentTool[Any] | RemoteSubAgentTool[Any]] = (),
    output_schema: type[BaseModel] | None = None,
    state_schema: type[BaseModel] | None = None,
    llm: LLMAdapter | None = None,
    llm_config: LLMConfig | None = None,
    max_steps: int = 10,
    hooks: AgentHooks | None = None,
    workspaces: Iterable[Workspace] = (),
) -> AgentConfig:
    """Define an agent.

    Args:
        name: the agent type (letters, digits, ``_``, ``-``; at most 54 characters,
            since sub-agent tools are named ``subagent__<name>``).
        system_prompt: a string, or a function of the custom state.
        tools: its tools, including sub-agent tools.
        output_schema: a pydantic model; the agent finishes by calling
            ``__finish__`` with output that validates against it. Required for
            an agent used as a sub-agent.
        state_schema: a pydantic model for custom state (its defaults seed it).
        llm: the model adapter; the executor's default is used when None.
        max_steps: LLM calls per run before the run fails.
        workspaces: the agent's :class:`~helix_agents.Workspace` declarations;
            each run opens them and the agent gets the ``workspace_*`` tools
            (specs/workspaces.md). The executor needs a provider per kind.

    Raises:
        UsageError: for an invalid name, duplicate tool names, a reserved tool
            name, a bad schema, ``max_steps < 1``, or workspaces that are not
            :class:`Workspace` or share a name.
    """
    validate_tool_name(name, what="agent name", longest=_MAX_AGENT_NAME)
    tool_list = tuple(tools)
    seen: set[str] = set()
    for tool in tool_list:
        if not isinstance(tool, Tool | SubAgentTool | RemoteSubAgentTool):
            raise UsageError(f"agent {name!r}: {tool!r} is not a tool (use define_tool)")
        if isinstance(tool, Tool):
            validate_tool_name(tool.name)  # however it was built, a user tool is checked
        elif isinstance(tool, RemoteSubAgentTool) and not tool.name.startswith(
            SUBAGENT_TOOL_PREFIX
        ):
            raise UsageError(
                f"agent {name!r}: remote sub-agent tool {tool.name!r} lacks its prefix"
            )
        if tool.name in seen:
            raise UsageError(f"agent {name!r}: two tools are named {tool.name!r}")
        seen.add(tool.name)
    for label, schema in (("output_schema", output_schema), ("state_schema", state_schema)):
        if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise UsageError(f"agent {name!r}: {label} must be a pydantic model class")
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise UsageError(f"agent {name!r}: max_steps must be an int >= 1, not {max_steps!r}")
    workspace_list = tuple(workspaces)
    workspace_names: set[str] = set()
    for workspace in workspace_list:
        if not isinstance(workspace, Workspace):
            raise UsageError(f"agent {name!r}: {workspace!r} is not a Workspace")
        if workspace.name in workspace_names:
            raise UsageError(f"agent {name!r}: two workspaces are named {workspace.name!r}")
        workspace_names.add(workspace.name)
    config = AgentConfig(
        name=name,
        description=description,
        system_prompt=system_prompt,
        tools=tool_list,
        output_schema=output_schema,
        state_schema=state_schema,
        llm=llm,
        llm_config=llm_config or LLMConfig(),
        max_steps=max_steps,
        hooks=hooks or AgentHooks(),
        workspaces=workspace_list,
    )
    if state_schema is not None:
        config.initial_state()  # fails now if the schema's defaults are incomplete
    return config


@dataclass(frozen=True, kw_only=True)
class SubAgentTool(Generic[InputT]):
    """A tool that runs ``agent`` as a child session; see :func:`create_sub_agent_tool`."""

    agent: AgentConfig
    input_schema: type[InputT]
    description: str
    timeout: float | None = None
    inherit_workspace: bool = False
    requires_approval: ApprovalRule = False
    expires_in: float | None = None

    @property
    def name(self) -> str:
        """``subagent__<agent name>``."""
        return SUBAGENT_TOOL_PREFIX + self.agent.name

    def spec(self) -> ToolSpec:
        """The tool as the LLM sees it."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.input_schema.model_json_schema(),
        )


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


@dataclass(frozen=True, kw_only=True)
class RemoteSubAgentTool(Generic[InputT]):
    """A tool that runs an agent hosted elsewhere; see :func:`create_remote_sub_agent_tool`."""

    name: str
    description: str
    input_schema: type[InputT]
    output_schema: type[BaseModel]
    transport: RemoteAgentTransport
    remote_agent_type: str
    timeout: float | None = None
    stream_retries: int = 3
    stream_retry_base: float = 0.1
    requires_approval: ApprovalRule = False
    expires_in: float | None = None

    def spec(self) -> ToolSpec:
        """The tool as the LLM sees it."""
        return ToolSpec(
            name=self.name,
            description=self.description,
            parameters=self.input_schema.model_json_schema(),
        )


def create_remote_sub_agent_tool(
    name: str,
    *,
    description: str,
    input_schema: type[InputT],
    output_schema: type[BaseModel],
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
    at most 50). The remote output is validated against ``output_schema``.
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
    for label, schema in (("input_schema", input_schema), ("output_schema", output_schema)):
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


class AgentRegistry:
    """Agents by type, so a parent (or a server) finds an agent by its name."""

    def __init__(self, agents: Iterable[AgentConfig] = ()) -> None:
        self._agents: dict[str, AgentConfig] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: AgentConfig) -> AgentConfig:
        """Add ``agent`` and, recursively, the agents its sub-agent tools call.

        Raises :class:`UsageError` if a different agent already has that name.
        """
        existing = self._agents.get(agent.name)
        if existing is not None:
            if existing is not agent:
                raise UsageError(f"two different agents are named {agent.name!r}")
            return agent
        self._agents[agent.name] = agent
        for tool in agent.tools:
            if isinstance(tool, SubAgentTool):
                self.register(tool.agent)
        return agent

    def get(self, agent_type: str) -> AgentConfig | None:
        """The agent of that type, or None."""
        return self._agents.get(agent_type)

    def __contains__(self, agent_type: object) -> bool:
        return agent_type in self._agents

    def names(self) -> Sequence[str]:
        """Every registered agent type, sorted."""
        return sorted(self._agents)
