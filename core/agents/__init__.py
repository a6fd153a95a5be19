"""Agents: what an agent is, how one is defined, and the tools it may call.

``config`` (``AgentConfig``, hooks, model settings, companion entries),
``define`` (``define_agent`` and the registry), ``tools`` (``Tool``,
``define_tool``, the tool context), ``function_tools`` (``@tool``: a tool
from a plain function), ``toolsets`` (``Toolset``: tools known once a source
is open, such as an MCP server's). May import models and the log; never the
runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from helix_agents._exports import lazy_exports

if TYPE_CHECKING:
    from helix_agents.agents.config import (
        AgentConfig as AgentConfig,
        AgentHooks as AgentHooks,
        HookContext as HookContext,
        LLMConfig as LLMConfig,
        PersistentAgent as PersistentAgent,
        RemoteSubAgentTool as RemoteSubAgentTool,
        SubAgentTool as SubAgentTool,
    )
    from helix_agents.agents.define import (
        AgentRegistry as AgentRegistry,
        define_agent as define_agent,
    )
    from helix_agents.agents.function_tools import tool as tool
    from helix_agents.agents.tools import (
        COMPANION_TOOL_PREFIX as COMPANION_TOOL_PREFIX,
        RESERVED_TOOL_PREFIXES as RESERVED_TOOL_PREFIXES,
        SUBAGENT_TOOL_PREFIX as SUBAGENT_TOOL_PREFIX,
        WORKSPACE_TOOL_PREFIX as WORKSPACE_TOOL_PREFIX,
        ApprovalPredicate as ApprovalPredicate,
        ApprovalRule as ApprovalRule,
        Tool as Tool,
        ToolContext as ToolContext,
        ToolExecute as ToolExecute,
        define_tool as define_tool,
        is_sub_agent_tool as is_sub_agent_tool,
        validate_tool_name as validate_tool_name,
    )
    from helix_agents.agents.toolsets import Toolset as Toolset
    from helix_agents.children.tools import (
        create_remote_sub_agent_tool as create_remote_sub_agent_tool,
        create_sub_agent_tool as create_sub_agent_tool,
    )

_HOMES = {
    "AgentConfig": "helix_agents.agents.config",
    "AgentHooks": "helix_agents.agents.config",
    "HookContext": "helix_agents.agents.config",
    "LLMConfig": "helix_agents.agents.config",
    "PersistentAgent": "helix_agents.agents.config",
    "AgentRegistry": "helix_agents.agents.define",
    "define_agent": "helix_agents.agents.define",
    "ApprovalPredicate": "helix_agents.agents.tools",
    "ApprovalRule": "helix_agents.agents.tools",
    "COMPANION_TOOL_PREFIX": "helix_agents.agents.tools",
    "RESERVED_TOOL_PREFIXES": "helix_agents.agents.tools",
    "SUBAGENT_TOOL_PREFIX": "helix_agents.agents.tools",
    "Tool": "helix_agents.agents.tools",
    "ToolContext": "helix_agents.agents.tools",
    "ToolExecute": "helix_agents.agents.tools",
    "WORKSPACE_TOOL_PREFIX": "helix_agents.agents.tools",
    "define_tool": "helix_agents.agents.tools",
    "tool": "helix_agents.agents.function_tools",
    "is_sub_agent_tool": "helix_agents.agents.tools",
    "validate_tool_name": "helix_agents.agents.tools",
    "Toolset": "helix_agents.agents.toolsets",
    "RemoteSubAgentTool": "helix_agents.agents.config",
    "SubAgentTool": "helix_agents.agents.config",
    "create_remote_sub_agent_tool": "helix_agents.children.tools",
    "create_sub_agent_tool": "helix_agents.children.tools",
}
__all__ = [
    "AgentConfig",
    "AgentHooks",
    "HookContext",
    "LLMConfig",
    "PersistentAgent",
    "AgentRegistry",
    "define_agent",
    "ApprovalPredicate",
    "ApprovalRule",
    "COMPANION_TOOL_PREFIX",
    "RESERVED_TOOL_PREFIXES",
    "SUBAGENT_TOOL_PREFIX",
    "Tool",
    "ToolContext",
    "ToolExecute",
    "WORKSPACE_TOOL_PREFIX",
    "define_tool",
    "tool",
    "is_sub_agent_tool",
    "validate_tool_name",
    "Toolset",
    "RemoteSubAgentTool",
    "SubAgentTool",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
]
__getattr__, __dir__ = lazy_exports(__name__, _HOMES)
