"""The replay views in ``helix_agents.server.cli.timeline``: one line per event, any valid log."""

from __future__ import annotations

from hypothesis import given, strategies as st
from strategies import events, session_logs

from helix_agents import StreamItem
from helix_agents.events import ChildChunkForwarded, Chunk, Event, SubAgentStart, TextDelta
from helix_agents.log import project_state
from helix_agents.server.cli.replay import format_state, replay_lines
from helix_agents.server.cli.timeline import (
    StreamPrinter,
    format_event,
    format_time,
    tag_of,
)


@given(events())
def test_every_event_is_one_line_with_seq_and_tag(event: Event) -> None:
    line = format_event(event)
    assert "\n" not in line
    assert "\r" not in line
    seq, _time, tag = line.split()[:3]
    assert int(seq) == event.seq
    assert tag == tag_of(event)


@given(session_logs(), st.data())
def test_any_valid_log_and_prefix_replays(log: list[Event], data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=1, max_value=len(log)))
    prefix = log[:cut]
    lines = replay_lines(prefix, total_seq=len(log))
    for line, event in zip(lines[:cut], prefix, strict=True):
        seq, _time, tag = line.split()[:3]
        assert (int(seq), tag) == (event.seq, tag_of(event))
    assert lines[cut] == ""
    assert lines[cut + 1 : -1] == format_state(project_state(prefix), total_seq=len(log))
    assert lines[-1].startswith("  tool calls by agent ")


def test_time_is_utc_with_milliseconds() -> None:
    assert format_time(1_700_000_000.0) == "22:13:20.000"
    assert format_time(1_700_000_000.1239) == "22:13:20.123"
    assert format_time(1e300) == "??:??:??.???"


def test_text_is_quoted_escaped_and_cut() -> None:
    event = TextDelta(session_id="s", seq=4, ts=0.0, agent_id="s", agent_type="a", delta="a\nb")
    assert format_event(event).endswith("'a\\nb'")
    long = TextDelta(session_id="s", seq=4, ts=0.0, agent_id="s", agent_type="a", delta="x" * 500)
    assert len(format_event(long)) < 120


def test_a_decision_names_who_decided() -> None:
    from helix_agents.events import ApprovalGiven

    given = ApprovalGiven(
        session_id="s",
        seq=9,
        ts=0.0,
        tool_call_id="c1",
        approved=False,
        reason="no",
        decided_by="Ada",
    )
    assert format_event(given).endswith("(c1) denied by 'Ada' reason='no'")
    unnamed = ApprovalGiven(session_id="s", seq=9, ts=0.0, tool_call_id="c1", approved=True)
    assert format_event(unnamed).endswith("(c1) approved")


def test_stream_printer_indents_children_and_grandchildren() -> None:
    def start(agent: str, child: str, seq: int) -> SubAgentStart:
        return SubAgentStart(
            session_id=agent, seq=seq, ts=0.0, agent_id=agent, agent_type="t",
            sub_agent_id=child, sub_agent_type="t", tool_call_id="c", parent_session_id=agent,
        )  # fmt: skip

    def text(agent: str, seq: int) -> TextDelta:
        return TextDelta(
            session_id=agent, seq=seq, ts=0.0, agent_id=agent, agent_type="t", delta=""
        )

    printer = StreamPrinter("root")
    chunks: list[Chunk] = [start("root", "kid", 1), start("kid", "grandkid", 2)]
    chunks += [text("grandkid", 3), text("kid", 4), text("root", 5)]
    indents = []
    for chunk in chunks:
        line = printer.format(StreamItem(sequence=chunk.seq, chunk=chunk))
        indents.append(len(line) - len(line.lstrip()))
    assert indents == [2, 6, 10, 6, 2]


def test_forwarded_chunk_names_the_child() -> None:
    inner = TextDelta(session_id="kid", seq=7, ts=0.0, agent_id="kid", agent_type="t", delta="hi")
    event = ChildChunkForwarded(
        session_id="root", seq=9, ts=0.0, child_session_id="kid", child_seq=7, chunk=inner
    )
    assert format_event(event).endswith("child_chunk_forwarded  kid text_delta 'hi' [child seq 7]")


def test_replay_counts_tool_calls_per_agent_for_the_whole_tree() -> None:
    from helix_agents.events import ChildChunkForwarded, ToolStart
    from helix_agents.server.cli.replay import tree_tool_calls

    def start(agent: str, agent_type: str, name: str, seq: int) -> ToolStart:
        return ToolStart(
            session_id="root",
            seq=seq,
            ts=0.0,
            agent_id=agent,
            agent_type=agent_type,
            tool_call_id=f"c{seq}",
            tool_name=name,
            arguments={},
        )

    child = "root-sub-c1"
    events = [
        start("root", "lead", "subagent__researcher", 1),
        ChildChunkForwarded(
            session_id="root",
            seq=2,
            ts=0.0,
            child_session_id=child,
            child_seq=5,
            chunk=start(child, "researcher", "search", 5),
        ),
        ChildChunkForwarded(
            session_id="root",
            seq=3,
            ts=0.0,
            child_session_id=child,
            child_seq=6,
            chunk=start(child, "researcher", "search", 6),
        ),
        ChildChunkForwarded(
            session_id="root",
            seq=4,
            ts=0.0,
            child_session_id=child,
            child_seq=7,
            chunk=start(child, "researcher", "__finish__", 7),
        ),
        start("root", "lead", "__finish__", 5),
    ]
    assert tree_tool_calls(events) == {"lead": 0, "researcher": 2}
