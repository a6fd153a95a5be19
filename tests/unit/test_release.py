"""The habits of a released package: the LICENSE is the license ``pyproject.toml`` declares,
and ``CHANGELOG.md`` names every public name and module that moved.

The changelog's tables ("before | now") are checked both ways: the old import no longer works
and the new one does. ``PUBLIC`` holds every name a public home ever exported (``helix_agents``
before round 3 moved 168 names out of it, the engines' homes before round 4, and what each home
exports now): a name in it that no longer imports from its home must have a row, so a move
without a changelog line fails here. A name added to ``helix_agents.__all__`` must be added to
``PUBLIC`` too (the test says so), so that its removal will need a line in turn.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

import helix_agents

ROOT = Path(__file__).resolve().parents[2]
CHANGELOG = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")

_NAME_ROW = re.compile(
    r"^\| `from ([\w.]+) import (\w+)` \| `from ([\w.]+) import (\w+)`", re.MULTILINE
)
_MODULE_ROW = re.compile(r"^\| `(helix_agents[\w.]*)` \| `(helix_agents[\w.]*)`", re.MULTILINE)

LICENSES = {"MIT": ("MIT License", "Permission is hereby granted, free of charge")}
"""An SPDX expression -> the LICENSE file's first line and a phrase of its grant."""

PUBLIC: dict[str, str] = {
    "helix_agents": """
        AbortRequested Aborted AgentConfig AgentExecutor AgentHandle AgentHooks
        AgentRegistry AgentResult AgentRunError AgentServerError AgentServerErrorCode
        AgentService ApprovalGiven ApprovalPredicate ApprovalRequested ApprovalRule
        AssistantMessage CHUNK_TYPES COMPANION_TOOL_PREFIX ChildChunkForwarded Chunk
        ChunkBase ChunkEvent ClientToolOwnershipRecorded ClientToolPending
        ClientToolResultSubmitted Completed CompletionDelivered ConcurrencyConflict
        CorruptLogError CustomChunk DamagedLogError DamagedStoreError Divergence
        EVENT_TYPES EndEvent ErrorChunk ErrorEvent Event EventBase EventDecodeError
        EventStore ExecutorService FINISH_TOOL_NAME Failed HTTP_STATUS HelixError
        HookContext HostClaimed InProcessTransport InputRequired InterruptRequested
        Interrupted InvalidSessionIdError LLMAdapter LLMConfig LLMError LLMRequest
        LLMResponse LLMStreamEvent LLMTextDelta LocalWorkspaceProvider LogError
        MAX_SESSION_ID_LENGTH MemoryWorkspaceProvider Message MessageAppended
        MessageQueued MessageReceipt OpenAIChatLLM OutputChunk OwnershipLost
        PendingApproval PendingClientTool PendingInput PendingInputKind PersistentAgent
        RESERVED_TOOL_PREFIXES RUN_ENDING_EVENTS RemoteAgentFailedError
        RemoteAgentTransport RemoteMessageRequest RemoteMessageResponse RemoteRef
        RemoteResumeRequest RemoteStartRequest RemoteStartResponse RemoteStatusResponse
        RemoteSubAgentTool ReplayLLM RunGuard RunMode RunStarted SESSION_ID_ALPHABET
        SUBAGENT_TOOL_PREFIX ScriptStep ScriptedLLM SessionCreated SessionProjector
        SessionState SessionStatus StateUpdated StatusSnapshot StepRestarted StepStarted
        StoreClosedError StoreError StreamDropError StreamItem SubAgentEnd SubAgentStart
        SubAgentTool SubSessionFinishStatus SubSessionFinished SubSessionMode
        SubSessionRef SubSessionResumed SubSessionStarted SubSessionStatus
        SubSessionSuspended SubmitApprovalRequest SubmitResponse SubmitToolResultRequest
        Suspended SuspensionReason SystemMessage TakeoverClaim TextDelta TokenUsage Tool
        ToolCall ToolContext ToolEnd ToolExecute ToolOwnership ToolResultMessage ToolSpec
        ToolStart TransportError TransportEvent TransportTimeoutError UsageError UsageKind
        UsageRecorded UsageRollup UsageTotals UserMessage WORKSPACE_TOOL_NAMES
        WORKSPACE_TOOL_PREFIX Workspace WorkspaceDeleted WorkspaceEntry WorkspaceError
        WorkspaceFailedError WorkspaceFile WorkspaceFileNotFoundError
        WorkspaceInheritanceError WorkspaceLimitError WorkspacePathError WorkspaceProvider
        WorkspaceRef WorkspaceWritten checked_from_sequence checked_message_id
        checked_messages checked_session_id create_remote_sub_agent_tool
        create_sub_agent_tool decode_event decode_events decode_jsonl decode_session_token
        define_agent define_tool encode_event encode_jsonl encode_session_token
        final_event get_usage_rollup is_sub_agent_tool message_from_input new_run_id
        normalize_workspace_path pending_inputs project_state project_status
        project_stream run_sync status_of stream_item stream_session tool
        validate_session_id validate_tool_name
    """,
    "helix_agents.temporal": """
        AgentWorkflow DevServer TemporalConnection TemporalLauncher TemporalOptions
        TemporalRuntime TemporalService TemporalWorker ToolPolicy WorkflowInput attach
        connect temporal_server
    """,
    "helix_agents.dbos": """
        DbosLauncher DbosOptions DbosRuntime DbosServer DbosService DbosWorker ToolPolicy
        dbos_server
    """,
    "helix_agents.durable": """
        Beat CallJob CallSteps ChildOpened DurableService DurableSteps JobDone Launch Plan
        Round RoundEnd RunInput StepFailed StepInput StepKit StopInput ToolPolicy WaitLook
        WaitSteps collect_launches deferred_launch plan_of refuse_unsupported waits_on
    """,
    "helix_agents.stores.sqlite": """
        SqliteEventStore
    """,
    "helix_agents.stores.jetstream": """
        DEFAULT_OUTAGE_WAIT DEFAULT_STREAM JetStreamEventStore decode_session_token
        encode_session_token nats_servers
    """,
    "helix_agents.a2a": """
        A2ARemoteAgentTransport EXTENSION_URI FROM_SEQUENCE_HEADER a2a_routes
        create_a2a_sub_agent_tool
    """,
    "helix_agents.mcp": """
        AgentMessage CALL_META_KEYS MCPArguments MCPOptions MCPServerError MCPToolError
        MCPToolset MCP_PATH PROGRESS_CHUNK SESSION_META_KEY StdioServerParameters
    """,
    "helix_agents.memory": """
        DEFAULT_TENANT MemoryItem MemoryStore ToolMemory memory_of
    """,
    "helix_agents.stores": """
        DEFAULT_STORE_URL InMemoryMemoryStore JetStreamEventStore JetStreamMemoryStore
        MemoryEventStore SqliteEventStore SqliteMemoryStore StoreCheck check_store open_store
    """,
    "helix_agents.transports": """
        Fault FaultyTransport HeadersSource HttpRemoteAgentTransport InProcessTransport
        NatsRemoteAgentTransport Operation SSEMessage SSEParser
    """,
    "helix_agents.server": """
        AgentServer Auth DEFAULT_MAX_BODY_BYTES DEFAULT_MAX_STREAMS NatsAgentHost
        NatsRuntime SSEResponse SessionRequest StreamLimit create_http_app encode_sse
    """,
    "helix_agents.otel": """
        OtelTracer
    """,
    "helix_agents.models": """
        Divergence FINISH_TOOL_NAME LLMAdapter LLMError LLMRequest LLMResponse
        LLMStreamEvent LLMTextDelta NamedModel OpenAIChatLLM ReplayLLM ScriptStep
        ScriptedLLM TokenUsage ToolSpec model_from_name
    """,
    "helix_agents.agents": """
        AgentConfig AgentHooks AgentRegistry ApprovalPredicate ApprovalRule
        COMPANION_TOOL_PREFIX HookContext LLMConfig PersistentAgent RESERVED_TOOL_PREFIXES
        RemoteSubAgentTool SUBAGENT_TOOL_PREFIX SubAgentTool Tool ToolContext ToolExecute
        Toolset WORKSPACE_TOOL_PREFIX create_remote_sub_agent_tool create_sub_agent_tool
        define_agent define_tool is_sub_agent_tool tool validate_tool_name
    """,
    "helix_agents.events": """
        AbortRequested Aborted ApprovalGiven ApprovalRequested CHUNK_TYPES
        ChildChunkForwarded Chunk ChunkBase ClientToolOwnershipRecorded ClientToolPending
        ClientToolResultSubmitted Completed CompletionDelivered CustomChunk EVENT_TYPES
        ErrorChunk Event EventBase Failed HostClaimed InputRequired InterruptRequested
        Interrupted MessageAppended MessageQueued OutputChunk PendingInput
        PendingInputKind RemoteRef RunMode RunStarted SessionCreated StateUpdated
        StepRestarted StepStarted SubAgentEnd SubAgentStart SubSessionFinishStatus
        SubSessionFinished SubSessionMode SubSessionResumed SubSessionStarted
        SubSessionSuspended Suspended SuspensionReason TextDelta ToolEnd ToolStart
        UsageKind UsageRecorded WorkspaceDeleted WorkspaceWritten
    """,
    "helix_agents.errors": """
        AgentRunError AgentServerError AgentServerErrorCode ConcurrencyConflict
        CorruptLogError DamagedLogError DamagedStoreError EventDecodeError HTTP_STATUS
        HelixError InvalidSessionIdError LogError OwnershipLost RemoteAgentFailedError
        StoreClosedError StoreError StoreUnavailableError StreamDropError ToolsetError
        TransportError TransportTimeoutError UsageError WorkspaceError
        WorkspaceFailedError WorkspaceFileNotFoundError WorkspaceInheritanceError
        WorkspaceLimitError WorkspacePathError
    """,
    "helix_agents.messages": """
        AssistantMessage Message SystemMessage ToolCall ToolResultMessage UserMessage
    """,
    "helix_agents.log": """
        Cost EventStore MessageReceipt ModelPrice ModelTokens PendingApproval
        PendingClientTool Prices RUN_ENDING_EVENTS SessionProjector SessionState
        SessionStatus StatusSnapshot StreamItem SubSessionRef SubSessionStatus
        ToolOwnership UsageRollup UsageTotals WorkspaceFile decode_event decode_events
        decode_jsonl encode_event encode_jsonl final_event get_usage_rollup pending_inputs
        project_state project_status project_stream status_of stream_item stream_session
    """,
    "helix_agents.runtime": """
        AgentExecutor AgentHandle AgentResult ExecutorService InProcessTransport RunGuard
        Runtime RuntimeParts TakeoverClaim run_sync
    """,
    "helix_agents.workspaces": """
        LocalWorkspaceProvider MemoryWorkspaceProvider WORKSPACE_TOOL_NAMES Workspace
        WorkspaceEntry WorkspaceProvider WorkspaceRef normalize_workspace_path
    """,
    "helix_agents.protocol": """
        ChunkEvent DECIDED_BY_MAX EndEvent ErrorEvent RemoteMessageRequest
        RemoteMessageResponse RemoteResumeRequest RemoteStartRequest RemoteStartResponse
        RemoteStatusResponse StoreWait SubmitApprovalRequest SubmitResponse
        SubmitToolResultRequest TransportEvent checked_decided_by checked_from_sequence
        checked_message_id checked_messages checked_session_id message_from_input
    """,
    "helix_agents.ids": """
        MAX_SESSION_ID_LENGTH SESSION_ID_ALPHABET SessionId decode_session_token
        encode_session_token new_run_id validate_session_id
    """,
}


def _module(name: str) -> ModuleType | None:
    """The module ``name``, or None when there is no such module (any other failure raises)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            return None
        raise


def _has(module: str, name: str) -> bool:
    """True when ``from module import name`` gives the name (a submodule of that name is not it)."""
    found = _module(module)
    return found is not None and not isinstance(getattr(found, name, None), ModuleType | None)


MOVED = {(m.group(1), m.group(2)): (m.group(3), m.group(4)) for m in _NAME_ROW.finditer(CHANGELOG)}
MODULES = dict(_MODULE_ROW.findall(CHANGELOG))


def test_the_license_file_is_the_license_pyproject_declares() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = project["license"]
    assert isinstance(declared, str), "declare the license as an SPDX expression (PEP 639)"
    assert declared in LICENSES, f"no LICENSE text known here for {declared!r}"
    title, grant = LICENSES[declared]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith(title)
    assert grant in text
    assert project["license-files"] == ["LICENSE"]
    # setuptools refuses a License classifier beside an expression: the expression says it.
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]


def test_the_changelog_has_its_tables_and_an_unreleased_section() -> None:
    assert CHANGELOG.startswith("# Changelog")
    assert "\n## [Unreleased]\n" in CHANGELOG
    assert len(MOVED) >= 168 + 31  # round 3's names out of helix_agents, round 4's
    assert len(MODULES) >= 62 + 41


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()), ids=lambda pair: ".".join(pair))
def test_a_moved_name_is_gone_from_before_and_imports_from_now(
    old: tuple[str, str], new: tuple[str, str]
) -> None:
    assert not _has(*old), f"`from {old[0]} import {old[1]}` still works: drop its row"
    assert _has(*new), f"`from {new[0]} import {new[1]}` fails: the row points nowhere"


@pytest.mark.parametrize(("old", "new"), sorted(MODULES.items()))
def test_a_moved_module_is_gone_from_before_and_imports_from_now(old: str, new: str) -> None:
    assert _module(old) is None, f"{old} still imports: drop its row"
    assert _module(new) is not None, f"{new} does not import: the row points nowhere"


def test_a_public_name_that_left_its_home_has_a_changelog_row() -> None:
    missing = [
        f"from {module} import {name}"
        for module, names in PUBLIC.items()
        for name in names.split()
        if not _has(module, name) and (module, name) not in MOVED
    ]
    assert not missing, (
        "these imports no longer work and CHANGELOG.md does not say where the names went "
        "(add a row `| `from OLD import NAME` | `from NEW import NAME` |`): " + ", ".join(missing)
    )


def test_every_top_level_name_is_in_the_snapshot() -> None:
    known = set(PUBLIC["helix_agents"].split())
    new = sorted(set(helix_agents.__all__) - known)
    assert not new, f"add {new} to PUBLIC['helix_agents'] here, so a later move needs a row"
