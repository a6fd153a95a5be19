"""The front-end projections on hand-made streams: the cases the npm-client tests do not reach.

``tests/integration/test_front_end_streams.py`` reads real trees with the real
client libraries; these check the projectors' answers to an approval, an
expiry, an interrupted run, a custom chunk and a resume inside a paused tree.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

from helix_agents.events import (
    Chunk,
    CustomChunk,
    InputRequired,
    OutputChunk,
    PartialOutput,
    PendingInput,
    ReasoningDelta,
    SubAgentStart,
    TextDelta,
    ToolStart,
)
from helix_agents.protocol import ChunkEvent, EndEvent, ErrorEvent, TransportEvent
from helix_agents.server.streams.ag_ui import AgUiProjector
from helix_agents.server.streams.ai_sdk import AiSdkProjector
from helix_agents.server.streams.front_end import Projector, project
from helix_agents.server.streams.tree import UNSENT, json_patch

ROOT = "s-1"
CHILD = "s-1-sub-c1"


def _chunks() -> list[Chunk]:
    approval = PendingInput(
        kind="approval",
        tool_call_id="c2-x",
        tool_name="delete",
        arguments={"path": "/tmp/a"},
        owner_session_id=CHILD,
        path=[ROOT, CHILD],
        expires_at=0.0,
    )
    return [
        TextDelta(agent_id=ROOT, agent_type="boss", delta="Asking."),
        ToolStart(agent_id=ROOT, agent_type="boss", tool_call_id="c1", tool_name="subagent__w"),
        SubAgentStart(
            agent_id=ROOT,
            agent_type="boss",
            sub_agent_id=CHILD,
            sub_agent_type="w",
            tool_call_id="c1",
            parent_session_id=ROOT,
        ),
        TextDelta(agent_id=CHILD, agent_type="w", delta="May I delete it?"),
        CustomChunk(agent_id=CHILD, agent_type="w", name="progress", data={"done": 1}),
        InputRequired(agent_id=CHILD, agent_type="w", pending=[approval]),
        InputRequired(agent_id=ROOT, agent_type="boss", pending=[approval]),
        TextDelta(agent_id=CHILD, agent_type="w", delta="Deleted."),
    ]


def _events(end: TransportEvent) -> list[TransportEvent]:
    items: list[TransportEvent] = [
        ChunkEvent(chunk=chunk, sequence=seq) for seq, chunk in enumerate(_chunks(), start=3)
    ]
    return [*items, end]


def _events_of(chunks: list[Chunk], end: TransportEvent) -> list[TransportEvent]:
    items: list[TransportEvent] = [
        ChunkEvent(chunk=chunk, sequence=seq) for seq, chunk in enumerate(chunks, start=1)
    ]
    return [*items, end]


async def _aiter(events: list[TransportEvent]) -> AsyncIterator[TransportEvent]:
    for event in events:
        yield event


async def _frames(projector: Projector, events: list[TransportEvent], cut: int = 0) -> list[Any]:
    return [frame.data async for frame in project(_aiter(events), projector, cut)]


async def test_ag_ui_an_approval_is_an_interrupt_then_the_run_goes_on() -> None:
    end = ErrorEvent(error="interrupted: user left", recoverable=True)
    events = await _frames(AgUiProjector(ROOT), _events(end))
    types = [event["type"] for event in events]
    finished = next(event for event in events if event["type"] == "RUN_FINISHED")
    (interrupt,) = finished["outcome"]["interrupts"]
    assert interrupt["id"] == "c2-x"
    assert interrupt["reason"] == "approval"
    assert interrupt["subagentRunId"] == CHILD
    assert interrupt["expiresAt"] == "1970-01-01T00:00:00+00:00"
    assert interrupt["metadata"]["arguments"] == {"path": "/tmp/a"}
    custom = [event for event in events if event["type"] == "CUSTOM"]
    assert [(c["name"], c.get("subagentRunId")) for c in custom] == [
        ("progress", CHILD),
        ("helix.input_required", CHILD),
    ]
    assert custom[0]["value"]["data"] == {"done": 1}
    # After the interrupt: a new run, the child open again, its text, then the end.
    after = types[types.index("RUN_FINISHED") + 1 :]
    assert after[:2] == ["RUN_STARTED", "SUBAGENT_STARTED"]
    assert after[-1] == "RUN_ERROR"
    assert events[-1]["code"] == "INTERRUPTED"
    assert events[types.index("RUN_FINISHED") + 1]["runId"] == f"{ROOT}:run-2"


async def test_ag_ui_resumed_inside_a_paused_tree_starts_with_the_next_run() -> None:
    end = ErrorEvent(error="failed", recoverable=False)
    events = _events(end)
    paused_at = 3 + _chunks().index(_chunks()[6])  # the root's input_required
    resumed = await _frames(AgUiProjector(ROOT), events, paused_at)
    assert [e["type"] for e in resumed[:4]] == [
        "RUN_STARTED",
        "SUBAGENT_STARTED",
        "STEP_STARTED",
        "TEXT_MESSAGE_START",
    ]
    assert resumed[0]["runId"] == f"{ROOT}:run-2"
    assert resumed[-1] == {"type": "RUN_ERROR", "message": "failed", "code": "FAILED"}


async def test_ai_sdk_an_approval_is_listed_and_a_failed_end_is_an_error_part() -> None:
    end = ErrorEvent(error="failed: no disk", recoverable=False)
    parts = await _frames(AiSdkProjector(ROOT), _events(end))
    (asked,) = [part for part in parts if part["type"] == "data-input-required"]
    assert asked["data"]["agentId"] == ROOT
    assert [(p["kind"], p["toolCallId"]) for p in asked["data"]["pending"]] == [
        ("approval", "c2-x")
    ]
    # Only the root's list becomes a part; the child's notice is in it.
    assert sum(part["type"] == "data-input-required" for part in parts) == 1
    (custom,) = [part for part in parts if part["type"] == "data-custom"]
    assert (custom["data"]["name"], custom["data"]["agentId"]) == ("progress", CHILD)
    # The child's text after the answer ends first; no root step is open after the pause.
    assert parts[-3:] == [
        {"type": "text-end", "id": f"text:{CHILD}:10"},
        {"type": "error", "errorText": "failed: no disk"},
        {
            "type": "finish",
            "finishReason": "error",
            "messageMetadata": {
                "status": "failed",
                "error": "failed: no disk",
                "recoverable": False,
            },
        },
    ]
    # Every text part opened is ended, and never twice.
    starts = [part["id"] for part in parts if part["type"] == "text-start"]
    ends = [part["id"] for part in parts if part["type"] == "text-end"]
    assert sorted(starts) == sorted(ends)
    assert len(set(ends)) == len(ends)


# --- reasoning and partial output (issue 33) ---------------------------------------


def _apply(document: Any, patch: list[dict[str, Any]]) -> Any:
    """RFC 6902 ``add`` / ``replace`` / ``remove`` (what ``json_patch`` writes), by hand."""
    document = copy.deepcopy(document)
    for op in patch:
        *parents, last = [
            token.replace("~1", "/").replace("~0", "~") for token in op["path"].split("/")[1:]
        ]
        target = document
        for token in parents:
            target = target[int(token)] if isinstance(target, list) else target[token]
        key: Any = int(last) if isinstance(target, list) else last
        if op["op"] == "remove":
            del target[key]
        elif isinstance(target, list) and op["op"] == "add":
            target.insert(key, copy.deepcopy(op["value"]))
        else:
            target[key] = copy.deepcopy(op["value"])
    return document


def test_json_patch_turns_what_a_reader_holds_into_the_new_value() -> None:
    steps: list[Any] = [
        {"title": "Ly"},
        {"title": "Lyon", "days": ["a"]},
        {"title": "Lyon", "days": ["a", "b"], "a/b~c": 1},
        {"title": "Lyon", "days": ["x"], "a/b~c": True},
        {"days": [], "n": None},
    ]
    state: dict[str, Any] = {"mine": 1}
    held: Any = UNSENT
    for value in steps:
        patch = json_patch("/output", held, value)
        state = _apply(state, patch)
        assert state == {"mine": 1, "output": value}
        held = value
    assert json_patch("/output", held, held) == []
    assert json_patch("/output", {"a": 1}, {"a": 1, "b": "x"}) == [
        {"op": "add", "path": "/output/b", "value": "x"}
    ]
    assert json_patch("/output", {"s": "Ly"}, {"s": "Lyon"}) == [
        {"op": "replace", "path": "/output/s", "value": "Lyon"}
    ]


def _reasoned() -> list[Chunk]:
    return [
        ReasoningDelta(agent_id=ROOT, agent_type="boss", delta="Think "),
        ReasoningDelta(agent_id=ROOT, agent_type="boss", delta="first."),
        TextDelta(agent_id=ROOT, agent_type="boss", delta="Answer."),
        ReasoningDelta(agent_id=ROOT, agent_type="boss", delta="Again."),
        PartialOutput(agent_id=ROOT, agent_type="boss", output={"a": "x"}),
        PartialOutput(agent_id=ROOT, agent_type="boss", output={"a": "xy", "b": [1]}),
        OutputChunk(agent_id=ROOT, agent_type="boss", output={"a": "xyz", "b": [1, 2]}),
    ]


async def test_ai_sdk_reasoning_parts_and_the_output_updated_in_place() -> None:
    frames = await _frames(AiSdkProjector(ROOT), _events_of(_reasoned(), EndEvent(output="done")))
    kinds = [(f["type"], f.get("id")) for f in frames]
    reasoning = [k for k in kinds if k[0].startswith("reasoning-")]
    first, second = f"reasoning:{ROOT}:1", f"reasoning:{ROOT}:4"
    assert reasoning == [
        ("reasoning-start", first),
        ("reasoning-delta", first),
        ("reasoning-delta", first),
        ("reasoning-end", first),
        ("reasoning-start", second),
        ("reasoning-delta", second),
        ("reasoning-end", second),
    ]
    # Reasoning ends before the text starts; the second block ends before the step does.
    assert kinds.index(("reasoning-end", first)) < kinds.index(("text-start", f"text:{ROOT}:3"))
    assert kinds.index(("reasoning-end", second)) < kinds.index(("finish-step", None))
    outputs = [f["data"] for f in frames if f["type"] == "data-output"]
    assert [(o["output"], o.get("partial")) for o in outputs] == [
        ({"a": "x"}, True),
        ({"a": "xy", "b": [1]}, True),
        ({"a": "xyz", "b": [1, 2]}, None),
    ]
    assert {f["id"] for f in frames if f["type"] == "data-output"} == {ROOT}


async def test_ag_ui_reasoning_messages_and_the_output_as_state_deltas() -> None:
    frames = await _frames(AgUiProjector(ROOT), _events_of(_reasoned(), EndEvent(output="done")))
    kinds = [f["type"] for f in frames]
    assert kinds.count("REASONING_START") == kinds.count("REASONING_END") == 2
    assert kinds.count("REASONING_MESSAGE_START") == kinds.count("REASONING_MESSAGE_END") == 2
    content = [f["delta"] for f in frames if f["type"] == "REASONING_MESSAGE_CONTENT"]
    assert content == ["Think ", "first.", "Again."]
    assert kinds.index("REASONING_END") < kinds.index("TEXT_MESSAGE_START")
    state: dict[str, Any] = {}
    for frame in frames:
        if frame["type"] == "STATE_DELTA":
            state = _apply(state, frame["delta"])
    assert state == {"output": {"a": "xyz", "b": [1, 2]}}  # the validated output last
    assert kinds.count("STATE_DELTA") == 3


async def test_ag_ui_a_reader_resumed_after_partial_outputs_gets_the_output_added_whole() -> None:
    approval = PendingInput(
        kind="approval", tool_call_id="c9", tool_name="pay", owner_session_id=ROOT, path=[ROOT]
    )
    chunks: list[Chunk] = [
        PartialOutput(agent_id=ROOT, agent_type="boss", output={"a": "x"}),
        InputRequired(agent_id=ROOT, agent_type="boss", pending=[approval]),
        PartialOutput(agent_id=ROOT, agent_type="boss", output={"a": "xy"}),
        OutputChunk(agent_id=ROOT, agent_type="boss", output={"a": "xyz"}),
    ]
    for cut in (1, 2):  # resumed inside the run, and at its pause
        frames = await _frames(AgUiProjector(ROOT), _events_of(chunks, EndEvent()), cut)
        deltas = [f["delta"] for f in frames if f["type"] == "STATE_DELTA"]
        assert deltas[0] == [{"op": "add", "path": "/output", "value": {"a": "xy"}}], cut
        state: dict[str, Any] = {}
        for delta in deltas:
            state = _apply(state, delta)
        assert state == {"output": {"a": "xyz"}}
