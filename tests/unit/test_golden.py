"""The committed golden session must keep decoding and projecting to its recorded state.

``tests/golden/parent_session.jsonl`` is a log written by an earlier version of the
code; ``parent_session.state.json`` is what it folded to then. Both are regenerated only
on purpose, by ``tests/golden/make_golden.py``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import msgspec
import pytest

from helix_agents import StreamItem
from helix_agents.events import (
    ApprovalGiven,
    ApprovalRequested,
    ChildChunkForwarded,
    ClientToolOwnershipRecorded,
    ClientToolPending,
    ClientToolResultSubmitted,
    Event,
    SubAgentEnd,
    SubAgentStart,
    ToolEnd,
    ToolStart,
    UsageRecorded,
)
from helix_agents.log import (
    decode_jsonl,
    encode_event,
    project_state,
    project_status,
    project_stream,
)

GOLDEN = Path(__file__).parents[1] / "golden"
LOG = GOLDEN / "parent_session.jsonl"
STATE = GOLDEN / "parent_session.state.json"
PARENT = "golden-parent"


@pytest.fixture(scope="module")
def log() -> list[Event]:
    return decode_jsonl(LOG.read_bytes())


def _make_golden() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_golden", GOLDEN / "make_golden.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_golden_log_projects_to_the_recorded_state(log: list[Event]) -> None:
    recorded = msgspec.json.decode(STATE.read_bytes())
    assert msgspec.json.decode(msgspec.json.encode(project_state(log))) == recorded


def test_golden_log_is_a_completed_parent_session(log: list[Event]) -> None:
    assert [event.seq for event in log] == list(range(1, len(log) + 1))
    assert {event.session_id for event in log} == {PARENT}
    status = project_status(log)
    assert status.status == "completed"
    assert status.latest_sequence == len(log) == 53
    assert status.output == {"title": "Lyon in brief", "words": 200, "published": True}


def test_golden_log_covers_children_hitl_and_usage(log: list[Event]) -> None:
    kinds = {type(event) for event in log}
    for cls in (
        ChildChunkForwarded,
        ClientToolPending,
        ClientToolResultSubmitted,
        ClientToolOwnershipRecorded,
        ApprovalRequested,
        ApprovalGiven,
        UsageRecorded,
    ):
        assert cls in kinds, cls.__name__
    usage_kinds = {event.kind for event in log if isinstance(event, UsageRecorded)}
    assert usage_kinds == {"tokens", "tool", "subagent", "custom"}


def test_every_recorded_field_survives_a_decode_and_encode() -> None:
    """Decoding drops nothing: re-encoding keeps every recorded field and value.

    (New fields with defaults may appear in the output; none may go missing.)
    """
    for number, line in enumerate(LOG.read_bytes().splitlines(), start=1):
        recorded = msgspec.json.decode(line)
        again = msgspec.json.decode(encode_event(decode_jsonl(line)[0]))
        _assert_contains(again, recorded, f"line {number}")


def _assert_contains(actual: Any, recorded: Any, where: str) -> None:
    if isinstance(recorded, dict):
        assert isinstance(actual, dict), where
        for key, value in recorded.items():
            assert key in actual, f"{where}: {key}"
            _assert_contains(actual[key], value, f"{where}.{key}")
    else:
        assert actual == recorded, where


def test_generator_still_describes_the_committed_log(log: list[Event]) -> None:
    make_golden = _make_golden()
    assert make_golden.build_log() == log
    assert msgspec.json.decode(make_golden.render_state(log)) == msgspec.json.decode(
        STATE.read_bytes()
    )


# --- the invariant chunk order of a sub-agent call (DESIGN.md section 8.1) ---------


def _check_subagent_calls(stream: list[StreamItem]) -> int:
    """Check every ``subagent__*`` call on the stream; return how many there were.

    tool_start(subagent__X) -> subagent_start -> the child's (and its descendants')
    chunks -> subagent_end -> tool_end, for the call's own agent.
    """
    chunks = [item.chunk for item in stream]
    calls = 0
    for index, start in enumerate(chunks):
        if not (isinstance(start, ToolStart) and start.tool_name.startswith("subagent__")):
            continue
        calls += 1
        caller, call_id = start.agent_id, start.tool_call_id
        assert index + 1 < len(chunks), "subagent_start follows tool_start"
        sub_start = chunks[index + 1]
        assert isinstance(sub_start, SubAgentStart), "subagent_start follows tool_start"
        assert (sub_start.agent_id, sub_start.tool_call_id) == (caller, call_id)
        assert sub_start.sub_agent_type == start.tool_name.removeprefix("subagent__")
        child = sub_start.sub_agent_id
        ends = [
            position
            for position, chunk in enumerate(chunks)
            if position > index + 1
            and isinstance(chunk, SubAgentEnd | ToolEnd)
            and (chunk.agent_id, chunk.tool_call_id) == (caller, call_id)
        ]
        assert ends, "the call ends"
        end = ends[0]
        inner = chunks[index + 2 : end]
        assert inner, "the child's chunks appear between subagent_start and subagent_end"
        for chunk in inner:
            assert chunk.agent_id == child or chunk.agent_id.startswith(f"{child}-"), chunk
        sub_end = chunks[end]
        assert isinstance(sub_end, SubAgentEnd), "subagent_end comes before tool_end"
        assert sub_end.sub_agent_id == child
        assert sub_end.success is True
        assert end + 1 < len(chunks), "tool_end follows subagent_end"
        tool_end = chunks[end + 1]
        assert isinstance(tool_end, ToolEnd), "tool_end follows subagent_end"
        assert (tool_end.agent_id, tool_end.tool_call_id) == (caller, call_id)
        assert tool_end.tool_name == start.tool_name
        assert tool_end.error is None
    return calls


def test_golden_stream_keeps_the_subagent_chunk_order(log: list[Event]) -> None:
    stream = project_stream(log)
    # The parent's call of the researcher, and the researcher's call of the searcher.
    assert _check_subagent_calls(stream) == 2
    agents = {item.chunk.agent_id for item in stream}
    assert agents == {
        PARENT,
        f"{PARENT}-sub-call_research",
        f"{PARENT}-sub-call_research-sub-call_search",
    }


def test_golden_stream_positions_are_the_parent_seqs(log: list[Event]) -> None:
    stream = project_stream(log)
    sequences = [item.sequence for item in stream]
    assert sequences == sorted(set(sequences))
    by_seq = {event.seq: event for event in log}
    for item in stream:
        event = by_seq[item.sequence]
        expected = event.chunk if isinstance(event, ChildChunkForwarded) else event
        assert item.chunk == expected


def _swap(items: list[StreamItem], first: type[Any], second: type[Any]) -> list[StreamItem]:
    """Swap the first chunk of class ``first`` with the next chunk of class ``second``."""
    items = list(items)
    i = next(n for n, item in enumerate(items) if type(item.chunk) is first)
    j = next(n for n in range(i + 1, len(items)) if type(items[n].chunk) is second)
    items[i], items[j] = items[j], items[i]
    return items


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(lambda s: _swap(s, ToolStart, SubAgentStart), id="subagent_start first"),
        pytest.param(lambda s: _swap(s, SubAgentEnd, ToolEnd), id="tool_end before subagent_end"),
        pytest.param(
            lambda s: [i for i in s if type(i.chunk) is not SubAgentStart], id="no subagent_start"
        ),
        pytest.param(
            lambda s: [i for i in s if type(i.chunk) is not SubAgentEnd], id="no subagent_end"
        ),
        pytest.param(lambda s: [i for i in s if i.chunk.agent_id == PARENT], id="no child chunks"),
    ],
)
def test_the_order_check_catches_a_broken_order(log: list[Event], broken: Any) -> None:
    with pytest.raises(AssertionError):
        _check_subagent_calls(broken(project_stream(log)))
