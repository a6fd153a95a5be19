"""helix-agents: multi-agent orchestration on an append-only event log.

``__all__`` is what you build with: agents and tools, the executor and what a
run gives back, and the three seams (store, transport, model). Everything else
lives in the package named for it, each with its own ``__all__``:

- ``helix_agents.models``: model adapters (``ScriptedLLM``, ``OpenAIChatLLM``,
  ``ReplayLLM``) and the ``LLMAdapter`` request and response types;
- ``helix_agents.agents``: everything about defining agents and tools, the
  registry, approval rules and the reserved tool names;
- ``helix_agents.events``: the event catalog (what a log and a stream carry);
- ``helix_agents.errors``: the exception tree, rooted at ``HelixError``;
- ``helix_agents.messages``: conversation messages and tool calls;
- ``helix_agents.log``: projections, the codec, session state and status;
- ``helix_agents.runtime``: the executor's parts (``ExecutorService``, guards);
- ``helix_agents.workspaces``: workspaces and their providers;
- ``helix_agents.protocol`` and ``helix_agents.ids``: the wire structs, session ids.

Stores, transports and the server live in ``helix_agents.stores``,
``.transports`` and ``.server``.
"""

from __future__ import annotations

from helix_agents.agents.config import (
    AgentConfig as AgentConfig,
    AgentHooks as AgentHooks,
    HookContext as HookContext,
    PersistentAgent as PersistentAgent,
)
from helix_agents.agents.define import (
    define_agent as define_agent,
)
from helix_agents.agents.function_tools import tool as tool
from helix_agents.agents.tools import (
    Tool as Tool,
    ToolContext as ToolContext,
    define_tool as define_tool,
)
from helix_agents.children.inprocess import (
    InProcessTransport as InProcessTransport,
)
from helix_agents.children.tools import (
    create_remote_sub_agent_tool as create_remote_sub_agent_tool,
    create_sub_agent_tool as create_sub_agent_tool,
)
from helix_agents.events import (
    PendingInput as PendingInput,
)
from helix_agents.log.state import (
    SessionState as SessionState,
    SessionStatus as SessionStatus,
    StreamItem as StreamItem,
)
from helix_agents.log.store import (
    EventStore as EventStore,
)
from helix_agents.log.usage import (
    UsageRollup as UsageRollup,
    get_usage_rollup as get_usage_rollup,
)
from helix_agents.models.base import (
    LLMAdapter as LLMAdapter,
)
from helix_agents.runtime.executor import (
    AgentExecutor as AgentExecutor,
)
from helix_agents.runtime.handle import (
    AgentHandle as AgentHandle,
    AgentResult as AgentResult,
)
from helix_agents.runtime.sync import (
    run_sync as run_sync,
)
from helix_agents.transport import (
    RemoteAgentTransport as RemoteAgentTransport,
)

__all__ = [
    # agents and tools
    "define_agent",
    "define_tool",
    "tool",
    "create_sub_agent_tool",
    "create_remote_sub_agent_tool",
    "AgentConfig",
    "AgentHooks",
    "HookContext",
    "PersistentAgent",
    "Tool",
    "ToolContext",
    # running agents
    "AgentExecutor",
    "AgentHandle",
    "AgentResult",
    "run_sync",
    "InProcessTransport",
    # what a run gives back
    "SessionState",
    "SessionStatus",
    "StreamItem",
    "PendingInput",
    "UsageRollup",
    "get_usage_rollup",
    # seams
    "EventStore",
    "RemoteAgentTransport",
    "LLMAdapter",
]
