"""The event catalog and its JSON codec: tags, wire names, round trips, decode errors."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from helix_agents import PendingInput
from helix_agents.errors import EventDecodeError, HelixError, LogError
from helix_agents.events import (
    CHUNK_TYPES,
    EVENT_TYPES,
    Aborted,
    AbortRequested,
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Completed,
    CompletionDelivered,
    CustomChunk,
    DecideApproval,
    ErrorChunk,
    Event,
    EventBase,
    Failed,
    HostClaimed,
    InputRequired,
    Interrupted,
    InterruptRequested,
    MemoryRead,
    MemoryWritten,
    MessageAppended,
    MessageQueued,
    OutputChunk,
    PartialOutput,
    Principal,
    ReasoningDelta,
    RemoteRef,
    ReplaceState,
    ReplaceToolResult,
    ReplaceUserMessage,
    RequestMade,
    RunStarted,
    RunSuperseded,
    ScheduleCreated,
    ScheduleDeleted,
    ScheduleFired,
    SchedulePaused,
    ScheduleResumed,
    SessionCreated,
    SessionForked,
    StateUpdated,
    StepRestarted,
    StepStarted,
    SubAgentEnd,
    SubAgentStart,
    SubSessionFinished,
    SubSessionResumed,
    SubSessionStarted,
    SubSessionSuspended,
    Suspended,
    TextDelta,
    ToolEnd,
    ToolStart,
    UsageRecorded,
    UseAgent,
    Webhook,
    WebhookAttempted,
    WebhookDelivered,
    WebhookFailed,
    WorkspaceDeleted,
    WorkspaceWritten,
)
from helix_agents.log import decode_event, decode_events, decode_jsonl, encode_event, encode_jsonl
from helix_agents.memory import MemoryItem
from helix_agents.messages import (
    AssistantMessage,
    SystemMessage,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)

SID = "sess-1"
CHILD = "sess-1-sub-call_7"
GRANDCHILD = "sess-1-sub-call_7-sub-call_9"


def env(seq: int = 5) -> dict[str, Any]:
    return {"session_id": SID, "seq": seq, "ts": 1_700_000_000.25}


def agent(agent_id: str = SID, agent_type: str = "planner") -> dict[str, Any]:
    return {"agent_id": agent_id, "agent_type": agent_type}


GRANDCHILD_CHUNK = ToolStart(
    session_id=GRANDCHILD,
    seq=3,
    ts=1_700_000_000.0,
    **agent(GRANDCHILD, "searcher"),
    tool_call_id="call_11",
    tool_name="search",
    arguments={"q": "msgspec", "limit": 3},
)

# One instance per event class, every optional field set to a non-default value, so a
# round trip exercises every wire field. The last test of the catalog section keeps this
# table complete when a new event type is added.
SAMPLES: dict[type[EventBase], Event] = {
    SessionCreated: SessionCreated(
        **env(1),
        agent_type="planner",
        run_id="run-1",
        messages=[UserMessage(content="plan a trip")],
        input={"city": "Lyon", "days": 3},
        initial_state={"notes": [], "budget": 120.5},
        metadata={"user": "u-1"},
        parent_session_id="root",
        root_session_id="root",
        parent_tool_call_id="call_0",
        ancestors=["root"],
        workspace_session_id="root",
        trace_context={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
        strict=True,
        owner=Principal(tenant="acme", user="ada"),
        webhook=Webhook(url="https://hooks.example.com/helix", events=["completed"]),
    ),
    RunStarted: RunStarted(
        **env(),
        run_id="run-2",
        mode="continue",
        messages=[UserMessage(content="and Nice?")],
        message_id="msg-7",
        turn_of=5,
    ),
    StepStarted: StepStarted(**env(), step=4, taken=2),
    InterruptRequested: InterruptRequested(**env(), reason="user pressed stop"),
    AbortRequested: AbortRequested(**env(), reason="tenant deleted"),
    Interrupted: Interrupted(**env(), reason="user pressed stop"),
    Aborted: Aborted(**env(), reason="tenant deleted"),
    Suspended: Suspended(**env(), reason="client_tool", tool_call_ids=["call_1", "call_2"]),
    Completed: Completed(**env(), output={"answer": 42, "sources": ["a", "b"]}),
    Failed: Failed(**env(), error="LLM unreachable", recoverable=True),
    HostClaimed: HostClaimed(**env(), host_id="host-b", previous_host_id="host-a"),
    MessageAppended: MessageAppended(
        **env(),
        message=AssistantMessage(
            content="let me look",
            tool_calls=[ToolCall(id="call_1", name="search", arguments={"q": "x"})],
        ),
    ),
    MessageQueued: MessageQueued(
        **env(),
        messages=[UserMessage(content="also Grenoble")],
        message_id="msg-8",
        multitask="enqueue",
    ),
    StateUpdated: StateUpdated(**env(), state={"notes": ["n1"], "nested": {"k": [1, 2.5, None]}}),
    UsageRecorded: UsageRecorded(
        **env(),
        kind="tokens",
        name="gpt-x",
        input_tokens=120,
        output_tokens=30,
        value=0.25,
        sub_session_id=CHILD,
        data={"cached": True},
        cached_input_tokens=100,
        reasoning_tokens=12,
    ),
    TextDelta: TextDelta(**env(), **agent(), delta="Hel"),
    ReasoningDelta: ReasoningDelta(**env(), **agent(), delta="Lyon first, then"),
    PartialOutput: PartialOutput(**env(), **agent(), output={"title": "Lyon in thr"}),
    ToolStart: ToolStart(
        **env(), **agent(), tool_call_id="call_1", tool_name="search", arguments={"q": "x"}
    ),
    ToolEnd: ToolEnd(
        **env(),
        **agent(),
        tool_call_id="call_1",
        tool_name="search",
        result=["hit"],
        error="partial",
    ),
    SubAgentStart: SubAgentStart(
        **env(),
        **agent(),
        sub_agent_id=CHILD,
        sub_agent_type="researcher",
        tool_call_id="call_7",
        parent_session_id=SID,
        input={"topic": "Lyon"},
    ),
    SubAgentEnd: SubAgentEnd(
        **env(),
        **agent(),
        sub_agent_id=CHILD,
        sub_agent_type="researcher",
        tool_call_id="call_7",
        parent_session_id=SID,
        success=False,
        result={"partial": True},
        error="child failed",
    ),
    OutputChunk: OutputChunk(**env(), **agent(), output={"answer": 42}),
    ErrorChunk: ErrorChunk(**env(), **agent(), error="rate limited", recoverable=True),
    CustomChunk: CustomChunk(**env(), **agent(), name="progress", data={"pct": 50}),
    StepRestarted: StepRestarted(
        **env(), **agent(), step=3, discard_from=41, discard_deltas=5, discard_chars=123
    ),
    InputRequired: InputRequired(
        **env(),
        **agent(),
        pending=[
            PendingInput(
                kind="approval",
                tool_call_id="call_4",
                tool_name="pay",
                arguments={"amount": 10},
                owner_session_id=CHILD,
                path=[SID, CHILD],
                expires_in=30.0,
                expires_at=1_700_000_030.0,
            )
        ],
    ),
    SubSessionStarted: SubSessionStarted(
        **env(),
        sub_session_id=CHILD,
        agent_type="researcher",
        tool_call_id="call_7",
        mode="persistent",
        name="researcher",
        input={"topic": "Lyon"},
        remote=RemoteRef(transport="http", remote_agent_type="researcher", url="http://h:1"),
    ),
    SubSessionResumed: SubSessionResumed(**env(), sub_session_id=CHILD, tool_call_id="call_9"),
    SubSessionSuspended: SubSessionSuspended(
        **env(), sub_session_id=CHILD, reason="approval", tool_call_ids=["call_8"]
    ),
    ChildChunkForwarded: ChildChunkForwarded(
        **env(), child_session_id=CHILD, child_seq=12, chunk=GRANDCHILD_CHUNK
    ),
    SubSessionFinished: SubSessionFinished(
        **env(), sub_session_id=CHILD, status="failed", output={"partial": 1}, error="boom"
    ),
    CompletionDelivered: CompletionDelivered(**env(), sub_session_id=CHILD, via="push"),
    ClientToolPending: ClientToolPending(
        **env(),
        tool_call_id="call_3",
        tool_name="ask_user",
        arguments={"question": "ok?"},
        expires_in=60.0,
        expires_at=1_700_000_060.0,
    ),
    ClientToolResultSubmitted: ClientToolResultSubmitted(
        **env(), tool_call_id="call_3", result={"answer": "yes"}, error="late", expired=True
    ),
    ClientToolOwnershipRecorded: ClientToolOwnershipRecorded(
        **env(),
        tool_call_id="call_3",
        owner_session_id=CHILD,
        remote=RemoteRef(transport="nats", remote_agent_type="researcher"),
        via_session_id=CHILD,
        kind="approval",
        tool_name="ask_user",
        arguments={"question": "ok?"},
        path=[SID, CHILD],
        expires_in=60.0,
        expires_at=1_700_000_060.0,
    ),
    ApprovalRequested: ApprovalRequested(
        **env(),
        tool_call_id="call_4",
        tool_name="pay",
        arguments={"amount": 10},
        expires_in=30.0,
        expires_at=1_700_000_030.0,
    ),
    ApprovalGiven: ApprovalGiven(
        **env(),
        tool_call_id="call_4",
        approved=False,
        reason="too much",
        expired=True,
        decided_by="Ada Lovelace",
    ),
    WorkspaceWritten: WorkspaceWritten(
        **env(),
        workspace="notes",
        kind="local",
        path="lyon/history.md",
        size=42,
        sha256="ab" * 32,
        owner_session_id="root",
        tool_call_id="call_5",
    ),
    WorkspaceDeleted: WorkspaceDeleted(
        **env(),
        workspace="notes",
        kind="memory",
        path="lyon/draft.md",
        owner_session_id="root",
        tool_call_id="call_6",
    ),
    SessionForked: SessionForked(
        **env(),
        origin_session_id="origin",
        origin_seq=7,
        edits=[
            ReplaceUserMessage(seq=2, message=UserMessage(content="Paris instead")),
            ReplaceToolResult(tool_call_id="call_1", result={"temp": 3}, error="down"),
            ReplaceState(state={"n": 2}),
            DecideApproval(tool_call_id="call_4", approved=False, reason="no"),
            UseAgent(session_id="origin-sub-c1", agent_type="v2", model="openai:gpt-4o-mini"),
        ],
        origin_root_session_id="root",
        root_origin_seq=5,
        session_map={"origin": SID},
    ),
    RequestMade: RequestMade(
        **env(), action="approval", by=Principal(tenant="acme", user="ada"), ref="call_4"
    ),
    WebhookAttempted: WebhookAttempted(
        **env(), delivery_id=f"{SID}#9", attempt=2, next_at=1_700_000_030.5
    ),
    WebhookDelivered: WebhookDelivered(**env(), delivery_id=f"{SID}#9", attempt=2, status_code=202),
    WebhookFailed: WebhookFailed(
        **env(),
        delivery_id=f"{SID}#9",
        attempt=8,
        error="HTTP 500",
        status_code=500,
        next_at=1_700_000_090.0,
        final=True,
    ),
    MemoryWritten: MemoryWritten(
        **env(),
        namespace=("acme", "user-7", "prefs"),
        key="language",
        value={"lang": "fr"},
        version=2,
        tool_call_id="call_7",
        write=1,
    ),
    MemoryRead: MemoryRead(
        **env(),
        op="search",
        namespace=("acme", "user-7"),
        key=None,
        query="fr",
        limit=10,
        offset=5,
        items=[
            MemoryItem(
                namespace=("acme", "user-7", "prefs"),
                key="language",
                value={"lang": "fr"},
                version=2,
                created=1_700_000_000.0,
                updated=1_700_000_001.0,
            )
        ],
        tool_call_id="call_8",
    ),
    ScheduleCreated: ScheduleCreated(
        **env(),
        schedule_id="nightly",
        cron="0 2 * * *",
        timezone="Europe/Paris",
        interval_seconds=60,
        catchup="skip",
        start={"agentType": "triage", "message": "go"},
        turn={"sessionId": SID, "message": "again"},
        created_at=1_700_000_000.0,
        owner=Principal(tenant="acme", user="ada"),
    ),
    SchedulePaused: SchedulePaused(**env(), schedule_id="nightly", at=1_700_000_100.0),
    ScheduleResumed: ScheduleResumed(**env(), schedule_id="nightly", at=1_700_000_200.0),
    ScheduleDeleted: ScheduleDeleted(**env(), schedule_id="nightly", at=1_700_000_300.0),
    ScheduleFired: ScheduleFired(
        **env(),
        schedule_id="nightly",
        tick=1_700_006_400.0,
        run_session_id="cron.nightly.1700006400",
        message_id="cron.nightly.1700006400",
        missed=2,
        fired_at=1_700_006_400.5,
    ),
    RunSuperseded: RunSuperseded(**env(), run_id="run_1", from_seq=2, to_seq=9),
}

# The tags documented in specs/events.md: the wire names that must never change.
DOCUMENTED_TAGS: dict[type[EventBase], str] = {
    SessionCreated: "session_created",
    RunStarted: "run_started",
    StepStarted: "step_started",
    InterruptRequested: "interrupt_requested",
    AbortRequested: "abort_requested",
    Interrupted: "interrupted",
    Aborted: "aborted",
    Suspended: "suspended",
    Completed: "completed",
    Failed: "failed",
    HostClaimed: "host_claimed",
    MessageAppended: "message_appended",
    MessageQueued: "message_queued",
    StateUpdated: "state_updated",
    UsageRecorded: "usage_recorded",
    TextDelta: "text_delta",
    ReasoningDelta: "reasoning_delta",
    PartialOutput: "partial_output",
    ToolStart: "tool_start",
    ToolEnd: "tool_end",
    SubAgentStart: "subagent_start",
    SubAgentEnd: "subagent_end",
    OutputChunk: "output",
    ErrorChunk: "error",
    CustomChunk: "custom",
    InputRequired: "input_required",
    StepRestarted: "step_restarted",
    SubSessionStarted: "sub_session_started",
    SubSessionResumed: "sub_session_resumed",
    SubSessionSuspended: "sub_session_suspended",
    ChildChunkForwarded: "child_chunk_forwarded",
    SubSessionFinished: "sub_session_finished",
    CompletionDelivered: "completion_delivered",
    ClientToolPending: "client_tool_pending",
    ClientToolResultSubmitted: "client_tool_result_submitted",
    ClientToolOwnershipRecorded: "client_tool_ownership_recorded",
    ApprovalRequested: "approval_requested",
    ApprovalGiven: "approval_given",
    WorkspaceWritten: "workspace_written",
    WorkspaceDeleted: "workspace_deleted",
    SessionForked: "session_forked",
    RequestMade: "request_made",
    WebhookAttempted: "webhook_attempted",
    WebhookDelivered: "webhook_delivered",
    WebhookFailed: "webhook_failed",
    MemoryWritten: "memory_written",
    MemoryRead: "memory_read",
    ScheduleCreated: "schedule_created",
    SchedulePaused: "schedule_paused",
    ScheduleResumed: "schedule_resumed",
    ScheduleDeleted: "schedule_deleted",
    ScheduleFired: "schedule_fired",
    RunSuperseded: "run_superseded",
}

BY_NAME = pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda cls: cls.__name__)


def wire(event: Event) -> dict[str, Any]:
    """The event's JSON object, as plain Python."""
    decoded: dict[str, Any] = msgspec.json.decode(encode_event(event))
    return decoded


def camel(name: str) -> str:
    return re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), name)


# --- the catalog --------------------------------------------------------------


def test_samples_and_documented_tags_cover_every_event_type() -> None:
    assert set(SAMPLES) == set(EVENT_TYPES)
    assert set(DOCUMENTED_TAGS) == set(EVENT_TYPES)
    assert len(EVENT_TYPES) == len(set(EVENT_TYPES))
    assert all(type(sample) is cls for cls, sample in SAMPLES.items())


def test_chunk_types_are_the_twelve_stream_chunks() -> None:
    expected = (
        TextDelta,
        ReasoningDelta,
        PartialOutput,
        ToolStart,
        ToolEnd,
        SubAgentStart,
        SubAgentEnd,
        OutputChunk,
        ErrorChunk,
        CustomChunk,
        InputRequired,
        StepRestarted,
    )
    assert tuple(CHUNK_TYPES) == expected
    assert set(CHUNK_TYPES) <= set(EVENT_TYPES)


@BY_NAME
def test_round_trip_is_equal(cls: type[EventBase]) -> None:
    event = SAMPLES[cls]
    data = encode_event(event)
    assert isinstance(data, bytes)
    decoded = decode_event(data)
    assert type(decoded) is cls
    assert decoded == event
    assert decode_event(data.decode()) == event  # str input decodes the same
    assert encode_event(decoded) == data


@BY_NAME
def test_round_trip_of_required_fields_only(cls: type[EventBase]) -> None:
    """Omitted optional fields decode to their defaults (the evolution rule).

    The envelope has defaults only so that builders can leave it to the
    writer; on the wire the codec requires it, so it counts as required here.
    """
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    full = wire(SAMPLES[cls])
    envelope = {"session_id", "seq", "ts"}

    def required(f: msgspec.inspect.Field) -> bool:
        return f.required or f.name in envelope

    minimal = {"type": full["type"]}
    minimal |= {f.encode_name: full[f.encode_name] for f in info.fields if required(f)}
    decoded = decode_event(msgspec.json.encode(minimal))
    assert type(decoded) is cls
    for f in info.fields:
        if required(f):
            expected = getattr(SAMPLES[cls], f.name)
        elif f.default is not msgspec.NODEFAULT:
            expected = f.default
        elif f.default_factory is not msgspec.NODEFAULT:
            expected = f.default_factory()
        else:  # a field absent unless set (its default, UNSET, is never encoded)
            expected = msgspec.UNSET
        assert getattr(decoded, f.name) == expected, f.name
        if not required(f):  # the sample really exercises the optional field
            assert getattr(SAMPLES[cls], f.name) != expected, (cls.__name__, f.name)


@BY_NAME
def test_tag_is_explicit_snake_case_and_documented(cls: type[EventBase]) -> None:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str)
    assert re.fullmatch(r"[a-z]+(_[a-z]+)*", tag), tag
    assert tag == DOCUMENTED_TAGS[cls]
    assert cls.__struct_config__.tag_field == "type"
    assert wire(SAMPLES[cls])["type"] == tag


def test_tags_are_unique() -> None:
    tags = [cls.__struct_config__.tag for cls in EVENT_TYPES]
    assert len(tags) == len(set(tags))


def _structs_reachable_from_events() -> set[type[msgspec.Struct]]:
    found: set[type[msgspec.Struct]] = set()

    def visit(info: msgspec.inspect.Type) -> None:
        match info:
            case msgspec.inspect.StructType(cls=cls, fields=fields) if cls not in found:
                found.add(cls)
                for f in fields:
                    visit(f.type)
            case msgspec.inspect.UnionType(types=types):
                for member in types:
                    visit(member)
            case msgspec.inspect.ListType(item_type=item):
                visit(item)
            case msgspec.inspect.DictType(value_type=value):
                visit(value)
            case _:
                pass

    for cls in EVENT_TYPES:
        visit(msgspec.inspect.type_info(cls))
    return found


def test_every_wire_field_name_is_camel_case() -> None:
    structs = _structs_reachable_from_events()
    # Events, the four messages, ToolCall and RemoteRef are all reached.
    assert {UserMessage, SystemMessage, ToolResultMessage, ToolCall, RemoteRef} <= structs
    for struct in structs:
        info = msgspec.inspect.type_info(struct)
        assert isinstance(info, msgspec.inspect.StructType)
        for f in info.fields:
            assert f.encode_name == camel(f.name), (struct.__name__, f.name)
            assert re.fullmatch(r"[a-z][A-Za-z0-9]*", f.encode_name), f.encode_name


def test_wire_names_of_a_chunk_and_a_forwarded_chunk() -> None:
    assert wire(SAMPLES[ToolStart]) == {
        "type": "tool_start",
        "sessionId": SID,
        "seq": 5,
        "ts": 1_700_000_000.25,
        "agentId": SID,
        "agentType": "planner",
        "toolCallId": "call_1",
        "toolName": "search",
        "arguments": {"q": "x"},
    }
    forwarded = wire(SAMPLES[ChildChunkForwarded])
    assert forwarded["childSessionId"] == CHILD
    assert forwarded["childSeq"] == 12
    assert forwarded["chunk"]["type"] == "tool_start"
    assert forwarded["chunk"]["agentId"] == GRANDCHILD
    assert forwarded["chunk"]["sessionId"] == GRANDCHILD
    assert forwarded["chunk"]["toolCallId"] == "call_11"


def test_wire_names_of_messages_and_refs() -> None:
    message = wire(SAMPLES[MessageAppended])["message"]
    assert message == {
        "role": "assistant",
        "content": "let me look",
        "toolCalls": [{"id": "call_1", "name": "search", "arguments": {"q": "x"}}],
    }
    result = MessageAppended(
        **env(),
        message=ToolResultMessage(
            tool_call_id="call_1", tool_name="search", content="hit", is_error=True
        ),
    )
    assert wire(result)["message"] == {
        "role": "tool",
        "toolCallId": "call_1",
        "toolName": "search",
        "content": "hit",
        "isError": True,
    }
    assert wire(SAMPLES[SubSessionStarted])["remote"] == {
        "transport": "http",
        "remoteAgentType": "researcher",
        "url": "http://h:1",
    }
    created = wire(SAMPLES[SessionCreated])
    for name in ("initialState", "parentSessionId", "rootSessionId", "parentToolCallId"):
        assert name in created
    usage = wire(SAMPLES[UsageRecorded])
    for name in ("inputTokens", "outputTokens", "subSessionId"):
        assert name in usage


@pytest.mark.parametrize(
    "message",
    [
        SystemMessage(content="be brief"),
        UserMessage(content="hi"),
        AssistantMessage(),
        AssistantMessage(content="", tool_calls=[ToolCall(id="c", name="n")]),
        ToolResultMessage(tool_call_id="c", tool_name="n", content="r"),
    ],
    ids=lambda m: type(m).__name__,
)
def test_every_message_role_round_trips(message: Any) -> None:
    event = MessageAppended(**env(), message=message)
    decoded = decode_event(encode_event(event))
    assert decoded == event
    assert isinstance(decoded, MessageAppended)
    assert type(decoded.message) is type(message)


# --- tolerated and rejected input -------------------------------------------


def test_unknown_fields_are_tolerated_at_every_level() -> None:
    event = SAMPLES[ChildChunkForwarded]
    data = wire(event)
    data["futureField"] = {"anything": [1, 2]}
    data["chunk"]["addedLater"] = "x"
    assert decode_event(msgspec.json.encode(data)) == event

    message = wire(SAMPLES[MessageAppended])
    message["message"]["newThing"] = 1
    message["message"]["toolCalls"][0]["extra"] = None
    assert decode_event(msgspec.json.encode(message)) == SAMPLES[MessageAppended]


def _mutated(cls: type[EventBase], **changes: Any) -> bytes:
    data = wire(SAMPLES[cls])
    for key, value in changes.items():
        if value is _DROP:
            del data[key]
        else:
            data[key] = value
    return msgspec.json.encode(data)


_DROP = object()

BAD_INPUT = {
    "unknown type": (_mutated(TextDelta, type="no_such_event"), "no_such_event"),
    "missing type": (_mutated(TextDelta, type=_DROP), "type"),
    "type of wrong case": (_mutated(TextDelta, type="TextDelta"), "TextDelta"),
    "missing envelope field": (_mutated(TextDelta, seq=_DROP), "seq"),
    "missing session id": (_mutated(StepStarted, sessionId=_DROP), "sessionId"),
    "missing own field": (_mutated(TextDelta, delta=_DROP), "delta"),
    "snake_case field name": (_mutated(TextDelta, agentId=_DROP, agent_id=SID), "agentId"),
    "seq as string": (_mutated(StepStarted, seq="5"), "seq"),
    "ts as string": (_mutated(StepStarted, ts="now"), "ts"),
    "step as float": (_mutated(StepStarted, step=1.5), "step"),
    "success as string": (_mutated(SubAgentEnd, success="yes"), "success"),
    "unknown run mode": (_mutated(RunStarted, mode="restart"), "mode"),
    "unknown usage kind": (_mutated(UsageRecorded, kind="gpu"), "kind"),
    "state not an object": (_mutated(StateUpdated, state=[1, 2]), "state"),
    "unknown message role": (_mutated(MessageAppended, message={"role": "bot"}), "bot"),
    "forwarded non-chunk": (
        _mutated(ChildChunkForwarded, chunk=wire(SAMPLES[StepStarted])),
        "step_started",
    ),
    "json array": (b"[]", ""),
    "json number": (b"42", ""),
    "json null": (b"null", ""),
    "truncated json": (encode_event(SAMPLES[TextDelta])[:-1], ""),
    "not json": (b"not json", ""),
    "empty": (b"", ""),
    "two objects": (encode_event(SAMPLES[TextDelta]) * 2, ""),
    "invalid utf-8 outside strings": (b"\xff", ""),
}


@pytest.mark.parametrize(("data", "mentions"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_raises_event_decode_error(data: bytes, mentions: str) -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode_event(data)
    error = caught.value
    assert isinstance(error, ValueError)
    assert isinstance(error, LogError)
    assert isinstance(error, HelixError)
    assert error.line is None
    assert mentions in str(error)
    assert isinstance(error.__cause__, msgspec.DecodeError)  # the cause is kept


def test_decode_error_is_a_value_error_for_callers_that_only_know_value_error() -> None:
    with pytest.raises(ValueError, match="no_such_event"):
        decode_event(_mutated(TextDelta, type="no_such_event"))


# --- JSON Lines -----------------------------------------------------------------


def test_jsonl_round_trip_one_line_per_event() -> None:
    events = list(SAMPLES.values())
    data = encode_jsonl(events)
    assert data.endswith(b"\n")
    lines = data.split(b"\n")[:-1]
    assert lines == [encode_event(event) for event in events]
    assert decode_jsonl(data) == events


def test_jsonl_keeps_newlines_inside_strings_on_one_line() -> None:
    tricky = TextDelta(**env(), **agent(), delta="a\nb\r\nc\u2028d\u0085e\x0bf\x1cg")
    data = encode_jsonl([tricky, tricky])
    assert data.count(b"\n") == 2
    assert decode_jsonl(data) == [tricky, tricky]


def test_jsonl_of_nothing() -> None:
    assert encode_jsonl([]) == b""
    assert decode_jsonl(b"") == []
    assert decode_jsonl(b"\n \n\t\n") == []


def test_jsonl_skips_blank_lines_and_accepts_crlf_and_a_missing_final_newline() -> None:
    a, b = SAMPLES[TextDelta], SAMPLES[StepStarted]
    data = b"\n" + encode_event(a) + b"\r\n  \r\n\t\n" + encode_event(b)
    assert decode_jsonl(data) == [a, b]


def test_jsonl_bad_line_reports_its_one_based_line_number() -> None:
    good = encode_event(SAMPLES[TextDelta])
    # Blank lines still count: the bad line is the file's fourth line.
    data = good + b"\n\n" + good + b"\n" + b'{"type":"text_delta"}' + b"\n" + good + b"\n"
    with pytest.raises(EventDecodeError) as caught:
        decode_jsonl(data)
    assert caught.value.line == 4
    assert str(caught.value).startswith("line 4: ")
    assert isinstance(caught.value, ValueError)


def test_jsonl_bad_first_line() -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode_jsonl(b"garbage\n" + encode_event(SAMPLES[TextDelta]))
    assert caught.value.line == 1


# --- batches ---------------------------------------------------------------------


def test_decode_events_equals_decoding_one_by_one() -> None:
    items = [encode_event(event) for event in SAMPLES.values()]
    assert decode_events(items) == [decode_event(item) for item in items]
    assert decode_events(items) == list(SAMPLES.values())
    assert decode_events([]) == []
    assert decode_events(items[:1]) == [SAMPLES[SessionCreated]]


@pytest.mark.parametrize("bad", [b'{"type":"nope"}', b"{", b"", b'{"type":"step_started"}'])
def test_decode_events_error_names_the_bad_item(bad: bytes) -> None:
    good = [encode_event(event) for event in list(SAMPLES.values())[:4]]
    items = [*good[:2], bad, *good[2:]]
    with pytest.raises(EventDecodeError) as caught:
        decode_events(items)
    assert "item 3" in str(caught.value)
    assert isinstance(caught.value, ValueError)


def test_decode_events_rejects_an_item_holding_two_events() -> None:
    """A corrupt row of two comma-joined events must not decode as two events."""
    a, b = SAMPLES[TextDelta], SAMPLES[StepStarted]
    good = encode_event(a)
    with pytest.raises(EventDecodeError, match="item 2"):
        decode_events([good, encode_event(a) + b"," + encode_event(b)])
    with pytest.raises(EventDecodeError, match="item 1"):
        decode_events([encode_event(a) + b"," + encode_event(b)])


INVALID_UTF8 = b'{"type":"text_delta","sessionId":"s","seq":1,"ts":0,"agentId":"a",' + (
    b'"agentType":"t","delta":"\xff"}'
)


def test_invalid_utf8_inside_a_string_raises_event_decode_error() -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode_event(INVALID_UTF8)
    assert caught.value.line is None
    with pytest.raises(EventDecodeError) as caught:
        decode_jsonl(encode_event(SAMPLES[TextDelta]) + b"\n" + INVALID_UTF8 + b"\n")
    assert caught.value.line == 2
    with pytest.raises(EventDecodeError, match="item 2"):
        decode_events([encode_event(SAMPLES[TextDelta]), INVALID_UTF8])
