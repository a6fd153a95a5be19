"""Projections of a session log: state, status and stream, on hand-built scenarios."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from helix_agents import PendingInput, SessionState, StreamItem
from helix_agents.errors import CorruptLogError, LogError
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
    ErrorChunk,
    Event,
    Failed,
    HostClaimed,
    InputRequired,
    Interrupted,
    InterruptRequested,
    MessageAppended,
    MessageQueued,
    OutputChunk,
    PartialOutput,
    ReasoningDelta,
    RemoteRef,
    RunStarted,
    SessionCreated,
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
)
from helix_agents.log import (
    MessageReceipt,
    ModelTokens,
    PendingApproval,
    PendingClientTool,
    RunBase,
    SessionProjector,
    StatusSnapshot,
    SubSessionRef,
    ToolOwnership,
    UsageTotals,
    project_state,
    project_status,
    project_stream,
    status_of,
    stream_item,
)
from helix_agents.log.folds import HANDLERS
from helix_agents.log.projections import _CHUNKS
from helix_agents.messages import AssistantMessage, ToolCall, ToolResultMessage, UserMessage

SID = "parent-1"
CHILD = f"{SID}-sub-call_r"
GRANDCHILD = f"{CHILD}-sub-call_s"


class Log:
    """Builds a valid log: seqs 1, 2, 3 ..., one session, ts = 100 + seq."""

    def __init__(self, session_id: str = SID) -> None:
        self.session_id = session_id
        self.events: list[Event] = []

    def add(self, cls: type[Any], **fields: Any) -> Any:
        seq = len(self.events) + 1
        event = cls(session_id=self.session_id, seq=seq, ts=100.0 + seq, **fields)
        self.events.append(event)
        return event

    def created(self, **fields: Any) -> Log:
        self.add(SessionCreated, **({"agent_type": "planner", "run_id": "run-1"} | fields))
        return self

    def started(self, **fields: Any) -> Log:
        self.created(**fields)
        self.add(RunStarted, run_id="run-1")
        return self

    def state(self) -> SessionState:
        return project_state(self.events)

    def chunk(self, cls: type[Any], **fields: Any) -> Any:
        return self.add(cls, agent_id=self.session_id, agent_type="planner", **fields)


def encoded(value: Any) -> Any:
    """A projection as plain JSON data (compares every field, recursively)."""
    return msgspec.json.decode(msgspec.json.encode(value))


# --- dispatch tables ------------------------------------------------------------


def test_every_event_type_has_a_handler() -> None:
    assert set(HANDLERS) == set(EVENT_TYPES)


def test_stream_chunk_classes_are_the_catalog_chunks() -> None:
    assert _CHUNKS == CHUNK_TYPES


CHUNK_FIELDS: dict[type[Any], dict[str, Any]] = {
    TextDelta: {"delta": "x"},
    ReasoningDelta: {"delta": "hmm"},
    PartialOutput: {"output": {"a": "x"}},
    ToolStart: {"tool_call_id": "c", "tool_name": "t"},
    ToolEnd: {"tool_call_id": "c", "tool_name": "t", "result": 1},
    SubAgentStart: {
        "sub_agent_id": CHILD,
        "sub_agent_type": "r",
        "tool_call_id": "c",
        "parent_session_id": SID,
    },
    SubAgentEnd: {
        "sub_agent_id": CHILD,
        "sub_agent_type": "r",
        "tool_call_id": "c",
        "parent_session_id": SID,
        "success": True,
    },
    OutputChunk: {"output": {"a": 1}},
    ErrorChunk: {"error": "e", "recoverable": True},
    CustomChunk: {"name": "n", "data": [1]},
    StepRestarted: {"step": 2, "discard_from": 1, "discard_deltas": 1, "discard_chars": 4},
    InputRequired: {
        "pending": [
            PendingInput(
                kind="client_tool",
                tool_call_id="c",
                tool_name="t",
                owner_session_id=SID,
                path=[SID],
            )
        ]
    },
}
"""Fields of one chunk of each class, besides the envelope and the agent."""


@pytest.mark.parametrize("cls", CHUNK_TYPES, ids=lambda cls: cls.__name__)
def test_a_chunk_changes_nothing_but_the_position(cls: type[Any]) -> None:
    log = Log().started()
    before = encoded(log.state())
    fields = CHUNK_FIELDS[cls]
    log.chunk(cls, **fields)
    after = encoded(log.state())
    assert after.pop("lastSeq") == 3
    assert after.pop("updatedTs") == 103.0
    before.pop("lastSeq")
    before.pop("updatedTs")
    assert after == before


# --- lifecycle ------------------------------------------------------------------


def test_session_created_builds_the_initial_state() -> None:
    created = Log().created(
        messages=[UserMessage(content="hi")],
        input={"topic": "x"},
        initial_state={"notes": ["a"]},
        metadata={"user": "u1"},
        parent_session_id="root-0",
        root_session_id="root-0",
        parent_tool_call_id="call_p",
    )
    assert created.state() == SessionState(
        session_id=SID,
        agent_type="planner",
        run_id="run-1",
        status="running",
        parent_session_id="root-0",
        root_session_id="root-0",
        parent_tool_call_id="call_p",
        metadata={"user": "u1"},
        input={"topic": "x"},
        messages=[UserMessage(content="hi")],
        custom_state={"notes": ["a"]},
        # What a rollback of the first run restores: no input yet, the initial state.
        run_base=RunBase(seq=1, custom_state={"notes": ["a"]}),
        last_seq=1,
        created_ts=101.0,
        updated_ts=101.0,
    )


def test_a_root_session_is_its_own_root() -> None:
    state = Log().created().state()
    assert state.root_session_id == SID
    assert state.parent_session_id is None


def test_initial_state_is_copied_not_shared_with_the_event() -> None:
    log = Log().created(initial_state={"k": 1}, messages=[UserMessage(content="hi")])
    state = log.state()
    state.custom_state["k"] = 2
    state.messages.append(UserMessage(content="more"))
    created = log.events[0]
    assert isinstance(created, SessionCreated)
    assert created.initial_state == {"k": 1}
    assert created.messages == [UserMessage(content="hi")]
    assert log.state().custom_state == {"k": 1}


def test_status_transitions_through_a_whole_life() -> None:
    log = Log().created()

    def check(status: str, **fields: Any) -> None:
        state = log.state()
        assert state.status == status, log.events[-1]
        for name, value in fields.items():
            assert getattr(state, name) == value, (log.events[-1], name)

    check("running", run_step_count=0, step_count=0)
    log.add(RunStarted, run_id="run-1")
    check("running")
    log.add(StepStarted, step=1)
    log.add(StepStarted, step=2)
    check("running", step_count=2, run_step_count=2)
    log.add(Suspended, reason="client_tool", tool_call_ids=["c1"])
    check("paused", suspension="client_tool", step_count=2)
    log.add(RunStarted, run_id="run-2", mode="resume")
    check("running", suspension=None, run_id="run-2", run_step_count=0, step_count=2)
    log.add(StepStarted, step=1)
    check("running", step_count=3, run_step_count=1)
    log.add(InterruptRequested, reason="stop please")
    check("running", interrupt_requested=True, stop_reason="stop please")
    log.add(Interrupted, reason="stop please")
    check("interrupted", interrupt_requested=False, is_terminal=False)
    log.add(RunStarted, run_id="run-3", mode="resume")
    check("running", run_id="run-3", run_step_count=0)
    log.add(StepStarted, step=1)
    log.add(Completed, output={"answer": 42})
    check("completed", output={"answer": 42}, error=None, is_terminal=True, step_count=4)
    log.add(RunStarted, run_id="run-4", mode="continue")
    check("running", output=None, run_id="run-4", is_terminal=False)
    log.add(Failed, error="LLM down", recoverable=True)
    check("failed", error="LLM down", recoverable=True, is_terminal=True)
    log.add(RunStarted, run_id="run-5", mode="resume")
    check("running", error=None, recoverable=False)
    log.add(AbortRequested, reason="tenant gone")
    check("running", abort_requested=True, stop_reason="tenant gone")
    log.add(Aborted, reason="tenant gone")
    check("failed", error="aborted: tenant gone", recoverable=False, is_terminal=True)


def test_failed_without_recoverable_is_not_recoverable() -> None:
    log = Log().started()
    log.add(Failed, error="bad output")
    state = log.state()
    assert (state.status, state.error, state.recoverable) == ("failed", "bad output", False)


def test_aborted_without_a_reason() -> None:
    log = Log().started()
    log.add(Failed, error="first", recoverable=True)
    log.add(Aborted)
    state = log.state()
    assert (state.status, state.error, state.recoverable) == ("failed", "aborted", False)


def test_resume_keeps_the_output_only_continue_clears_it() -> None:
    log = Log().started()
    log.add(Completed, output=[1, 2])
    log.add(RunStarted, run_id="run-2", mode="resume")
    assert log.state().output == [1, 2]
    log.add(Completed, output="second")
    log.add(RunStarted, run_id="run-3", mode="continue")
    assert log.state().output is None


def test_requests_do_not_change_the_status() -> None:
    log = Log().started()
    log.add(Suspended, reason="approval")
    log.add(InterruptRequested)
    log.add(AbortRequested)
    state = log.state()
    assert (state.status, state.suspension) == ("paused", "approval")
    assert state.interrupt_requested
    assert state.abort_requested


def test_run_started_clears_the_interrupt_request_not_the_abort_request() -> None:
    log = Log().started()
    log.add(InterruptRequested, reason="r")
    log.add(AbortRequested, reason="a")
    log.add(Suspended, reason="children")
    log.add(RunStarted, run_id="run-2", mode="resume")
    state = log.state()
    assert state.interrupt_requested is False
    assert state.abort_requested is True
    assert state.stop_reason is None


def test_step_count_counts_every_step_run_step_count_is_the_current_run() -> None:
    log = Log().started()
    for step in (1, 2, 3):
        log.add(StepStarted, step=step)
    log.add(Completed)
    log.add(RunStarted, run_id="run-2", mode="continue")
    assert (log.state().step_count, log.state().run_step_count) == (3, 0)
    log.add(StepStarted, step=1)
    assert (log.state().step_count, log.state().run_step_count) == (4, 1)


def test_host_claimed_records_the_current_host() -> None:
    log = Log().started()
    assert log.state().host_id is None
    log.add(HostClaimed, host_id="host-a")
    assert log.state().host_id == "host-a"
    log.add(HostClaimed, host_id="host-b", previous_host_id="host-a")
    assert log.state().host_id == "host-b"


def test_state_updated_replaces_the_custom_state() -> None:
    log = Log().started(initial_state={"a": 1, "b": 2})
    log.add(StateUpdated, state={"c": [3]})
    assert log.state().custom_state == {"c": [3]}
    log.add(StateUpdated, state={})
    assert log.state().custom_state == {}


# --- conversation -----------------------------------------------------------------


def test_messages_accumulate_in_log_order() -> None:
    log = Log().created(messages=[UserMessage(content="first")])
    log.add(RunStarted, run_id="run-1", messages=[UserMessage(content="second")])
    assistant = AssistantMessage(
        content="calling", tool_calls=[ToolCall(id="c1", name="search", arguments={"q": 1})]
    )
    result = ToolResultMessage(tool_call_id="c1", tool_name="search", content="found")
    log.add(MessageAppended, message=assistant)
    log.add(MessageAppended, message=result)
    log.add(Completed, output="done")
    log.add(RunStarted, run_id="run-2", mode="continue", messages=[UserMessage(content="third")])
    log.add(MessageAppended, message=AssistantMessage(content="ok"))
    assert log.state().messages == [
        UserMessage(content="first"),
        UserMessage(content="second"),
        assistant,
        result,
        UserMessage(content="third"),
        AssistantMessage(content="ok"),
    ]


def test_input_given_while_tool_results_are_missing_waits_for_them() -> None:
    """A tool call and its result stay adjacent: new input joins after the last result."""
    log = Log().created(messages=[UserMessage(content="u0")])
    log.add(RunStarted, run_id="run-1")
    turn = AssistantMessage(tool_calls=[ToolCall(id="c1", name="a"), ToolCall(id="c2", name="b")])
    r1 = ToolResultMessage(tool_call_id="c1", tool_name="a", content="1")
    r2 = ToolResultMessage(tool_call_id="c2", tool_name="b", content="2")
    log.add(MessageAppended, message=turn)
    assert log.state().awaiting_results == ["c1", "c2"]
    log.add(MessageAppended, message=r1)
    log.add(Suspended, reason="client_tool", tool_call_ids=["c2"])
    log.add(RunStarted, run_id="run-2", mode="resume", messages=[UserMessage(content="u1")])
    state = log.state()
    assert state.messages == [UserMessage(content="u0"), turn, r1]
    assert state.awaiting_results == ["c2"]
    assert state.deferred_messages == [UserMessage(content="u1")]

    log.add(MessageAppended, message=r2)
    state = log.state()
    assert state.messages == [UserMessage(content="u0"), turn, r1, r2, UserMessage(content="u1")]
    assert state.awaiting_results == []
    assert state.deferred_messages == []

    # With nothing awaited, input joins at once.
    log.add(MessageAppended, message=AssistantMessage(content="done"))
    log.add(Completed)
    log.add(RunStarted, run_id="run-3", mode="continue", messages=[UserMessage(content="u2")])
    assert log.state().messages[-2:] == [
        AssistantMessage(content="done"),
        UserMessage(content="u2"),
    ]
    assert log.state().deferred_messages == []


def test_client_tools_pending_submitted_and_settled() -> None:
    log = Log().started()
    log.add(ClientToolPending, tool_call_id="c1", tool_name="ask", arguments={"q": "?"})
    log.add(ClientToolPending, tool_call_id="c2", tool_name="pick")
    log.add(ClientToolPending, tool_call_id="c3", tool_name="ask")
    log.add(Suspended, reason="client_tool", tool_call_ids=["c1", "c2", "c3"])
    log.add(ClientToolResultSubmitted, tool_call_id="c1", result={"a": "yes"})
    log.add(ClientToolResultSubmitted, tool_call_id="c2", error="user cancelled")
    log.add(ClientToolResultSubmitted, tool_call_id="unknown", result=1)  # ignored
    state = log.state()
    assert state.pending_client_tools == {
        "c1": PendingClientTool(
            tool_call_id="c1",
            tool_name="ask",
            arguments={"q": "?"},
            submitted=True,
            result={"a": "yes"},
        ),
        "c2": PendingClientTool(
            tool_call_id="c2", tool_name="pick", submitted=True, error="user cancelled"
        ),
        "c3": PendingClientTool(tool_call_id="c3", tool_name="ask"),
    }
    status = project_status(log.events)
    assert status.pending_client_tool_call_ids == ["c3"]
    assert status.status == "paused"
    assert status.suspension == "client_tool"

    log.add(RunStarted, run_id="run-2", mode="resume")
    log.add(
        MessageAppended,
        message=ToolResultMessage(tool_call_id="c1", tool_name="ask", content="yes"),
    )
    assert set(log.state().pending_client_tools) == {"c2", "c3"}


def test_approvals_requested_decided_and_settled() -> None:
    log = Log().started()
    log.add(ApprovalRequested, tool_call_id="a1", tool_name="pay", arguments={"eur": 5})
    log.add(ApprovalRequested, tool_call_id="a2", tool_name="delete")
    log.add(ApprovalGiven, tool_call_id="a1", approved=True)
    log.add(ApprovalGiven, tool_call_id="a2", approved=False, reason="no", decided_by="Ada")
    log.add(ApprovalGiven, tool_call_id="nobody", approved=True)  # ignored
    when = {e.tool_call_id: e.ts for e in log.events if isinstance(e, ApprovalGiven)}
    assert log.state().pending_approvals == {
        "a1": PendingApproval(
            tool_call_id="a1",
            tool_name="pay",
            arguments={"eur": 5},
            approved=True,
            decided_at=when["a1"],
        ),
        "a2": PendingApproval(
            tool_call_id="a2",
            tool_name="delete",
            approved=False,
            reason="no",
            decided_by="Ada",
            decided_at=when["a2"],
        ),
    }


def test_a_tool_result_message_settles_the_pending_client_tool_and_approval_of_its_call() -> None:
    log = Log().started()
    log.add(ClientToolPending, tool_call_id="c1", tool_name="ask")
    log.add(ClientToolPending, tool_call_id="c2", tool_name="ask")
    log.add(ApprovalRequested, tool_call_id="c1", tool_name="ask")
    log.add(ApprovalRequested, tool_call_id="c3", tool_name="pay")
    # Messages of other roles, and results of other calls, settle nothing.
    log.add(MessageAppended, message=AssistantMessage(content="c1"))
    log.add(MessageAppended, message=UserMessage(content="c1"))
    assert set(log.state().pending_client_tools) == {"c1", "c2"}
    assert set(log.state().pending_approvals) == {"c1", "c3"}
    log.add(
        MessageAppended,
        message=ToolResultMessage(tool_call_id="c1", tool_name="ask", content="r", is_error=True),
    )
    state = log.state()
    assert set(state.pending_client_tools) == {"c2"}
    assert set(state.pending_approvals) == {"c3"}


def test_client_tool_ownership_map() -> None:
    log = Log().started()
    remote = RemoteRef(transport="nats", remote_agent_type="writer")
    log.add(ClientToolOwnershipRecorded, tool_call_id="c1", owner_session_id=SID)
    log.add(ClientToolOwnershipRecorded, tool_call_id="c2", owner_session_id=CHILD, remote=remote)
    assert log.state().client_tool_ownership == {
        "c1": ToolOwnership(owner_session_id=SID),
        "c2": ToolOwnership(owner_session_id=CHILD, remote=remote),
    }
    log.add(ClientToolOwnershipRecorded, tool_call_id="c1", owner_session_id=GRANDCHILD)
    assert log.state().client_tool_ownership["c1"] == ToolOwnership(owner_session_id=GRANDCHILD)


def test_usage_totals_per_kind() -> None:
    log = Log().started()
    assert log.state().usage == UsageTotals()
    log.add(UsageRecorded, kind="tokens", input_tokens=100, output_tokens=20)
    log.add(UsageRecorded, kind="tokens", name="gpt-x", input_tokens=7, output_tokens=3)
    log.add(UsageRecorded, kind="tool", name="search")
    log.add(UsageRecorded, kind="tool", name="fetch")
    log.add(UsageRecorded, kind="subagent", name="researcher", sub_session_id=CHILD)
    log.add(UsageRecorded, kind="custom", name="cost", value=0.5)
    log.add(UsageRecorded, kind="custom", name="cost", value=0.25)
    log.add(UsageRecorded, kind="custom", name="latency", value=-2.0)
    log.add(UsageRecorded, kind="custom", value=3.0)
    assert log.state().usage == UsageTotals(
        input_tokens=107,
        output_tokens=23,
        llm_calls=2,
        tool_calls=2,
        sub_agent_calls=1,
        models={  # by the model name reported ("": none), what prices them
            "": ModelTokens(input_tokens=100, output_tokens=20, llm_calls=1),
            "gpt-x": ModelTokens(input_tokens=7, output_tokens=3, llm_calls=1),
        },
        custom={"cost": 0.75, "latency": -2.0, "custom": 3.0},
    )


# --- children -------------------------------------------------------------------


def forwarded(log: Log, child_seq: int, *, child: str = CHILD, origin: str = CHILD) -> Any:
    chunk = TextDelta(
        session_id=origin, seq=child_seq, ts=1.0, agent_id=origin, agent_type="r", delta="x"
    )
    return log.add(ChildChunkForwarded, child_session_id=child, child_seq=child_seq, chunk=chunk)


def test_sub_session_lifecycle_as_the_parent_sees_it() -> None:
    log = Log().started()
    remote = RemoteRef(transport="http", remote_agent_type="researcher", url="http://h:1")
    started = log.add(
        SubSessionStarted,
        sub_session_id=CHILD,
        agent_type="researcher",
        tool_call_id="call_r",
        mode="persistent",
        name="researcher",
        input={"q": 1},
        remote=remote,
    )
    ref = SubSessionRef(
        sub_session_id=CHILD,
        agent_type="researcher",
        tool_call_id="call_r",
        mode="persistent",
        name="researcher",
        remote=remote,
        started_seq=3,
        spawn_call_id="call_r",
        started_at=started.ts,
    )
    assert log.state().sub_sessions == {CHILD: ref}

    forwarded(log, 2)
    forwarded(log, 5, origin=GRANDCHILD)  # a grandchild's chunk counts as the child's seq
    ref.last_child_seq = 5
    assert log.state().sub_sessions[CHILD] == ref

    suspended = log.add(
        SubSessionSuspended, sub_session_id=CHILD, reason="client_tool", tool_call_ids=["x"]
    )
    ref.status = "paused_awaiting_client"
    ref.suspended_seq = suspended.seq
    assert log.state().sub_sessions[CHILD] == ref

    log.add(SubSessionResumed, sub_session_id=CHILD)
    ref.status = "running"
    assert log.state().sub_sessions[CHILD] == ref

    forwarded(log, 6)
    finished = log.add(
        SubSessionFinished, sub_session_id=CHILD, status="completed", output={"r": 1}
    )
    ref.last_child_seq = 6
    ref.status, ref.output, ref.finished_seq = "completed", {"r": 1}, finished.seq
    ref.completed_at = finished.ts
    assert log.state().sub_sessions[CHILD] == ref

    log.add(CompletionDelivered, sub_session_id=CHILD)
    ref.completion_delivered = True
    assert log.state().sub_sessions[CHILD] == ref

    # Re-consulting the companion: it runs again and its next completion is undelivered;
    # the call that re-consulted it owns the new turn.
    log.add(SubSessionResumed, sub_session_id=CHILD, tool_call_id="call_send")
    ref.status, ref.completion_delivered, ref.finished_seq = "running", False, None
    ref.tool_call_id = "call_send"
    ref.completed_at = None  # running again: startedAt stays the spawn's
    assert log.state().sub_sessions[CHILD] == ref

    finished = log.add(SubSessionFinished, sub_session_id=CHILD, status="failed", error="boom")
    ref.status, ref.output, ref.error, ref.finished_seq = "failed", None, "boom", finished.seq
    ref.completed_at = finished.ts
    assert log.state().sub_sessions[CHILD] == ref


def test_respawning_a_persistent_child_resets_it_and_keeps_its_child_seq() -> None:
    log = Log().started()
    log.add(
        SubSessionStarted,
        sub_session_id=CHILD,
        agent_type="researcher",
        tool_call_id="call_1",
        mode="persistent",
    )
    forwarded(log, 4)
    log.add(SubSessionFinished, sub_session_id=CHILD, status="failed", output=1, error="e")
    log.add(CompletionDelivered, sub_session_id=CHILD, via="push")
    log.add(
        SubSessionStarted,
        sub_session_id=CHILD,
        agent_type="researcher",
        tool_call_id="call_2",
        mode="persistent",
    )
    ref = log.state().sub_sessions[CHILD]
    assert ref.status == "running"
    assert ref.completion_delivered is False
    assert (ref.output, ref.error, ref.finished_seq) == (None, None, None)
    assert ref.last_child_seq == 4  # the child's log continues: old seqs stay duplicates
    assert ref.started_seq == 3
    assert (ref.tool_call_id, ref.spawn_call_id) == ("call_2", "call_1")  # the turn's owner
    assert len(log.state().sub_sessions) == 1
    forwarded(log, 5)
    assert log.state().sub_sessions[CHILD].last_child_seq == 5
    forwarded(log, 5)
    with pytest.raises(CorruptLogError):
        log.state()


@pytest.mark.parametrize("status", ["completed", "failed", "interrupted", "terminated"])
def test_every_finish_status_is_recorded(status: Any) -> None:
    log = Log().started()
    log.add(SubSessionStarted, sub_session_id=CHILD, agent_type="r", tool_call_id="c")
    log.add(SubSessionFinished, sub_session_id=CHILD, status=status)
    assert log.state().sub_sessions[CHILD].status == status


def test_several_children_are_tracked_independently() -> None:
    log = Log().started()
    other = f"{SID}-sub-call_o"
    log.add(SubSessionStarted, sub_session_id=CHILD, agent_type="r", tool_call_id="call_r")
    log.add(SubSessionStarted, sub_session_id=other, agent_type="w", tool_call_id="call_o")
    forwarded(log, 3)
    forwarded(log, 1, child=other, origin=other)  # its own seq space
    forwarded(log, 4)
    log.add(SubSessionFinished, sub_session_id=other, status="completed")
    refs = log.state().sub_sessions
    assert (refs[CHILD].last_child_seq, refs[CHILD].status) == (4, "running")
    assert (refs[other].last_child_seq, refs[other].status) == (1, "completed")
    assert refs[CHILD].mode == refs[other].mode == "ephemeral"


# --- status -----------------------------------------------------------------------


def test_project_status_reports_the_protocol_view() -> None:
    log = Log().started(initial_state={"k": 1})
    log.add(StepStarted, step=1)
    log.add(ClientToolPending, tool_call_id="c1", tool_name="ask")
    log.add(ClientToolPending, tool_call_id="c2", tool_name="ask")
    log.add(ClientToolResultSubmitted, tool_call_id="c1", result=1)
    log.add(InterruptRequested)
    log.add(Suspended, reason="client_tool", tool_call_ids=["c1", "c2"])
    expected = StatusSnapshot(
        session_id=SID,
        run_id="run-1",
        status="paused",
        step_count=1,
        latest_sequence=8,
        state={"k": 1},
        suspension="client_tool",
        pending_client_tool_call_ids=["c2"],
        pending_inputs=[
            PendingInput(
                kind="client_tool",
                tool_call_id="c2",
                tool_name="ask",
                owner_session_id=SID,
                path=[SID],
            )
        ],
        awaiting_input=True,
        interrupt_requested=True,
    )
    assert project_status(log.events) == expected
    assert status_of(log.state()) == expected

    log.add(RunStarted, run_id="run-2", mode="resume")
    log.add(Completed, output={"done": True})
    assert project_status(log.events) == StatusSnapshot(
        session_id=SID,
        run_id="run-2",
        status="completed",
        step_count=1,
        latest_sequence=10,
        output={"done": True},
        state={"k": 1},
        pending_client_tool_call_ids=["c2"],
    )


def test_status_of_a_failed_session() -> None:
    log = Log().started()
    log.add(Failed, error="nope", recoverable=True)
    status = project_status(log.events)
    assert (status.status, status.error, status.recoverable) == ("failed", "nope", True)
    assert status.latest_sequence == 3


def test_project_status_of_an_empty_log_is_corrupt() -> None:
    with pytest.raises(CorruptLogError):
        project_status([])


# --- stream -----------------------------------------------------------------------


def test_project_stream_yields_chunks_with_their_seq_and_flattens_children() -> None:
    log = Log().started()
    log.add(StepStarted, step=1)
    start = log.chunk(
        ToolStart, tool_call_id="call_r", tool_name="subagent__researcher", arguments={"q": 1}
    )
    sub_start = log.chunk(
        SubAgentStart,
        sub_agent_id=CHILD,
        sub_agent_type="researcher",
        tool_call_id="call_r",
        parent_session_id=SID,
    )
    log.add(SubSessionStarted, sub_session_id=CHILD, agent_type="researcher", tool_call_id="call_r")
    child_text = forwarded(log, 3)
    grandchild_text = forwarded(log, 7, origin=GRANDCHILD)
    log.add(SubSessionFinished, sub_session_id=CHILD, status="completed", output="r")
    delta = log.chunk(TextDelta, delta="done")
    log.add(Completed, output="r")

    stream = project_stream(log.events)
    assert stream == [
        StreamItem(sequence=4, chunk=start),
        StreamItem(sequence=5, chunk=sub_start),
        StreamItem(sequence=7, chunk=child_text.chunk),
        StreamItem(sequence=8, chunk=grandchild_text.chunk),
        StreamItem(sequence=10, chunk=delta),
    ]
    assert stream[2].chunk.agent_id == CHILD
    assert stream[3].chunk.agent_id == GRANDCHILD
    assert stream[3].chunk.seq == 7  # the chunk itself is unchanged
    assert [stream_item(event) for event in log.events[:3]] == [None, None, None]
    assert stream_item(log.events[3]) == stream[0]


def test_project_stream_of_a_log_without_chunks_is_empty() -> None:
    log = Log().started()
    log.add(StepStarted, step=1)
    log.add(Completed)
    assert project_stream(log.events) == []
    assert project_stream([]) == []


def test_stream_item_json_uses_sequence_and_the_chunk_wire_form() -> None:
    log = Log().started()
    delta = log.chunk(TextDelta, delta="hi")
    assert encoded(project_stream(log.events)) == [
        {
            "sequence": 3,
            "chunk": {
                "type": "text_delta",
                "sessionId": SID,
                "seq": 3,
                "ts": 103.0,
                "agentId": SID,
                "agentType": "planner",
                "delta": delta.delta,
            },
        }
    ]


# --- the projector ------------------------------------------------------------------


def test_projector_folds_one_event_at_a_time_into_the_same_state() -> None:
    log = Log().started()
    log.add(StepStarted, step=1)
    log.add(Completed, output=1)
    projector = SessionProjector()
    assert projector.last_seq == 0
    with pytest.raises(CorruptLogError):
        _ = projector.state
    first = projector.apply(log.events[0])
    for event in log.events[1:]:
        assert projector.apply(event) is first  # updated in place
        assert projector.last_seq == event.seq
    assert projector.state is first
    assert encoded(first) == encoded(project_state(log.events))
    assert first.updated_ts == 104.0


def test_apply_all_continues_where_apply_stopped() -> None:
    log = Log().started()
    for step in (1, 2, 3):
        log.add(StepStarted, step=step)
    projector = SessionProjector()
    projector.apply(log.events[0])
    projector.apply(log.events[1])
    state = projector.apply_all(log.events[2:])
    assert encoded(state) == encoded(project_state(log.events))
    assert projector.apply_all([]) is state


def test_fold_of_an_iterator_equals_fold_of_a_list() -> None:
    log = Log().started()
    log.add(StepStarted, step=1)
    from_iterator = project_state(iter(log.events))
    assert from_iterator.updated_ts == 103.0
    assert encoded(from_iterator) == encoded(project_state(log.events))
    assert encoded(project_state(event for event in log.events)) == encoded(from_iterator)


# --- corrupt logs -------------------------------------------------------------------


def _created(seq: int = 1, session_id: str = SID) -> SessionCreated:
    return SessionCreated(session_id=session_id, seq=seq, ts=1.0, agent_type="a", run_id="r")


def _run(seq: int = 2, session_id: str = SID) -> RunStarted:
    return RunStarted(session_id=session_id, seq=seq, ts=2.0, run_id="r")


def _step(seq: int, step: int = 1) -> StepStarted:
    return StepStarted(session_id=SID, seq=seq, ts=3.0, step=step)


def _sub(seq: int) -> SubSessionStarted:
    return SubSessionStarted(
        session_id=SID, seq=seq, ts=3.0, sub_session_id=CHILD, agent_type="r", tool_call_id="c"
    )


def _fwd(seq: int, child_seq: int, child: str = CHILD) -> ChildChunkForwarded:
    chunk = TextDelta(
        session_id=child, seq=child_seq, ts=1.0, agent_id=child, agent_type="r", delta=""
    )
    return ChildChunkForwarded(
        session_id=SID, seq=seq, ts=4.0, child_session_id=child, child_seq=child_seq, chunk=chunk
    )


UNKNOWN = "nobody-sub-x"
ENV3: dict[str, Any] = {"session_id": SID, "seq": 3, "ts": 3.0}

# Each log is valid up to its last event, which is the corrupt one.
CORRUPT_LOGS: dict[str, list[Any]] = {
    "first event not session_created": [_run(seq=1)],
    "first event is a chunk": [
        TextDelta(session_id=SID, seq=1, ts=1.0, agent_id=SID, agent_type="a", delta="x")
    ],
    "session_created not at seq 1": [_created(seq=2)],
    "session_created at seq 0": [_created(seq=0)],
    "gap": [_created(), _run(seq=3)],
    "repeated seq": [_created(), _run(), _step(seq=2)],
    "seq goes back": [_created(), _run(), _step(seq=3), _step(seq=2, step=2)],
    "foreign session": [_created(), _run(session_id="someone-else")],
    "second session_created": [_created(), _run(), _created(seq=3)],
    "resumed unknown child": [
        _created(),
        _run(),
        SubSessionResumed(**ENV3, sub_session_id=UNKNOWN),
    ],
    "suspended unknown child": [
        _created(),
        _run(),
        SubSessionSuspended(**ENV3, sub_session_id=UNKNOWN),
    ],
    "finished unknown child": [
        _created(),
        _run(),
        SubSessionFinished(**ENV3, sub_session_id=UNKNOWN, status="completed"),
    ],
    "delivered unknown child": [
        _created(),
        _run(),
        CompletionDelivered(**ENV3, sub_session_id=UNKNOWN),
    ],
    "forwarded from unknown child": [_created(), _run(), _fwd(3, 1, child=UNKNOWN)],
    "forwarded child seq 0": [_created(), _run(), _sub(3), _fwd(4, 0)],
    "forwarded child seq repeated": [_created(), _run(), _sub(3), _fwd(4, 2), _fwd(5, 2)],
    "forwarded child seq goes back": [_created(), _run(), _sub(3), _fwd(4, 5), _fwd(5, 3)],
}


@pytest.mark.parametrize("events", CORRUPT_LOGS.values(), ids=CORRUPT_LOGS.keys())
def test_project_state_rejects_a_corrupt_log(events: list[Event]) -> None:
    if len(events) > 1:
        project_state(events[:-1])  # the log is valid up to its last event
    with pytest.raises(CorruptLogError) as caught:
        project_state(events)
    assert isinstance(caught.value, LogError)
    with pytest.raises(CorruptLogError):
        project_status(events)


@pytest.mark.parametrize("events", CORRUPT_LOGS.values(), ids=CORRUPT_LOGS.keys())
def test_projector_rejects_the_corrupt_event_and_keeps_its_state(events: list[Event]) -> None:
    projector = SessionProjector()
    for event in events[:-1]:
        projector.apply(event)
    before = encoded(projector.state) if events[:-1] else None
    with pytest.raises(CorruptLogError):
        projector.apply(events[-1])
    if before is None:
        assert projector.last_seq == 0
    else:
        assert encoded(projector.state) == before  # nothing of the bad event was folded
        # ... and the projector still accepts the event that validly comes next.
        good = _step(seq=projector.last_seq + 1, step=99)
        assert projector.apply(good).run_step_count == 99


def test_an_empty_log_is_corrupt() -> None:
    with pytest.raises(CorruptLogError):
        project_state([])
    with pytest.raises(CorruptLogError):
        SessionProjector().apply_all([])
    with pytest.raises(CorruptLogError):
        _ = SessionProjector().state


def test_corrupt_log_messages_say_what_is_wrong() -> None:
    with pytest.raises(CorruptLogError, match="seq 3 does not follow seq 1"):
        project_state([_created(), _run(seq=3)])
    with pytest.raises(CorruptLogError, match="someone-else"):
        project_state([_created(), _run(session_id="someone-else")])
    with pytest.raises(CorruptLogError, match=UNKNOWN):
        project_state(CORRUPT_LOGS["finished unknown child"])
    with pytest.raises(CorruptLogError, match=f"{CHILD}#2"):
        project_state(CORRUPT_LOGS["forwarded child seq repeated"])


# --- follow-up messages: queued, taken, remembered by id -------------------------------------


def test_a_queued_message_waits_until_a_step_takes_it() -> None:
    log = Log().started(messages=[UserMessage(content="hi")])
    log.add(MessageQueued, messages=[UserMessage(content="q1")], message_id="m1")
    log.add(MessageQueued, messages=[UserMessage(content="q2")])
    state = log.state()
    assert [m.content for m in state.queued_messages] == ["q1", "q2"]
    assert [m.content for m in state.messages if isinstance(m, UserMessage)] == ["hi"]
    assert state.message_ids["m1"] == MessageReceipt(
        run_id="run-1", messages=[UserMessage(content="q1")], queued=True
    )
    log.add(StepStarted, step=1, taken=1)
    state = log.state()
    assert [m.content for m in state.messages if isinstance(m, UserMessage)] == ["hi", "q1"]
    assert [m.content for m in state.queued_messages] == ["q2"]


def test_a_step_taking_more_than_is_queued_is_a_corrupt_log() -> None:
    log = Log().started()
    log.add(MessageQueued, messages=[UserMessage(content="q1")])
    log.add(StepStarted, step=1, taken=2)
    with pytest.raises(CorruptLogError, match="takes 2 queued messages"):
        log.state()


def test_a_new_run_takes_the_queue_before_its_own_messages() -> None:
    log = Log().started(messages=[UserMessage(content="hi")])
    log.add(Completed, output="done")
    log.add(MessageQueued, messages=[UserMessage(content="late")])
    log.add(
        RunStarted,
        run_id="run-2",
        mode="continue",
        messages=[UserMessage(content="next")],
        message_id="m2",
    )
    state = log.state()
    assert [m.content for m in state.messages if isinstance(m, UserMessage)] == [
        "hi",
        "late",
        "next",
    ]
    assert state.queued_messages == []
    assert (state.status, state.output, state.run_id) == ("running", None, "run-2")
    assert state.message_ids["m2"] == MessageReceipt(
        run_id="run-2", messages=[UserMessage(content="next")]
    )


def test_a_message_taken_while_results_are_missing_waits_for_them() -> None:
    log = Log().started()
    log.add(
        MessageAppended,
        message=AssistantMessage(tool_calls=[ToolCall(id="c1", name="search")]),
    )
    log.add(MessageQueued, messages=[UserMessage(content="q")])
    log.add(StepStarted, step=1, taken=1)
    state = log.state()
    assert [m.content for m in state.deferred_messages if isinstance(m, UserMessage)] == ["q"]
    log.add(
        MessageAppended,
        message=ToolResultMessage(tool_call_id="c1", tool_name="search", content="r"),
    )
    assert isinstance(log.state().messages[-1], UserMessage)
