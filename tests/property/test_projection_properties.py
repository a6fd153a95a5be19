"""Properties of the projections and the codec over generated valid session logs."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st
from strategies import ALLOWED_STATUSES, event_of_type, events, session_logs

from helix_agents.events import (
    EVENT_TYPES,
    Aborted,
    ChildChunkForwarded,
    Completed,
    Event,
    EventBase,
    Failed,
    HostClaimed,
    Interrupted,
    MessageAppended,
    MessageQueued,
    RunStarted,
    SessionCreated,
    StateUpdated,
    StepStarted,
    SubSessionStarted,
    Suspended,
    UsageRecorded,
)
from helix_agents.log import (
    SessionProjector,
    decode_event,
    decode_events,
    decode_jsonl,
    encode_event,
    encode_jsonl,
    project_state,
    project_status,
    project_stream,
    status_of,
    stream_item,
)
from helix_agents.messages import AssistantMessage, ToolResultMessage

# The status each lifecycle event leaves the session in (specs/events.md, "Status values").
LIFECYCLE_STATUS: dict[type[EventBase], str] = {
    SessionCreated: "running",
    RunStarted: "running",
    Suspended: "paused",
    Interrupted: "interrupted",
    Completed: "completed",
    Failed: "failed",
    Aborted: "failed",
}


def as_json(value: Any) -> bytes:
    return msgspec.json.encode(value)


@given(log=session_logs())
def test_every_prefix_folds_to_a_valid_state_incrementally_or_at_once(log: list[Event]) -> None:
    projector = SessionProjector()
    expected_status = "running"
    for k, event in enumerate(log, start=1):
        incremental = as_json(projector.apply(event))  # encode now: the state is updated in place
        state = project_state(log[:k])
        expected_status = LIFECYCLE_STATUS.get(type(event), expected_status)
        assert state.last_seq == k
        assert state.status in ALLOWED_STATUSES
        assert state.status == expected_status
        assert state.updated_ts == event.ts
        assert as_json(state) == incremental
        assert project_status(log[:k]).latest_sequence == k


@given(log=session_logs())
def test_state_agrees_with_a_plain_reading_of_the_log(log: list[Event]) -> None:
    state = project_state(log)
    assert as_json(project_state(log)) == as_json(state)  # deterministic
    created = log[0]
    assert isinstance(created, SessionCreated)

    messages: list[Any] = list(created.messages)
    awaiting: list[str] = []  # calls of the last assistant turn without a result yet
    deferred: list[Any] = []  # input given meanwhile: joins after the turn's last result
    queued: list[Any] = []  # follow-ups queued during a run, not taken in yet
    custom_state = created.initial_state
    host_id = None
    steps = run_step = 0
    usage = {"input": 0, "output": 0, "llm": 0, "tool": 0, "subagent": 0}
    custom: dict[str, float] = {}
    last_child_seq: dict[str, int] = {}
    for event in log[1:]:
        match event:
            case RunStarted():
                (deferred if awaiting else messages).extend([*queued, *event.messages])
                queued = []
                run_step = 0
            case MessageQueued():
                queued += event.messages
            case MessageAppended(message=AssistantMessage() as message):
                messages.append(message)
                awaiting = [call.id for call in message.tool_calls]
            case MessageAppended(message=ToolResultMessage() as message):
                messages.append(message)
                if message.tool_call_id in awaiting:
                    awaiting.remove(message.tool_call_id)
                    if not awaiting:
                        messages += deferred
                        deferred = []
            case MessageAppended():
                messages.append(event.message)
            case StepStarted():
                steps += 1
                run_step = event.step
                (deferred if awaiting else messages).extend(queued[: event.taken])
                queued = queued[event.taken :]
            case StateUpdated():
                custom_state = event.state
            case HostClaimed():
                host_id = event.host_id
            case SubSessionStarted():
                last_child_seq.setdefault(event.sub_session_id, 0)
            case ChildChunkForwarded():
                last_child_seq[event.child_session_id] = event.child_seq
            case UsageRecorded(kind="tokens"):
                usage["input"] += event.input_tokens
                usage["output"] += event.output_tokens
                usage["llm"] += 1
            case UsageRecorded(kind="tool" | "subagent"):
                usage[event.kind] += 1
            case UsageRecorded(kind="custom"):
                key = event.name or "custom"
                custom[key] = custom.get(key, 0.0) + event.value
            case _:
                pass

    assert state.messages == messages
    assert state.awaiting_results == awaiting
    assert state.deferred_messages == deferred
    assert state.queued_messages == queued
    # A tool call and its result stay adjacent: no user input between a turn and its results.
    for before, after in zip(state.messages, state.messages[1:], strict=False):
        if isinstance(before, AssistantMessage) and before.tool_calls:
            assert isinstance(after, ToolResultMessage), (before, after)
    assert state.custom_state == custom_state
    assert state.host_id == host_id
    assert (state.step_count, state.run_step_count) == (steps, run_step)
    assert {sid: ref.last_child_seq for sid, ref in state.sub_sessions.items()} == last_child_seq
    assert (
        state.usage.input_tokens,
        state.usage.output_tokens,
        state.usage.llm_calls,
        state.usage.tool_calls,
        state.usage.sub_agent_calls,
    ) == tuple(usage.values())
    assert state.usage.custom == custom
    status = status_of(state)
    assert status.latest_sequence == log[-1].seq == len(log)
    assert set(status.pending_client_tool_call_ids) == {
        call_id for call_id, pending in state.pending_client_tools.items() if not pending.submitted
    }


@given(log=session_logs())
def test_stream_is_the_chunks_in_order_and_resumes_from_any_position(log: list[Event]) -> None:
    stream = project_stream(log)
    sequences = [item.sequence for item in stream]
    assert sequences == sorted(set(sequences))  # strictly increasing
    assert set(sequences) <= {event.seq for event in log}
    for k in range(len(stream) + 1):
        from_seq = 0 if k == 0 else stream[k - 1].sequence
        assert stream[k:] == project_stream([e for e in log if e.seq > from_seq])
    # Any seq, chunk or not, is a valid resume point.
    for from_seq in range(len(log) + 1):
        rest = [item for item in stream if item.sequence > from_seq]
        assert project_stream(log[from_seq:]) == rest
    # Each item is a chunk event itself, or the inner chunk of a forwarded one.
    by_seq = {item.sequence: item.chunk for item in stream}
    for event in log:
        item = stream_item(event)
        if isinstance(event, ChildChunkForwarded):
            assert by_seq[event.seq] is event.chunk  # flattened as is: origin agent_id kept
        elif item is not None:
            assert by_seq[event.seq] is event
        else:
            assert event.seq not in by_seq
    assert project_stream(log) == stream  # deterministic


@given(log=session_logs())
def test_a_log_survives_encoding_and_projects_the_same(log: list[Event]) -> None:
    items = [encode_event(event) for event in log]
    assert [decode_event(item) for item in items] == log
    assert decode_events(items) == log
    decoded = decode_jsonl(encode_jsonl(log))
    assert decoded == log
    assert as_json(project_state(decoded)) == as_json(project_state(log))
    assert project_stream(decoded) == project_stream(log)


@settings(max_examples=15)
@given(log=session_logs(max_events=250))
def test_long_logs_fold_the_same_incrementally_and_at_once(log: list[Event]) -> None:
    projector = SessionProjector()
    for event in log:
        projector.apply(event)
    assert as_json(projector.state) == as_json(project_state(log))
    assert projector.last_seq == len(log)
    assert decode_jsonl(encode_jsonl(log)) == log


@given(event=events())
def test_any_event_round_trips(event: Event) -> None:
    data = encode_event(event)
    assert decode_event(data) == event
    assert encode_event(decode_event(data)) == data


@pytest.mark.parametrize("cls", EVENT_TYPES, ids=lambda cls: cls.__name__)
@settings(max_examples=20)
@given(data=st.data())
def test_every_event_type_round_trips_with_arbitrary_values(
    cls: type[EventBase], data: st.DataObject
) -> None:
    event = data.draw(event_of_type(cls))
    assert type(event) is cls
    decoded = decode_event(encode_event(event))
    assert type(decoded) is cls
    assert decoded == event
