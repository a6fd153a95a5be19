"""The front-end projections on hand-made streams: the cases the npm-client tests do not reach.

``tests/integration/test_front_end_streams.py`` reads real trees with the real
client libraries; these check the projectors' answers to an approval, an
expiry, an interrupted run, a custom chunk and a resume inside a paused tree.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from helix_agents.events import (
    Chunk,
    CustomChunk,
    InputRequired,
    PendingInput,
    SubAgentStart,
    TextDelta,
    ToolStart,
)
from helix_agents.protocol import ChunkEvent, ErrorEvent, TransportEvent
from helix_agents.server.streams.ag_ui import AgUiProjector
from helix_agents.server.streams.ai_sdk import AiSdkProjector
from helix_agents.server.streams.front_end import Projector, project

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
