"""The inspector's fold of a root's stream (``server/ui/view.py``), rule by rule."""

from __future__ import annotations

from typing import Any

import msgspec

from helix_agents.events import (
    InputRequired,
    OutputChunk,
    PendingInput,
    StepRestarted,
    SubAgentEnd,
    SubAgentStart,
    TextDelta,
    ToolEnd,
    ToolStart,
)
from helix_agents.log.state import StreamItem
from helix_agents.server.ui import fold_view

ROOT = "r"
CHILD = "r-sub-c1"


def items(*chunks: Any) -> list[StreamItem]:
    return [
        StreamItem(sequence=seq, chunk=msgspec.structs.replace(chunk, seq=seq))
        for seq, chunk in enumerate(chunks, start=2)
    ]


def env(agent: str = ROOT) -> dict[str, Any]:
    return {
        "session_id": ROOT,
        "seq": 0,
        "ts": 0.0,
        "agent_id": agent,
        "agent_type": "lead" if agent == ROOT else "helper",
    }


def entries(view: Any, agent: str) -> list[Any]:
    return msgspec.to_builtins(view.agents[agent].entries)


def test_text_deltas_join_until_something_else_is_said() -> None:
    view = fold_view(
        ROOT,
        "lead",
        items(
            TextDelta(**env(), delta="Hello "),
            TextDelta(**env(), delta="there."),
            ToolStart(**env(), tool_call_id="t1", tool_name="look", arguments={"q": 1}),
            ToolEnd(**env(), tool_call_id="t1", tool_name="look", result=[1]),
            TextDelta(**env(), delta="Done."),
        ),
    )
    assert entries(view, ROOT) == [
        {"kind": "text", "text": "Hello there."},
        {
            "kind": "tool",
            "toolCallId": "t1",
            "toolName": "look",
            "arguments": {"q": 1},
            "result": [1],
            "error": None,
            "done": True,
            "seq": 4,  # its tool_start's: where "fork here" forks
        },
        {"kind": "text", "text": "Done."},
    ]
    assert view.at == 6


def test_a_restarted_step_drops_its_cut_text_in_characters() -> None:
    view = fold_view(
        ROOT,
        "lead",
        items(
            SubAgentStart(
                **env(),
                sub_agent_id=CHILD,
                sub_agent_type="helper",
                tool_call_id="c1",
                parent_session_id=ROOT,
            ),
            TextDelta(**env(CHILD), delta="kept. "),
            TextDelta(**env(CHILD), delta="cut 🙂"),
            StepRestarted(**env(CHILD), step=2, discard_deltas=1, discard_chars=5),
            TextDelta(**env(CHILD), delta="again"),
        ),
    )
    assert entries(view, CHILD) == [{"kind": "text", "text": "kept. again"}]
    assert view.agents[CHILD].parent_id == ROOT


def test_a_child_ends_with_its_subagent_end() -> None:
    start = {"sub_agent_id": CHILD, "sub_agent_type": "helper", "tool_call_id": "c1"}
    view = fold_view(
        ROOT,
        "lead",
        items(
            SubAgentStart(**env(), **start, parent_session_id=ROOT),
            SubAgentEnd(**env(), **start, parent_session_id=ROOT, success=False, error="x"),
        ),
    )
    assert view.agents[CHILD].status == "failed"
    assert entries(view, ROOT) == [{"kind": "agent", "agentId": CHILD}]


def test_pending_inputs_are_the_roots_list_until_each_call_goes_on() -> None:
    ask = PendingInput(kind="approval", tool_call_id="t9", tool_name="hold", owner_session_id=CHILD)
    view = fold_view(
        ROOT,
        "lead",
        items(
            InputRequired(**env(CHILD), pending=[ask]),
            InputRequired(**env(), pending=[ask]),
        ),
    )
    assert [entry.tool_call_id for entry in view.pending] == ["t9"]
    assert view.agents[ROOT].status == view.agents[CHILD].status == "paused"
    view.apply(items(ToolStart(**env(CHILD), tool_call_id="t9", tool_name="hold"))[0])
    assert view.pending == []
    assert view.agents[CHILD].status == "running"


def test_a_finish_call_is_not_shown_its_output_is() -> None:
    view = fold_view(
        ROOT,
        "lead",
        items(
            ToolStart(**env(), tool_call_id="f1", tool_name="__finish__", arguments={"a": 1}),
            ToolEnd(**env(), tool_call_id="f1", tool_name="__finish__", error="bad output"),
            ToolStart(**env(), tool_call_id="f2", tool_name="__finish__", arguments={"a": 2}),
            ToolEnd(**env(), tool_call_id="f2", tool_name="__finish__", result="output accepted"),
            OutputChunk(**env(), output={"a": 2}),
        ),
    )
    assert entries(view, ROOT) == [{"kind": "output", "output": {"a": 2}, "partial": False}]
    assert view.at == 6


def test_what_the_user_sent_is_folded_where_its_seq_falls_and_splits_the_text() -> None:
    """The items are at seqs 2, 3 and 4; the user's turns at 1, 3 and 9 (unsorted)."""
    view = fold_view(
        ROOT,
        "lead",
        items(
            TextDelta(**env(), delta="One."),
            TextDelta(**env(), delta=" Two."),
            TextDelta(**env(), delta=" Three."),
        ),
        said=[(9, ["last"]), (1, ["hi", "there"]), (3, ["wait"])],
    )
    assert entries(view, ROOT) == [
        {"kind": "user", "text": "hi", "seq": 1},
        {"kind": "user", "text": "there", "seq": 1},
        {"kind": "text", "text": "One. Two."},
        {"kind": "user", "text": "wait", "seq": 3},
        {"kind": "text", "text": " Three."},
        {"kind": "user", "text": "last", "seq": 9},
    ]
    assert view.at == 9
