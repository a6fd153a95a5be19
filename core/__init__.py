"""helix-agents: multi-agent orchestration on an append-only event log.

Everything in ``core/`` is importable from here; stores, transports and the
server live in ``helix_agents.stores``, ``.transports`` and ``.server``.
"""

from __future__ import annotations

from .codec import (
    decode_event as decode_event,
)
from .codec import (
    decode_events as decode_events,
)
from .codec import (
    decode_jsonl as decode_jsonl,
)
from .codec import (
    encode_event as encode_event,
)
from .codec import (
    encode_jsonl as encode_jsonl,
)
from .errors import (
    AgentServerError as AgentServerError,
)
from .errors import (
    AgentServerErrorCode as AgentServerErrorCode,
)
from .errors import (
    ConcurrencyConflict as ConcurrencyConflict,
)
from .errors import (
    CorruptLogError as CorruptLogError,
)
from .errors import (
    EventDecodeError as EventDecodeError,
)
from .errors import (
    HelixError as HelixError,
)
from .errors import (
    InvalidSessionIdError as InvalidSessionIdError,
)
from .errors import (
    LogError as LogError,
)
from .errors import (
    RemoteAgentFailedError as RemoteAgentFailedError,
)
from .errors import (
    StoreClosedError as StoreClosedError,
)
from .errors import (
    StoreError as StoreError,
)
from .errors import (
    StreamDropError as StreamDropError,
)
from .errors import (
    TransportError as TransportError,
)
from .errors import (
    UsageError as UsageError,
)
from .events import (
    CHUNK_TYPES as CHUNK_TYPES,
)
from .events import (
    EVENT_TYPES as EVENT_TYPES,
)
from .events import (
    Aborted as Aborted,
)
from .events import (
    AbortRequested as AbortRequested,
)
from .events import (
    ApprovalGiven as ApprovalGiven,
)
from .events import (
    ApprovalRequested as ApprovalRequested,
)
from .events import (
    ChildChunkForwarded as ChildChunkForwarded,
)
from .events import (
    Chunk as Chunk,
)
from .events import (
    ChunkBase as ChunkBase,
)
from .events import (
    ClientToolOwnershipRecorded as ClientToolOwnershipRecorded,
)
from .events import (
    ClientToolPending as ClientToolPending,
)
from .events import (
    ClientToolResultSubmitted as ClientToolResultSubmitted,
)
from .events import (
    Completed as Completed,
)
from .events import (
    CompletionDelivered as CompletionDelivered,
)
from .events import (
    CustomChunk as CustomChunk,
)
from .events import (
    ErrorChunk as ErrorChunk,
)
from .events import (
    Event as Event,
)
from .events import (
    EventBase as EventBase,
)
from .events import (
    Failed as Failed,
)
from .events import (
    HostClaimed as HostClaimed,
)
from .events import (
    Interrupted as Interrupted,
)
from .events import (
    InterruptRequested as InterruptRequested,
)
from .events import (
    MessageAppended as MessageAppended,
)
from .events import (
    OutputChunk as OutputChunk,
)
from .events import (
    RemoteRef as RemoteRef,
)
from .events import (
    RunMode as RunMode,
)
from .events import (
    RunStarted as RunStarted,
)
from .events import (
    SessionCreated as SessionCreated,
)
from .events import (
    StateUpdated as StateUpdated,
)
from .events import (
    StepStarted as StepStarted,
)
from .events import (
    SubAgentEnd as SubAgentEnd,
)
from .events import (
    SubAgentStart as SubAgentStart,
)
from .events import (
    SubSessionFinished as SubSessionFinished,
)
from .events import (
    SubSessionFinishStatus as SubSessionFinishStatus,
)
from .events import (
    SubSessionMode as SubSessionMode,
)
from .events import (
    SubSessionResumed as SubSessionResumed,
)
from .events import (
    SubSessionStarted as SubSessionStarted,
)
from .events import (
    SubSessionSuspended as SubSessionSuspended,
)
from .events import (
    Suspended as Suspended,
)
from .events import (
    SuspensionReason as SuspensionReason,
)
from .events import (
    TextDelta as TextDelta,
)
from .events import (
    ToolEnd as ToolEnd,
)
from .events import (
    ToolStart as ToolStart,
)
from .events import (
    UsageKind as UsageKind,
)
from .events import (
    UsageRecorded as UsageRecorded,
)
from .ids import (
    MAX_SESSION_ID_LENGTH as MAX_SESSION_ID_LENGTH,
)
from .ids import (
    SESSION_ID_ALPHABET as SESSION_ID_ALPHABET,
)
from .ids import (
    new_run_id as new_run_id,
)
from .ids import (
    validate_session_id as validate_session_id,
)
from .messages import (
    AssistantMessage as AssistantMessage,
)
from .messages import (
    Message as Message,
)
from .messages import (
    SystemMessage as SystemMessage,
)
from .messages import (
    ToolCall as ToolCall,
)
from .messages import (
    ToolResultMessage as ToolResultMessage,
)
from .messages import (
    UserMessage as UserMessage,
)
from .projections import (
    SessionProjector as SessionProjector,
)
from .projections import (
    project_state as project_state,
)
from .projections import (
    project_status as project_status,
)
from .projections import (
    project_stream as project_stream,
)
from .projections import (
    status_of as status_of,
)
from .projections import (
    stream_item as stream_item,
)
from .state import (
    PendingApproval as PendingApproval,
)
from .state import (
    PendingClientTool as PendingClientTool,
)
from .state import (
    SessionState as SessionState,
)
from .state import (
    SessionStatus as SessionStatus,
)
from .state import (
    StatusSnapshot as StatusSnapshot,
)
from .state import (
    StreamItem as StreamItem,
)
from .state import (
    SubSessionRef as SubSessionRef,
)
from .state import (
    SubSessionStatus as SubSessionStatus,
)
from .state import (
    ToolOwnership as ToolOwnership,
)
from .state import (
    UsageTotals as UsageTotals,
)
from .store import (
    EventStore as EventStore,
)

__all__ = [
    "AgentServerError",
    "AgentServerErrorCode",
    "ConcurrencyConflict",
    "CorruptLogError",
    "EventDecodeError",
    "HelixError",
    "InvalidSessionIdError",
    "LogError",
    "RemoteAgentFailedError",
    "StoreClosedError",
    "StoreError",
    "StreamDropError",
    "TransportError",
    "UsageError",
    "MAX_SESSION_ID_LENGTH",
    "SESSION_ID_ALPHABET",
    "new_run_id",
    "validate_session_id",
    "AssistantMessage",
    "Message",
    "SystemMessage",
    "ToolCall",
    "ToolResultMessage",
    "UserMessage",
    "CHUNK_TYPES",
    "EVENT_TYPES",
    "Aborted",
    "AbortRequested",
    "ApprovalGiven",
    "ApprovalRequested",
    "Chunk",
    "ChunkBase",
    "ChildChunkForwarded",
    "ClientToolOwnershipRecorded",
    "ClientToolPending",
    "ClientToolResultSubmitted",
    "Completed",
    "CompletionDelivered",
    "CustomChunk",
    "ErrorChunk",
    "Event",
    "EventBase",
    "Failed",
    "HostClaimed",
    "Interrupted",
    "InterruptRequested",
    "MessageAppended",
    "OutputChunk",
    "RemoteRef",
    "RunMode",
    "RunStarted",
    "SessionCreated",
    "StateUpdated",
    "StepStarted",
    "SubAgentEnd",
    "SubAgentStart",
    "SubSessionFinished",
    "SubSessionFinishStatus",
    "SubSessionMode",
    "SubSessionResumed",
    "SubSessionStarted",
    "SubSessionSuspended",
    "Suspended",
    "SuspensionReason",
    "TextDelta",
    "ToolEnd",
    "ToolStart",
    "UsageKind",
    "UsageRecorded",
    "decode_event",
    "decode_events",
    "decode_jsonl",
    "encode_event",
    "encode_jsonl",
    "PendingApproval",
    "PendingClientTool",
    "SessionState",
    "SessionStatus",
    "StatusSnapshot",
    "StreamItem",
    "SubSessionRef",
    "SubSessionStatus",
    "ToolOwnership",
    "UsageTotals",
    "SessionProjector",
    "project_state",
    "project_status",
    "project_stream",
    "status_of",
    "stream_item",
    "EventStore",
]
