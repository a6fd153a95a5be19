"""The public names of ``helix_agents`` and ``helix_agents.stores`` are pinned.

Adding or removing a public name is an API change: update the list here on purpose.
Every exported name exists, and every exported class and function (and each
public method of an exported class) has a docstring with a non-empty first line.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import pytest

import helix_agents
import helix_agents.stores

HELIX_AGENTS_ALL = {
    "AbortRequested",
    "Aborted",
    "AgentConfig",
    "AgentExecutor",
    "AgentHandle",
    "AgentHooks",
    "AgentRegistry",
    "AgentResult",
    "RunGuard",
    "AgentServerError",
    "AgentServerErrorCode",
    "ExecutorService",
    "ApprovalGiven",
    "ApprovalRequested",
    "AssistantMessage",
    "CHUNK_TYPES",
    "COMPANION_TOOL_PREFIX",
    "ChildChunkForwarded",
    "Chunk",
    "ChunkBase",
    "ChunkEvent",
    "ClientToolOwnershipRecorded",
    "ClientToolPending",
    "ClientToolResultSubmitted",
    "Completed",
    "CompletionDelivered",
    "ConcurrencyConflict",
    "CorruptLogError",
    "DamagedLogError",
    "DamagedStoreError",
    "CustomChunk",
    "InputRequired",
    "PendingInput",
    "PendingInputKind",
    "Divergence",
    "EVENT_TYPES",
    "EndEvent",
    "ErrorChunk",
    "ErrorEvent",
    "Event",
    "EventBase",
    "EventDecodeError",
    "EventStore",
    "FINISH_TOOL_NAME",
    "Failed",
    "HTTP_STATUS",
    "HelixError",
    "HookContext",
    "HostClaimed",
    "InProcessTransport",
    "InterruptRequested",
    "Interrupted",
    "InvalidSessionIdError",
    "LLMAdapter",
    "LLMConfig",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamEvent",
    "LLMTextDelta",
    "LogError",
    "MAX_SESSION_ID_LENGTH",
    "Message",
    "MessageAppended",
    "OpenAIChatLLM",
    "OutputChunk",
    "OwnershipLost",
    "PendingApproval",
    "PendingClientTool",
    "RESERVED_TOOL_PREFIXES",
    "RUN_ENDING_EVENTS",
    "RemoteAgentFailedError",
    "RemoteAgentTransport",
    "RemoteRef",
    "RemoteResumeRequest",
    "RemoteStartRequest",
    "RemoteStartResponse",
    "RemoteStatusResponse",
    "RemoteSubAgentTool",
    "ReplayLLM",
    "RunMode",
    "RunStarted",
    "SESSION_ID_ALPHABET",
    "SUBAGENT_TOOL_PREFIX",
    "ScriptStep",
    "ScriptedLLM",
    "SessionCreated",
    "SessionProjector",
    "SessionState",
    "SessionStatus",
    "StateUpdated",
    "StatusSnapshot",
    "StepStarted",
    "StoreClosedError",
    "StoreError",
    "StreamDropError",
    "StreamItem",
    "SubAgentEnd",
    "SubAgentStart",
    "SubAgentTool",
    "SubSessionFinishStatus",
    "SubSessionFinished",
    "SubSessionMode",
    "SubSessionRef",
    "SubSessionResumed",
    "SubSessionStarted",
    "SubSessionStatus",
    "SubSessionSuspended",
    "SubmitToolResultRequest",
    "SubmitApprovalRequest",
    "SubmitResponse",
    "Suspended",
    "SuspensionReason",
    "SystemMessage",
    "TextDelta",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolEnd",
    "ToolExecute",
    "ApprovalPredicate",
    "ApprovalRule",
    "ToolOwnership",
    "ToolResultMessage",
    "ToolSpec",
    "ToolStart",
    "TransportError",
    "TransportEvent",
    "TransportTimeoutError",
    "UsageError",
    "UsageKind",
    "UsageRecorded",
    "UsageRollup",
    "UsageTotals",
    "UserMessage",
    "WORKSPACE_TOOL_PREFIX",
    "WORKSPACE_TOOL_NAMES",
    "LocalWorkspaceProvider",
    "MemoryWorkspaceProvider",
    "Workspace",
    "WorkspaceDeleted",
    "WorkspaceEntry",
    "WorkspaceError",
    "WorkspaceFailedError",
    "WorkspaceFile",
    "WorkspaceFileNotFoundError",
    "WorkspaceInheritanceError",
    "WorkspaceLimitError",
    "WorkspacePathError",
    "WorkspaceProvider",
    "WorkspaceRef",
    "WorkspaceWritten",
    "normalize_workspace_path",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
    "decode_event",
    "decode_events",
    "decode_jsonl",
    "define_agent",
    "define_tool",
    "encode_event",
    "encode_jsonl",
    "final_event",
    "get_usage_rollup",
    "is_sub_agent_tool",
    "message_from_input",
    "new_run_id",
    "project_state",
    "project_status",
    "project_stream",
    "status_of",
    "pending_inputs",
    "stream_item",
    "stream_session",
    "validate_session_id",
    "encode_session_token",
    "checked_session_id",
    "checked_from_sequence",
    "decode_session_token",
    "validate_tool_name",
}

STORES_ALL = {
    "DEFAULT_STORE_URL",
    "JetStreamEventStore",
    "MemoryEventStore",
    "SqliteEventStore",
    "StoreCheck",
    "check_store",
    "open_store",
}

PINNED = [
    pytest.param(helix_agents, HELIX_AGENTS_ALL, id="helix_agents"),
    pytest.param(helix_agents.stores, STORES_ALL, id="helix_agents.stores"),
]
MODULES = [
    pytest.param(helix_agents, id="helix_agents"),
    pytest.param(helix_agents.stores, id="helix_agents.stores"),
]


@pytest.mark.parametrize(("module", "expected"), PINNED)
def test_all_is_pinned(module: ModuleType, expected: set[str]) -> None:
    exported = module.__all__
    assert len(exported) == len(set(exported)), "__all__ lists a name twice"
    added, removed = set(exported) - expected, expected - set(exported)
    assert (added, removed) == (set(), set()), "update the pinned list if this is on purpose"


@pytest.mark.parametrize("module", MODULES)
def test_every_exported_name_exists(module: ModuleType) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []
    namespace: dict[str, Any] = {}
    exec(f"from {module.__name__} import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(module.__all__)


def _public_api(module: ModuleType) -> list[tuple[str, object]]:
    """The exported classes and functions, and the public methods and properties of the classes."""
    found: list[tuple[str, object]] = []
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            found.append((name, obj))
        elif inspect.isclass(obj):
            found.append((name, obj))
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, staticmethod | classmethod):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    found.append((f"{name}.{attr}", member))
    return found


def _summary(obj: object) -> str:
    """The first line of ``obj``'s own docstring, stripped ("" when it has none)."""
    lines = (obj.__doc__ or "").splitlines()
    return lines[0].strip() if lines else ""


def test_the_docstring_check_catches_what_it_should() -> None:
    def bare() -> None:
        pass

    def blank_first_line() -> None:
        """
        Summary on the second line."""

    class Documented:
        """A class."""

    class Undocumented(Documented):
        pass

    assert [_summary(obj) for obj in (bare, blank_first_line, Undocumented)] == ["", "", ""]
    assert _summary(Documented) == "A class."


@pytest.mark.parametrize("module", MODULES)
def test_every_public_class_and_function_has_a_docstring(module: ModuleType) -> None:
    api = _public_api(module)
    assert len(api) > len(module.__all__) // 3  # the walk really found the API
    undocumented = [name for name, obj in api if not _summary(obj)]
    assert undocumented == []


@pytest.mark.parametrize("module", MODULES)
def test_exported_classes_and_functions_are_our_own(module: ModuleType) -> None:
    foreign = [
        name
        for name in module.__all__
        if (inspect.isclass(obj := getattr(module, name)) or inspect.isfunction(obj))
        and not obj.__module__.startswith("helix_agents")
    ]
    assert foreign == []
