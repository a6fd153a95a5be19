"""The pure parts of a fork (core/branches): the copy, its ids, its marker, the matching points."""

from __future__ import annotations

import pytest

from helix_agents.branches import branch_log, map_ids
from helix_agents.branches.tree import child_point, parent_point, renamed
from helix_agents.errors import AgentServerError
from helix_agents.events import (
    ChildChunkForwarded,
    Event,
    RunStarted,
    SessionCreated,
    SessionForked,
    SubSessionFinished,
    SubSessionStarted,
    TextDelta,
)
from helix_agents.messages import UserMessage


def _log() -> list[Event]:
    return [
        SessionCreated(
            session_id="s",
            seq=1,
            ts=1.0,
            agent_type="a",
            run_id="r",
            messages=[UserMessage(content="s")],  # a text equal to the id: not an id
        ),
        RunStarted(session_id="s", seq=2, ts=2.0, run_id="r"),
        SubSessionStarted(
            session_id="s",
            seq=3,
            ts=3.0,
            sub_session_id="s-sub-c1",
            agent_type="k",
            tool_call_id="c1",
        ),
        ChildChunkForwarded(
            session_id="s",
            seq=4,
            ts=5.0,
            child_session_id="s-sub-c1",
            child_seq=2,
            chunk=TextDelta(agent_id="s-sub-c1", agent_type="k", delta="s-sub-c1 said s"),
        ),
        SubSessionFinished(
            session_id="s", seq=5, ts=9.0, sub_session_id="s-sub-c1", status="completed"
        ),
    ]


def test_ids_are_mapped_where_a_field_is_one_and_nowhere_else() -> None:
    mapped = map_ids(_log(), {"s": "b", "s-sub-c1": "b-sub-c1"})
    assert [e.session_id for e in mapped] == ["b"] * 5
    forwarded = mapped[3]
    assert isinstance(forwarded, ChildChunkForwarded)
    assert forwarded.child_session_id == "b-sub-c1"
    assert forwarded.chunk.agent_id == "b-sub-c1"
    assert forwarded.chunk.delta == "s-sub-c1 said s"  # text keeps its words
    created = mapped[0]
    assert isinstance(created, SessionCreated)
    assert created.messages == [UserMessage(content="s")]  # text equal to an id is text


def test_the_branch_log_ends_with_its_marker_at_the_next_seq() -> None:
    marker = SessionForked(origin_session_id="s", origin_seq=3)
    log = branch_log(_log()[:3], {"s": "b"}, [], marker)
    assert [e.seq for e in log] == [1, 2, 3, 4]
    assert isinstance(log[3], SessionForked)
    assert log[3].session_id == "b"
    assert log[0].metadata == {"forked_from": "s", "forked_at": "3"}  # type: ignore[union-attr]
    with pytest.raises(AgentServerError, match="session_created"):
        branch_log(_log()[1:3], {"s": "b"}, [], marker)


def test_matching_points_of_a_child_and_of_its_parent() -> None:
    parent = _log()
    child: list[Event] = [
        SessionCreated(session_id="s-sub-c1", seq=1, ts=3.5, agent_type="k", run_id="r"),
        RunStarted(session_id="s-sub-c1", seq=2, ts=4.0, run_id="r"),
        RunStarted(session_id="s-sub-c1", seq=3, ts=6.0, run_id="r"),
    ]
    # the parent's prefix ends at its forward of child seq 2 (ts 5): the child up to seq 2
    assert child_point(parent[:4], "s-sub-c1", child) == 2
    # the child's seq 3 (ts 6): the parent after its forward, before it recorded the end
    assert parent_point(parent, "s-sub-c1", 3, 6.0) == 4
    # the child's seq 1 (ts 3.5): the parent at the child's start, not at the forward of seq 2
    assert parent_point(parent, "s-sub-c1", 1, 3.5) == 3


def test_branch_ids_keep_the_deterministic_shape_of_child_ids() -> None:
    ids = {"s": "b"}
    assert renamed("s-sub-c1", ids) == "b-sub-c1"
    assert renamed("s-remote-c2", ids) == "b-remote-c2"
    assert renamed("s-agent-critic.2", ids) == "b-agent-critic.2"
    assert renamed("other", ids).startswith("other-fork-")
