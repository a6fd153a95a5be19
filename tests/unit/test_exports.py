"""The public names of ``helix_agents`` and ``helix_agents.stores`` are pinned.

Adding or removing a public name is an API change: update the list here on purpose.
Every exported name exists, and every exported class and function (and each
public method of an exported class) has a docstring with a non-empty first line.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

import pytest

import helix_agents
import helix_agents.events
import helix_agents.stores

HELIX_AGENTS_ALL = {
    "AgentConfig",
    "AgentExecutor",
    "AgentHandle",
    "AgentHooks",
    "AgentRegistry",
    "PersistentAgent",
    "AgentResult",
    "AgentRunError",
    "AgentServerError",
    "AgentServerErrorCode",
    "ApprovalPredicate",
    "ApprovalRule",
    "AssistantMessage",
    "ConcurrencyConflict",
    "CorruptLogError",
    "DamagedLogError",
    "DamagedStoreError",
    "EventDecodeError",
    "EventStore",
    "HelixError",
    "HookContext",
    "InProcessTransport",
    "InvalidSessionIdError",
    "LLMAdapter",
    "LLMConfig",
    "LLMError",
    "LLMRequest",
    "LLMResponse",
    "LLMStreamEvent",
    "LLMTextDelta",
    "LocalWorkspaceProvider",
    "LogError",
    "MemoryWorkspaceProvider",
    "Message",
    "OpenAIChatLLM",
    "OwnershipLost",
    "PendingInput",
    "RemoteAgentFailedError",
    "RemoteAgentTransport",
    "RemoteSubAgentTool",
    "ReplayLLM",
    "ScriptStep",
    "ScriptedLLM",
    "SessionState",
    "SessionStatus",
    "StoreClosedError",
    "StoreError",
    "StreamDropError",
    "StreamItem",
    "SubAgentTool",
    "SystemMessage",
    "TokenUsage",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolExecute",
    "ToolResultMessage",
    "ToolSpec",
    "TransportError",
    "TransportTimeoutError",
    "UsageError",
    "UsageRollup",
    "UserMessage",
    "Workspace",
    "WorkspaceError",
    "WorkspaceFailedError",
    "WorkspaceFileNotFoundError",
    "WorkspaceInheritanceError",
    "WorkspaceLimitError",
    "WorkspacePathError",
    "WorkspaceProvider",
    "create_remote_sub_agent_tool",
    "create_sub_agent_tool",
    "define_agent",
    "define_tool",
    "get_usage_rollup",
    "project_state",
    "run_sync",
}

# Names that left ``helix_agents.__all__`` for the module named for them (the
# event classes, wire structs, ids, codec, projections, internals). They stay
# importable from ``helix_agents`` so older code keeps working.
MOVED = {
    "codec": {
        "decode_event",
        "decode_events",
        "decode_jsonl",
        "encode_event",
        "encode_jsonl",
    },
    "errors": {
        "HTTP_STATUS",
    },
    "events": {
        "AbortRequested",
        "Aborted",
        "ApprovalGiven",
        "ApprovalRequested",
        "CHUNK_TYPES",
        "ChildChunkForwarded",
        "Chunk",
        "ChunkBase",
        "ClientToolOwnershipRecorded",
        "ClientToolPending",
        "ClientToolResultSubmitted",
        "Completed",
        "CompletionDelivered",
        "CustomChunk",
        "EVENT_TYPES",
        "ErrorChunk",
        "Event",
        "EventBase",
        "Failed",
        "HostClaimed",
        "InputRequired",
        "InterruptRequested",
        "Interrupted",
        "MessageAppended",
        "MessageQueued",
        "OutputChunk",
        "PendingInputKind",
        "RemoteRef",
        "RunMode",
        "RunStarted",
        "SessionCreated",
        "StateUpdated",
        "StepRestarted",
        "StepStarted",
        "SubAgentEnd",
        "SubAgentStart",
        "SubSessionFinishStatus",
        "SubSessionFinished",
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
        "WorkspaceDeleted",
        "WorkspaceWritten",
    },
    "executor": {
        "RunGuard",
    },
    "ids": {
        "MAX_SESSION_ID_LENGTH",
        "SESSION_ID_ALPHABET",
        "decode_session_token",
        "encode_session_token",
        "new_run_id",
        "validate_session_id",
    },
    "projections": {
        "SessionProjector",
        "pending_inputs",
        "project_status",
        "project_stream",
        "status_of",
        "stream_item",
    },
    "protocol": {
        "ChunkEvent",
        "EndEvent",
        "ErrorEvent",
        "RemoteMessageRequest",
        "RemoteMessageResponse",
        "RemoteResumeRequest",
        "RemoteStartRequest",
        "RemoteStartResponse",
        "RemoteStatusResponse",
        "SubmitApprovalRequest",
        "SubmitResponse",
        "SubmitToolResultRequest",
        "TransportEvent",
        "checked_from_sequence",
        "checked_message_id",
        "checked_messages",
        "checked_session_id",
        "message_from_input",
    },
    "replay_llm": {
        "Divergence",
    },
    "service": {
        "ExecutorService",
    },
    "state": {
        "MessageReceipt",
        "PendingApproval",
        "PendingClientTool",
        "StatusSnapshot",
        "SubSessionRef",
        "SubSessionStatus",
        "ToolOwnership",
        "UsageTotals",
        "WorkspaceFile",
    },
    "streaming": {
        "RUN_ENDING_EVENTS",
        "final_event",
        "stream_session",
    },
    "tools": {
        "COMPANION_TOOL_PREFIX",
        "FINISH_TOOL_NAME",
        "RESERVED_TOOL_PREFIXES",
        "SUBAGENT_TOOL_PREFIX",
        "WORKSPACE_TOOL_PREFIX",
        "is_sub_agent_tool",
        "validate_tool_name",
    },
    "workspace_tools": {
        "WORKSPACE_TOOL_NAMES",
    },
    "workspaces": {
        "WorkspaceEntry",
        "WorkspaceRef",
        "normalize_workspace_path",
    },
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


@pytest.mark.parametrize("home", sorted(MOVED))
def test_moved_names_live_in_their_module_and_stay_importable(home: str) -> None:
    module = importlib.import_module(f"helix_agents.{home}")
    for name in MOVED[home]:
        assert name not in helix_agents.__all__
        assert name in module.__all__, f"{name} is not exported by helix_agents.{home}"
        assert getattr(helix_agents, name) is getattr(module, name)


def test_the_event_classes_are_not_in_the_top_level_api() -> None:
    events = {cls.__name__ for cls in helix_agents.events.EVENT_TYPES}
    assert len(events) > 30
    assert events & set(helix_agents.__all__) == set()
    assert events <= MOVED["events"]


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
