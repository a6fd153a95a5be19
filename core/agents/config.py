"""What an agent is: ``AgentConfig``, its hooks, model settings and companion entries.

Built by :func:`~helix_agents.core.agents.define_agent` (``core/agents/define.py``), which
checks them; the sub-agent tools an agent holds are in ``core/children/tools.py``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from helix_agents.agents.tools import SUBAGENT_TOOL_PREFIX, ApprovalRule, Tool, json_schema_of
from helix_agents.agents.toolsets import Toolset
from helix_agents.errors import UsageError
from helix_agents.events import Multitask
from helix_agents.models.base import LLMAdapter, ToolSpec
from helix_agents.models.retrying import RetryPolicy
from helix_agents.transport import RemoteAgentTransport
from helix_agents.workspaces.base import Workspace

__all__ = [
    "AgentConfig",
    "AgentHooks",
    "CompanionMode",
    "HookContext",
    "LLMConfig",
    "OutputT",
    "PersistentAgent",
    "RemoteSubAgentTool",
    "SubAgentTool",
]

if TYPE_CHECKING:
    # PEP 696 default (typing_extensions, for the checker only: Python 3.11's
    # TypeVar has no default): a bare ``AgentConfig`` means ``AgentConfig[Any]``.
    from typing_extensions import TypeVar as _TypeVarWithDefault

    OutputT = _TypeVarWithDefault("OutputT", bound=BaseModel, default=Any)
else:
    OutputT = TypeVar("OutputT", bound=BaseModel)

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
    """Model settings passed with every LLM call of an agent, and how a failed call is retried."""

    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    """Retries of a call that failed for a passing reason before any output (``RetryPolicy(
    attempts=1)``: none); specs/llm.md "Retries"."""


WorkspaceLifetime = Literal["per-invocation", "persistent"]
"""How long a local companion's own workspaces stay open: one run, or until it is terminated."""

CompanionMode = Literal["blocking", "non-blocking"]
"""How a parent waits for a persistent child: until it ends, or not at all."""


@dataclass(frozen=True)
class PersistentAgent:
    """A persistent child type a parent may spawn with its companion tools (specs/companions.md).

    Args:
        agent: the child agent (``define_agent``). With ``transport``, the
            agent type served at the other end (its name and ``output_schema``
            are used here; it runs there).
        mode: ``"blocking"``: a spawn waits for the child's turn to end and
            returns its output; ``"non-blocking"``: a spawn returns at once
            and the outcome reaches the parent at its next step.
        description: what the parent's model reads about this child type.
        transport: a ``RemoteAgentTransport`` the child runs behind (HTTP,
            NATS...); ``None``: in this executor.
        inherit_workspace: the child uses its parent's workspaces (local
            children only, as for :func:`create_sub_agent_tool`).
        workspace_lifetime: seed 004's ``workspaceLifetime``: ``"per-invocation"``
            (each run opens and closes the child's workspaces) or
            ``"persistent"`` (they stay open from its first run until it is
            terminated or the executor closes; local children that declare
            workspaces only).
    """

    agent: AgentConfig
    mode: CompanionMode = "blocking"
    description: str = ""
    transport: RemoteAgentTransport | None = None
    inherit_workspace: bool = False
    workspace_lifetime: WorkspaceLifetime = "per-invocation"


@dataclass(frozen=True, kw_only=True)
class AgentConfig(Generic[OutputT]):
    """An agent: its prompt, tools, schemas and model. Build it with :func:`define_agent`.

    Generic in its output: ``define_agent(..., output_schema=Findings)`` is an
    ``AgentConfig[Findings]``, and ``executor.run`` / ``handle.result()`` give
    back a ``Findings``. Without an output schema it is ``AgentConfig[Any]``
    (the output is the final text).
    """

    name: str
    description: str = ""
    system_prompt: str | Callable[[dict[str, Any]], str] | None = None
    tools: tuple[Tool[Any] | SubAgentTool[Any] | RemoteSubAgentTool[Any], ...] = ()
    output_schema: type[OutputT] | None = None
    state_schema: type[BaseModel] | None = None
    llm: LLMAdapter | None = None
    llm_config: LLMConfig = field(default_factory=LLMConfig)
    max_steps: int = 10
    hooks: AgentHooks = field(default_factory=AgentHooks)
    workspaces: tuple[Workspace, ...] = ()
    persistent_agents: tuple[PersistentAgent, ...] = ()
    toolsets: tuple[Toolset, ...] = ()
    """Sources of more tools (an MCP server's), opened by the executor (agents/toolsets.py)."""
    multitask: Multitask = "steer"
    """What a message sent to a running or paused session of this agent does by default
    (a request may choose otherwise; specs/server.md, "Messages that arrive mid-run")."""

    def persistent(self, agent_type: str) -> PersistentAgent | None:
        """The persistent child type ``agent_type`` of this agent, or None."""
        for entry in self.persistent_agents:
            if entry.agent.name == agent_type:
                return entry
        return None

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


InputT = TypeVar("InputT", bound=BaseModel)


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
            parameters=json_schema_of(self.input_schema),
        )


@dataclass(frozen=True, kw_only=True)
class RemoteSubAgentTool(Generic[InputT]):
    """A tool that runs an agent hosted elsewhere; see :func:`create_remote_sub_agent_tool`."""

    name: str
    description: str
    input_schema: type[InputT]
    output_schema: type[BaseModel] | None = None
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
            parameters=json_schema_of(self.input_schema),
        )
