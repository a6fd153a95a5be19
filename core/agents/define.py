"""Agents: ``define_agent``, lifecycle hooks, sub-agent tools and the registry.

``define_agent`` checks a definition and the registry holds them; the types
are in ``core/agents/config.py`` and the sub-agent tools in ``core/children/tools.py``
(re-exported here).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from helix_agents.agents.config import (
    _MAX_AGENT_NAME,
    AgentConfig,
    AgentHooks,
    LLMConfig,
    OutputT,
    PersistentAgent,
    RemoteSubAgentTool,
    SubAgentTool,
)
from helix_agents.agents.tools import SUBAGENT_TOOL_PREFIX, Tool, validate_tool_name
from helix_agents.agents.toolsets import Toolset, check_toolsets
from helix_agents.errors import UsageError, WorkspaceInheritanceError
from helix_agents.events import MULTITASK_CHOICES, Multitask
from helix_agents.models.base import LLMAdapter
from helix_agents.models.fallback import FallbackModel
from helix_agents.models.names import NamedModel
from helix_agents.workspaces.base import Workspace

__all__ = [
    "AgentRegistry",
    "define_agent",
]


def _named(agent: str, model: str | Sequence[str]) -> LLMAdapter:
    """The model ``model=`` names: one name, or a list of them tried in turn."""
    if isinstance(model, str):
        return NamedModel(model)
    names = list(model) if isinstance(model, Sequence) else None
    if not names or not all(isinstance(one, str) for one in names):
        raise UsageError(f"agent {agent!r}: model= takes a name or a list of names, not {model!r}")
    return NamedModel(names[0]) if len(names) == 1 else FallbackModel(*names)


def define_agent(
    name: str,
    *,
    description: str = "",
    system_prompt: str | Callable[[dict[str, Any]], str] | None = None,
    tools: Iterable[Tool[Any] | SubAgentTool[Any] | RemoteSubAgentTool[Any]] = (),
    output_schema: type[OutputT] | None = None,
    state_schema: type[BaseModel] | None = None,
    llm: LLMAdapter | None = None,
    llm_config: LLMConfig | None = None,
    max_steps: int = 10,
    model: str | Sequence[str] | None = None,
    hooks: AgentHooks | None = None,
    workspaces: Iterable[Workspace] = (),
    persistent_agents: Iterable[PersistentAgent] = (),
    toolsets: Iterable[Toolset] = (),
    multitask: Multitask = "steer",
) -> AgentConfig[OutputT]:
    """Define an agent.

    Args:
        name: the agent type (letters, digits, ``_``, ``-``; at most 54 characters,
            since sub-agent tools are named ``subagent__<name>``).
        system_prompt: a string, or a function of the custom state.
        tools: its tools, including sub-agent tools.
        output_schema: a pydantic model; the agent finishes by calling
            ``__finish__`` with output that validates against it, and its
            results are instances of it (the log holds their JSON). Required
            for an agent used as a sub-agent.
        state_schema: a pydantic model for custom state (its defaults seed it).
        llm: the model adapter; the executor's default is used when None.
        model: instead of ``llm``, a model by name: ``"openai:gpt-4o-mini"``
            (``OPENAI_API_KEY``), or ``"openai-compatible:llama3.2"`` for a
            server at ``OPENAI_BASE_URL`` (Ollama, vLLM); see
            ``helix_agents.models.names``. The name is checked now, the
            variables when the agent runs (``executor.execute`` and
            ``run_sync`` refuse at once without them). A list of names is a
            :class:`~helix_agents.models.FallbackModel`: the next is tried
            when a call fails before any output (rate limit, outage, key...).
        max_steps: LLM calls per run before the run fails.
        workspaces: the agent's :class:`~helix_agents.Workspace` declarations;
            each run opens them and the agent gets the ``workspace_*`` tools
            (specs/workspaces.md). The executor needs a provider per kind.
        persistent_agents: :class:`PersistentAgent` entries, each a child type
            the agent manages with the auto-injected ``companion__*`` tools
            (specs/companions.md); an agent type appears at most once.
        toolsets: sources of more tools, such as an MCP server
            (``helix_agents.mcp.MCPToolset``): the executor opens each once and
            every run of the agent gets its tools after ``tools``
            (specs/mcp.md).
        multitask: what a message sent to a running or paused session of the
            agent does unless the message says otherwise: ``steer`` (its run
            takes it at its next step), ``enqueue`` (a turn of its own after
            the run), ``interrupt`` (the run stops, then its turn),
            ``rollback`` (the run is superseded, then its turn) or ``reject``
            (``SESSION_BUSY``); specs/server.md.

    Raises:
        UsageError: for an invalid name, ``llm`` and ``model`` both given, a
            malformed model name or an unknown provider, ``tools`` that is not a list of tools,
            duplicate tool names, a reserved tool name (``companion__*`` and the
            other prefixes, always), a bad schema, ``max_steps < 1``, workspaces
            that are not :class:`Workspace` or share a name, or a bad
            ``persistent_agents`` entry (not a :class:`PersistentAgent`, a
            repeated agent type, an unknown mode, a transport that is not a
            ``RemoteAgentTransport``, ``inherit_workspace`` with a transport),
            or ``toolsets`` that are not toolsets or list one twice, or an
            unknown ``multitask``.
        WorkspaceInheritanceError: ``inherit_workspace`` for a child that
            declares workspaces of its own.
    """
    validate_tool_name(name, what="agent name", longest=_MAX_AGENT_NAME)
    if model is not None:
        if llm is not None:
            raise UsageError(f"agent {name!r}: give llm= or model=, not both")
        llm = _named(name, model)
    if isinstance(tools, str | bytes | Tool | SubAgentTool | RemoteSubAgentTool) or not isinstance(
        tools, Iterable
    ):
        raise UsageError(
            f"agent {name!r}: tools must be a list of tools (define_tool, "
            f"create_sub_agent_tool...), not {type(tools).__name__}"
        )
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
    if multitask not in MULTITASK_CHOICES:
        raise UsageError(
            f"agent {name!r}: multitask must be one of {', '.join(MULTITASK_CHOICES)}, "
            f"not {multitask!r}"
        )
    workspace_list = tuple(workspaces)
    workspace_names: set[str] = set()
    for workspace in workspace_list:
        if not isinstance(workspace, Workspace):
            raise UsageError(f"agent {name!r}: {workspace!r} is not a Workspace")
        if workspace.name in workspace_names:
            raise UsageError(f"agent {name!r}: two workspaces are named {workspace.name!r}")
        workspace_names.add(workspace.name)
    companions = _checked_persistent_agents(name, persistent_agents)
    toolset_list = check_toolsets(f"agent {name!r}", toolsets)
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
        persistent_agents=companions,
        toolsets=toolset_list,
        multitask=multitask,
    )
    if state_schema is not None:
        config.initial_state()  # fails now if the schema's defaults are incomplete
    return config


_TRANSPORT_METHODS = ("start", "send_message", "stream", "get_status", "abort")


def _checked_persistent_agents(
    name: str, entries: Iterable[PersistentAgent]
) -> tuple[PersistentAgent, ...]:
    if isinstance(entries, PersistentAgent) or not isinstance(entries, Iterable):
        raise UsageError(f"agent {name!r}: persistent_agents must be a list of PersistentAgent")
    checked = tuple(entries)
    seen: set[str] = set()
    for entry in checked:
        if not isinstance(entry, PersistentAgent):
            raise UsageError(
                f"agent {name!r}: persistent_agents holds {entry!r}, not a PersistentAgent"
            )
        owner = f"agent {name!r}: persistent agent"
        if not isinstance(entry.agent, AgentConfig):
            raise UsageError(f"{owner} {entry.agent!r} is not an agent (use define_agent)")
        child = entry.agent.name
        if child in seen:
            raise UsageError(
                f"{owner} type {child!r} appears twice; each type once (define a second agent "
                "with another name to use it in both modes)"
            )
        seen.add(child)
        if entry.mode not in ("blocking", "non-blocking"):
            raise UsageError(
                f"{owner} {child!r}: mode must be 'blocking' or 'non-blocking', not {entry.mode!r}"
            )
        if not isinstance(entry.description, str):
            raise UsageError(f"{owner} {child!r}: description must be a string")
        if entry.transport is not None:
            missing = [
                m for m in _TRANSPORT_METHODS if not callable(getattr(entry.transport, m, None))
            ]
            if missing:
                raise UsageError(
                    f"{owner} {child!r}: transport is not a RemoteAgentTransport "
                    f"(it lacks {', '.join(missing)})"
                )
        if not isinstance(entry.inherit_workspace, bool):
            raise UsageError(f"{owner} {child!r}: inherit_workspace must be a bool")
        if entry.inherit_workspace and entry.transport is not None:
            raise UsageError(
                f"{owner} {child!r}: inherit_workspace is not supported with a transport: the "
                "parent's workspaces live in the parent's process"
            )
        if entry.workspace_lifetime not in ("per-invocation", "persistent"):
            raise UsageError(
                f"{owner} {child!r}: workspace_lifetime must be 'per-invocation' or 'persistent'"
            )
        if entry.workspace_lifetime == "persistent" and (
            entry.transport is not None or entry.inherit_workspace or not entry.agent.workspaces
        ):
            raise UsageError(
                f"{owner} {child!r}: workspace_lifetime='persistent' needs a local child that "
                "declares its own workspaces (a remote one's server owns them; an inherited "
                "registry lives as long as the parent's run)"
            )
        if entry.inherit_workspace and entry.agent.workspaces:
            raise WorkspaceInheritanceError(child, [ws.name for ws in entry.agent.workspaces])
    return checked


class AgentRegistry:
    """Agents by type, so a parent (or a server) finds an agent by its name."""

    def __init__(self, agents: Iterable[AgentConfig] = ()) -> None:
        self._agents: dict[str, AgentConfig] = {}
        for agent in agents:
            self.register(agent)

    def register(self, agent: AgentConfig) -> AgentConfig:
        """Add ``agent`` and, recursively, the agents its sub-agent tools and local companions call.

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
        for entry in agent.persistent_agents:
            if entry.transport is None:  # a remote child runs at the other end
                self.register(entry.agent)
        return agent

    def get(self, agent_type: str) -> AgentConfig | None:
        """The agent of that type, or None."""
        return self._agents.get(agent_type)

    def __contains__(self, agent_type: object) -> bool:
        return agent_type in self._agents

    def names(self) -> Sequence[str]:
        """Every registered agent type, sorted."""
        return sorted(self._agents)
