"""The A2A view of a session log (``helix_agents.bridges.a2a.tasks``), on hand-built logs.

Which runs make a task, what state it is in, and what each log event
streams: a pure fold, checked without a server.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from a2a.types import TaskArtifactUpdateEvent, TaskState, TaskStatusUpdateEvent

from helix_agents import PendingInput
from helix_agents.bridges.a2a.tasks import SessionTasks, split_task_id, task_id_of
from helix_agents.bridges.a2a.wire import helix_metadata, part_value
from helix_agents.events import (
    ApprovalGiven,
    ChildChunkForwarded,
    Completed,
    Event,
    Failed,
    InputRequired,
    Interrupted,
    MessageAppended,
    MessageQueued,
    OutputChunk,
    RunStarted,
    SessionCreated,
    StepRestarted,
    Suspended,
    TextDelta,
    ToolStart,
)
from helix_agents.messages import AssistantMessage, UserMessage

SID = "s1"


def stamped(*events: Event) -> list[Event]:
    """``events`` with the envelope of session ``s1``, seq 1, 2, 3 ..."""
    return [
        msgspec.structs.replace(event, session_id=SID, seq=n, ts=float(n))
        for n, event in enumerate(events, start=1)
    ]


def delta(text: str, agent: str = SID) -> TextDelta:
    return TextDelta(agent_id=agent, agent_type="a", delta=text)


def created(**fields: Any) -> SessionCreated:
    return SessionCreated(
        agent_type="a", run_id="run-1", messages=[UserMessage(content="hi")], **fields
    )


ENTRY = PendingInput(kind="approval", tool_call_id="c1", tool_name="rm", owner_session_id=SID)


def fold(log: list[Event]) -> tuple[SessionTasks, list[Any]]:
    tasks = SessionTasks(SID)
    streamed = [update for event in log for _, update in tasks.apply(event)]
    return tasks, streamed


def test_task_ids_name_their_session_and_first_run() -> None:
    assert task_id_of("s-1.x:y", "run-9") == "s-1.x:y~run-9"
    assert split_task_id("s-1.x:y~run-9") == ("s-1.x:y", "run-9")
    for foreign in ("no-separator", "~run-1", "bad id~run-1", "s1~", ""):
        assert split_task_id(foreign) is None


def test_a_first_run_streams_its_text_as_an_artifact_and_ends_completed() -> None:
    log = stamped(
        created(metadata={"a2a.messageId": "m-1"}),
        RunStarted(run_id="run-1"),
        delta("alpha "),
        delta("beta"),
        ToolStart(agent_id=SID, agent_type="a", tool_call_id="t", tool_name="x"),
        delta("child words", agent="s1-sub-t"),
        MessageAppended(message=AssistantMessage(content="alpha beta")),
        OutputChunk(agent_id=SID, agent_type="a", output={"n": 1}),
        Completed(output={"n": 1}),
    )
    tasks, streamed = fold(log)
    (task,) = tasks.tasks.values()
    assert task.id == "s1~run-1"
    assert task.state == TaskState.TASK_STATE_COMPLETED
    kinds = [type(u).__name__ for u in streamed]
    assert kinds == [
        "TaskArtifactUpdateEvent",  # alpha
        "TaskArtifactUpdateEvent",  # beta, appended
        "TaskStatusUpdateEvent",  # tool_start
        "TaskStatusUpdateEvent",  # a child's text: a chunk, not our response
        "TaskArtifactUpdateEvent",  # the output
        "TaskStatusUpdateEvent",  # completed
    ]
    first, second = streamed[0], streamed[1]
    assert isinstance(first, TaskArtifactUpdateEvent)
    assert isinstance(second, TaskArtifactUpdateEvent)
    assert (first.append, second.append) == (False, True)
    assert second.artifact.parts[0].text == "beta"
    assert [helix_metadata(u.metadata)["sequence"] for u in streamed] == [3, 4, 5, 6, 8, 9]
    chunk = json.loads(helix_metadata(streamed[3].metadata)["chunk"])
    assert (chunk["type"], chunk["agentId"]) == ("text_delta", "s1-sub-t")
    snapshot = tasks.snapshot(task)
    response, output = snapshot.artifacts
    assert response.parts[0].text == "alpha beta"
    assert part_value(output.parts[0]) == {"n": 1}
    history = [(m.role, m.parts[0].text, m.message_id) for m in snapshot.history]
    assert history[0][1:] == ("hi", "m-1")
    assert history[1][1] == "alpha beta"
    assert helix_metadata(snapshot.metadata)["sequence"] == 9


def test_a_restarted_step_sends_the_response_again_whole() -> None:
    log = stamped(
        created(),
        RunStarted(run_id="run-1"),
        delta("one "),
        delta("two "),
        StepRestarted(agent_id=SID, agent_type="a", discard_from=2, discard_deltas=1),
        delta("three"),
    )
    tasks, streamed = fold(log)
    restarted = streamed[2]
    assert isinstance(restarted, TaskArtifactUpdateEvent)
    assert (restarted.append, restarted.artifact.parts[0].text) == (False, "one ")
    (task,) = tasks.tasks.values()
    assert "".join(task.response) == "one three"


def test_waiting_for_people_is_input_required_and_a_resume_continues_the_same_task() -> None:
    log = stamped(
        created(),
        RunStarted(run_id="run-1"),
        InputRequired(agent_id=SID, agent_type="a", pending=[ENTRY]),
        Suspended(reason="approval", tool_call_ids=["c1"]),
        ApprovalGiven(tool_call_id="c1", approved=True),
        RunStarted(run_id="run-2", mode="resume"),
        Completed(output="ok"),
    )
    tasks, streamed = fold(log[:4])
    (task,) = tasks.tasks.values()
    waiting = streamed[-1]
    assert isinstance(waiting, TaskStatusUpdateEvent)
    assert waiting.status.state == TaskState.TASK_STATE_INPUT_REQUIRED
    data = part_value(waiting.status.message.parts[1])
    assert data["pendingInputs"][0]["toolCallId"] == "c1"
    assert task.ends
    for event in log[4:]:
        tasks.apply(event)
    assert list(tasks.tasks) == ["s1~run-1"]  # resumed after a pause: the same task
    assert tasks.task_of_run("run-2") is task
    assert task.state == TaskState.TASK_STATE_COMPLETED


def test_a_turn_after_an_end_is_a_new_task_and_a_queued_message_joins_the_current_one() -> None:
    log = stamped(
        created(),
        RunStarted(run_id="run-1"),
        MessageQueued(messages=[UserMessage(content="also")], message_id="q-1"),
        Interrupted(reason="stop"),
        RunStarted(run_id="run-2", mode="resume", messages=[UserMessage(content="go on")]),
        Failed(error="boom"),
    )
    tasks, _ = fold(log)
    first, second = tasks.tasks.values()
    assert first.state == TaskState.TASK_STATE_CANCELED
    assert first.status_message() is not None
    assert [m.parts[0].text for m in first.history] == ["hi", "also"]
    assert first.history[1].message_id == "q-1"
    assert second.id == "s1~run-2"
    assert second.state == TaskState.TASK_STATE_FAILED
    assert [m.parts[0].text for m in second.history] == ["go on"]
    assert tasks.current is second


def test_a_forwarded_child_chunk_is_a_status_update_with_the_childs_chunk() -> None:
    child = delta("hello", agent="s1-remote-c")
    log = stamped(
        created(),
        RunStarted(run_id="run-1"),
        ChildChunkForwarded(child_session_id="s1-remote-c", child_seq=4, chunk=child),
    )
    _, streamed = fold(log)
    (update,) = streamed
    assert isinstance(update, TaskStatusUpdateEvent)
    meta = helix_metadata(update.metadata)
    assert meta["sequence"] == 3
    assert json.loads(meta["chunk"])["delta"] == "hello"
