"""helix-agents: multi-agent orchestration on an append-only event log.

``__all__`` is the API you build with: agents and tools, the executor and
what a run gives back, models (LLM adapters), messages, the store and
transport seams, workspaces and errors. Everything else lives in the module
named for it: the event classes a stream carries in ``helix_agents.events``
(``from helix_agents.events import TextDelta``), the wire structs in
``helix_agents.protocol``, session ids in ``helix_agents.ids``, the JSON
codec in ``helix_agents.log.codec``, projections in ``helix_agents.log.projections``.
Those names stay importable from here, so older code keeps working, but are
not part of ``__all__``. Stores, transports and the server live in
``helix_agents.stores``, ``.transports`` and ``.server``.
"""

from __future__ import annotations

# --- the API (``__all__``) ---
from helix_agents.agents.define import (
    AgentConfig as AgentConfig,
    AgentHooks as AgentHooks,
    AgentRegistry as AgentRegistry,
    HookContext as HookContext,
    LLMConfig as LLMConfig,
    PersistentAgent as PersistentAgent,
    RemoteSubAgentTool as RemoteSubAgentTool,
    SubAgentTool as SubAgentTool,
    create_remote_sub_agent_tool as create_remote_sub_agent_tool,
    create_sub_agent_tool as create_sub_agent_tool,
    define_agent as define_agent,
)
from helix_agents.agents.tools import (
    ApprovalPredicate as ApprovalPredicate,
    ApprovalRule as ApprovalRule,
    Tool as Tool,
    ToolContext as ToolContext,
    ToolExecute as ToolExecute,
    define_tool as define_tool,
)
from helix_agents.errors import (
    AgentRunError as AgentRunError,
    AgentServerError as AgentServerError,
    AgentServerErrorCode as AgentServerErrorCode,
    ConcurrencyConflict as ConcurrencyConflict,
    CorruptLogError as CorruptLogError,
    DamagedLogError as DamagedLogError,
    DamagedStoreError as DamagedStoreError,
    EventDecodeError as EventDecodeError,
    HelixError as HelixError,
    InvalidSessionIdError as InvalidSessionIdError,
    LogError as LogError,
    OwnershipLost as OwnershipLost,
    RemoteAgentFailedError as RemoteAgentFailedError,
    StoreClosedError as StoreClosedError,
    StoreError as StoreError,
    StreamDropError as StreamDropError,
    TransportError as TransportError,
    TransportTimeoutError as TransportTimeoutError,
    UsageError as UsageError,
    WorkspaceError as WorkspaceError,
    WorkspaceFailedError as WorkspaceFailedError,
    WorkspaceFileNotFoundError as WorkspaceFileNotFoundError,
    WorkspaceInheritanceError as WorkspaceInheritanceError,
    WorkspaceLimitError as WorkspaceLimitError,
    WorkspacePathError as WorkspacePathError,
)
from helix_agents.events import (
    PendingInput as PendingInput,
)
from helix_agents.log.projections import (
    project_state as project_state,
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
from helix_agents.messages import (
    AssistantMessage as AssistantMessage,
    Message as Message,
    SystemMessage as SystemMessage,
    ToolCall as ToolCall,
    ToolResultMessage as ToolResultMessage,
    UserMessage as UserMessage,
)
from helix_agents.models.base import (
    LLMAdapter as LLMAdapter,
    LLMError as LLMError,
    LLMRequest as LLMRequest,
    LLMResponse as LLMResponse,
    LLMStreamEvent as LLMStreamEvent,
    LLMTextDelta as LLMTextDelta,
    TokenUsage as TokenUsage,
    ToolSpec as ToolSpec,
)
from helix_agents.models.openai import (
    OpenAIChatLLM as OpenAIChatLLM,
)
from helix_agents.models.replay import (
    ReplayLLM as ReplayLLM,
)
from helix_agents.models.scripted import (
    ScriptedLLM as ScriptedLLM,
    ScriptStep as ScriptStep,
)
from helix_agents.runtime.executor import (
    AgentExecutor as AgentExecutor,
    AgentHandle as AgentHandle,
    AgentResult as AgentResult,
)
from helix_agents.runtime.inprocess import (
    InProcessTransport as InProcessTransport,
)
from helix_agents.runtime.run_sync import (
    run_sync as run_sync,
)
from helix_agents.transport import (
    RemoteAgentTransport as RemoteAgentTransport,
)
from helix_agents.workspaces.base import (
    Workspace as Workspace,
    WorkspaceProvider as WorkspaceProvider,
)
from helix_agents.workspaces.local import (
    LocalWorkspaceProvider as LocalWorkspaceProvider,
)
from helix_agents.workspaces.memory import (
    MemoryWorkspaceProvider as MemoryWorkspaceProvider,
)

# isort: split
# --- importable from here for older code; their home is the module named ---
from helix_agents.agents.tools import (
    COMPANION_TOOL_PREFIX as COMPANION_TOOL_PREFIX,
    FINISH_TOOL_NAME as FINISH_TOOL_NAME,
    RESERVED_TOOL_PREFIXES as RESERVED_TOOL_PREFIXES,
    SUBAGENT_TOOL_PREFIX as SUBAGENT_TOOL_PREFIX,
    WORKSPACE_TOOL_PREFIX as WORKSPACE_TOOL_PREFIX,
    is_sub_agent_tool as is_sub_agent_tool,
    validate_tool_name as validate_tool_name,
)
from helix_agents.errors import (
    HTTP_STATUS as HTTP_STATUS,
)
from helix_agents.events import (
    CHUNK_TYPES as CHUNK_TYPES,
    EVENT_TYPES as EVENT_TYPES,
    Aborted as Aborted,
    AbortRequested as AbortRequested,
    ApprovalGiven as ApprovalGiven,
    ApprovalRequested as ApprovalRequested,
    ChildChunkForwarded as ChildChunkForwarded,
    Chunk as Chunk,
    ChunkBase as ChunkBase,
    ClientToolOwnershipRecorded as ClientToolOwnershipRecorded,
    ClientToolPending as ClientToolPending,
    ClientToolResultSubmitted as ClientToolResultSubmitted,
    Completed as Completed,
    CompletionDelivered as CompletionDelivered,
    CustomChunk as CustomChunk,
    ErrorChunk as ErrorChunk,
    Event as Event,
    EventBase as EventBase,
    Failed as Failed,
    HostClaimed as HostClaimed,
    InputRequired as InputRequired,
    Interrupted as Interrupted,
    InterruptRequested as InterruptRequested,
    MessageAppended as MessageAppended,
    MessageQueued as MessageQueued,
    OutputChunk as OutputChunk,
    PendingInputKind as PendingInputKind,
    RemoteRef as RemoteRef,
    RunMode as RunMode,
    RunStarted as RunStarted,
    SessionCreated as SessionCreated,
    StateUpdated as StateUpdated,
    StepRestarted as StepRestarted,
    StepStarted as StepStarted,
    SubAgentEnd as SubAgentEnd,
    SubAgentStart as SubAgentStart,
    SubSessionFinished as SubSessionFinished,
    SubSessionFinishStatus as SubSessionFinishStatus,
    SubSessionMode as SubSessionMode,
    SubSessionResumed as SubSessionResumed,
    SubSessionStarted as SubSessionStarted,
    SubSessionSuspended as SubSessionSuspended,
    Suspended as Suspended,
    SuspensionReason as SuspensionReason,
    TextDelta as TextDelta,
    ToolEnd as ToolEnd,
    ToolStart as ToolStart,
    UsageKind as UsageKind,
    UsageRecorded as UsageRecorded,
    WorkspaceDeleted as WorkspaceDeleted,
    WorkspaceWritten as WorkspaceWritten,
)
from helix_agents.ids import (
    MAX_SESSION_ID_LENGTH as MAX_SESSION_ID_LENGTH,
    SESSION_ID_ALPHABET as SESSION_ID_ALPHABET,
    decode_session_token as decode_session_token,
    encode_session_token as encode_session_token,
    new_run_id as new_run_id,
    validate_session_id as validate_session_id,
)
from helix_agents.log.codec import (
    decode_event as decode_event,
    decode_events as decode_events,
    decode_jsonl as decode_jsonl,
    encode_event as encode_event,
    encode_jsonl as encode_jsonl,
)
from helix_agents.log.projections import (
    SessionProjector as SessionProjector,
    pending_inputs as pending_inputs,
    project_status as project_status,
    project_stream as project_stream,
    status_of as status_of,
    stream_item as stream_item,
)
from helix_agents.log.state import (
    MessageReceipt as MessageReceipt,
    PendingApproval as PendingApproval,
    PendingClientTool as PendingClientTool,
    StatusSnapshot as StatusSnapshot,
    SubSessionRef as SubSessionRef,
    SubSessionStatus as SubSessionStatus,
    ToolOwnership as ToolOwnership,
    UsageTotals as UsageTotals,
    WorkspaceFile as WorkspaceFile,
)
from helix_agents.log.streaming import (
    RUN_ENDING_EVENTS as RUN_ENDING_EVENTS,
    final_event as final_event,
    stream_session as stream_session,
)
from helix_agents.models.replay import (
    Divergence as Divergence,
)
from helix_agents.protocol import (
    ChunkEvent as ChunkEvent,
    EndEvent as EndEvent,
    ErrorEvent as ErrorEvent,
    RemoteMessageRequest as RemoteMessageRequest,
    RemoteMessageResponse as RemoteMessageResponse,
    RemoteResumeRequest as RemoteResumeRequest,
    RemoteStartRequest as RemoteStartRequest,
    RemoteStartResponse as RemoteStartResponse,
    RemoteStatusResponse as RemoteStatusResponse,
    SubmitApprovalRequest as SubmitApprovalRequest,
    SubmitResponse as SubmitResponse,
    SubmitToolResultRequest as SubmitToolResultRequest,
    TransportEvent as TransportEvent,
    checked_from_sequence as checked_from_sequence,
    checked_message_id as checked_message_id,
    checked_messages as checked_messages,
    checked_session_id as checked_session_id,
    message_from_input as message_from_input,
)
from helix_agents.runtime.executor import (
    RunGuard as RunGuard,
    TakeoverClaim as TakeoverClaim,
)
from helix_agents.runtime.service import (
    ExecutorService as ExecutorService,
)
from helix_agents.workspaces.base import (
    WorkspaceEntry as WorkspaceEntry,
    WorkspaceRef as WorkspaceRef,
    normalize_workspace_path as normalize_workspace_path,
)
from helix_agents.workspaces.tools import (
    WORKSPACE_TOOL_NAMES as WORKSPACE_TOOL_NAMES,
)

__all__ = [
    # agents
    "AgentConfig",
    "AgentHooks",
    "AgentRegistry",
    "PersistentAgent",
    "HookContext",
    "LLMConfig",
    "SubAgentTool",
    "RemoteSubAgentTool",
    "create_sub_agent_tool",
    "create_remote_sub_agent_tool",
    "define_agent",
    # tools
    "Tool",
    "ToolContext",
    "ToolExecute",
    "ApprovalRule",
    "ApprovalPredicate",
    "define_tool",
    # running agents
    "AgentExecutor",
    "AgentHandle",
    "AgentResult",
    "run_sync",
    # what a run gives back
    "SessionState",
    "SessionStatus",
    "StreamItem",
    "PendingInput",
    "UsageRollup",
    "get_usage_rollup",
    "project_state",
    # models
    "LLMAdapter",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamEvent",
    "LLMTextDelta",
    "TokenUsage",
    "ToolSpec",
    "OpenAIChatLLM",
    "ScriptedLLM",
    "ScriptStep",
    "ReplayLLM",
    # messages
    "Message",
    "UserMessage",
    "AssistantMessage",
    "SystemMessage",
    "ToolCall",
    "ToolResultMessage",
    # seams
    "EventStore",
    "RemoteAgentTransport",
    "InProcessTransport",
    # workspaces
    "Workspace",
    "WorkspaceProvider",
    "LocalWorkspaceProvider",
    "MemoryWorkspaceProvider",
    # errors
    "HelixError",
    "UsageError",
    "AgentRunError",
    "AgentServerError",
    "AgentServerErrorCode",
    "ConcurrencyConflict",
    "CorruptLogError",
    "DamagedLogError",
    "DamagedStoreError",
    "EventDecodeError",
    "InvalidSessionIdError",
    "LogError",
    "LLMError",
    "OwnershipLost",
    "RemoteAgentFailedError",
    "StoreClosedError",
    "StoreError",
    "StreamDropError",
    "TransportError",
    "TransportTimeoutError",
    "WorkspaceError",
    "WorkspaceFailedError",
    "WorkspaceFileNotFoundError",
    "WorkspaceInheritanceError",
    "WorkspaceLimitError",
    "WorkspacePathError",
]
